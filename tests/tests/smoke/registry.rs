use std::time::Duration;

use lakesink_tests::{Stack, unique, unreachable};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client")
}

async fn get_json(url: &str) -> Value {
    let resp = client()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("Apicurio Registry", url, e)));
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.json().await.expect("json body")
}

/// Registers an Avro schema through the native v3 API, then reads it back by globalId and by
/// contentId (v3 and v2), and through the Confluent-compatible API by its contentId.
#[tokio::test]
async fn register_a_schema_and_read_it_back_by_id() {
    let stack = Stack::from_env();
    let base = &stack.registry_url;
    let name = unique("smoke");
    let schema = json!({
        "type": "record", "name": name, "namespace": "lakesink.smoke",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": null}]
    });
    let url = format!("{base}/apis/registry/v3/groups/default/artifacts");
    let body = json!({
        "artifactId": format!("{name}-value"),
        "artifactType": "AVRO",
        "firstVersion": {"content": {"content": schema.to_string(), "contentType": "application/json"}}
    });
    let resp = client()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("Apicurio Registry", base, e)));
    assert!(resp.status().is_success(), "POST {url}: {}", resp.status());
    let created: Value = resp.json().await.expect("json");
    let global_id = created["version"]["globalId"].as_i64().expect("globalId");
    let content_id = created["version"]["contentId"].as_i64().expect("contentId");

    for url in [
        format!("{base}/apis/registry/v3/ids/globalIds/{global_id}"),
        format!("{base}/apis/registry/v3/ids/contentIds/{content_id}"),
        format!("{base}/apis/registry/v2/ids/globalIds/{global_id}"),
    ] {
        assert_eq!(get_json(&url).await, schema, "{url}");
    }
    let ccompat = get_json(&format!("{base}/apis/ccompat/v7/schemas/ids/{content_id}")).await;
    let text = ccompat["schema"].as_str().expect("ccompat schema string");
    assert_eq!(
        serde_json::from_str::<Value>(text).expect("schema json"),
        schema
    );
}
