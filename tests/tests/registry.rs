//! The registry client against the real Apicurio Registry, through each of its APIs.

use lakesink_model::Classify;
use std::time::Duration;

use lakesink_schema_registry::registry::{Backoff, NamedSchema};
use lakesink_schema_registry::{
    Api, HttpRegistry, HttpRegistryConfig, IdKind, RegistryError, SchemaRef, SchemaResolver,
};
use lakesink_tests::{Stack, unique, unreachable};
use serde_json::{Value, json};

struct Registered {
    global_id: i64,
    content_id: i64,
}

/// Registers `schema` as artifact `id` (version 1) with the given references, via the v3 API.
async fn register(stack: &Stack, id: &str, schema: &Value, refs: &[(&str, &str)]) -> Registered {
    let references: Vec<Value> = refs
        .iter()
        .map(|(name, artifact)| json!({"groupId": "default", "artifactId": artifact, "version": "1", "name": name}))
        .collect();
    let body = json!({
        "artifactId": id,
        "artifactType": "AVRO",
        "firstVersion": {"content": {
            "content": schema.to_string(), "contentType": "application/json", "references": references
        }}
    });
    let url = format!(
        "{}/apis/registry/v3/groups/default/artifacts",
        stack.registry_url
    );
    let resp = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("Apicurio Registry", &stack.registry_url, e)
            )
        });
    let status = resp.status();
    let created: Value = resp.json().await.expect("json");
    assert!(status.is_success(), "register {id}: {status} {created}");
    Registered {
        global_id: created["version"]["globalId"].as_i64().expect("globalId"),
        content_id: created["version"]["contentId"].as_i64().expect("contentId"),
    }
}

fn client(stack: &Stack, api: Api) -> HttpRegistry {
    let mut config = HttpRegistryConfig::new(&stack.registry_url);
    config.api = Some(api);
    HttpRegistry::new(config).expect("client")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).expect("schema json")
}

/// An Envelope that refers to a Source record, which refers to a Block record: the shape the
/// Apicurio 3.x converter registers for Debezium (nested records as referenced artifacts).
#[tokio::test]
async fn resolves_references_recursively_through_every_api() {
    let stack = Stack::from_env();
    let ns = unique("lakesink_test");
    let block = json!({"type": "record", "name": "Block", "namespace": ns,
        "fields": [{"name": "id", "type": "string"}]});
    let source = json!({"type": "record", "name": "Source", "namespace": ns,
        "fields": [{"name": "db", "type": "string"}, {"name": "block", "type": format!("{ns}.Block")}]});
    let envelope = json!({"type": "record", "name": "Envelope", "namespace": ns,
        "fields": [{"name": "op", "type": "string"}, {"name": "source", "type": format!("{ns}.Source")},
                   {"name": "again", "type": ["null", format!("{ns}.Block")], "default": null}]});
    let block_name = format!("{ns}.Block");
    let source_name = format!("{ns}.Source");
    register(&stack, &format!("{ns}-block"), &block, &[]).await;
    register(
        &stack,
        &format!("{ns}-source"),
        &source,
        &[(&block_name, &format!("{ns}-block"))],
    )
    .await;
    let root = register(
        &stack,
        &format!("{ns}-value"),
        &envelope,
        &[
            (&source_name, &format!("{ns}-source")),
            (&block_name, &format!("{ns}-block")),
        ],
    )
    .await;

    let check = |label: &str, resolved: &lakesink_schema_registry::ResolvedSchema| {
        assert_eq!(json_of(&resolved.text), envelope, "{label}");
        let names: Vec<&str> = resolved
            .references
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            names,
            [block_name.as_str(), source_name.as_str()],
            "{label}: dependencies first, once each"
        );
        let NamedSchema { text, .. } = &resolved.references[1];
        assert_eq!(json_of(text), source, "{label}");
    };
    for api in [Api::ApicurioV3, Api::ApicurioV2] {
        let c = client(&stack, api);
        for (kind, id) in [
            (IdKind::GlobalId, root.global_id),
            (IdKind::ContentId, root.content_id),
        ] {
            let r = c
                .resolve(&SchemaRef::Id { kind, id })
                .await
                .expect("resolve");
            check(&format!("{api:?} {kind:?}"), &r);
        }
        let latest = SchemaRef::Coordinates {
            group_id: None,
            artifact_id: format!("{ns}-value"),
            version: None,
        };
        check(
            &format!("{api:?} latest"),
            &c.resolve(&latest).await.expect("resolve latest"),
        );
    }
    let ccompat = client(&stack, Api::Ccompat);
    let r = ccompat
        .resolve(&SchemaRef::Id {
            kind: IdKind::ContentId,
            id: root.content_id,
        })
        .await
        .expect("resolve via ccompat");
    check("ccompat", &r);
}

#[tokio::test]
async fn an_unknown_id_is_not_found_and_not_retryable() {
    let stack = Stack::from_env();
    for api in [Api::ApicurioV3, Api::ApicurioV2, Api::Ccompat] {
        let err = client(&stack, api)
            .resolve(&SchemaRef::Id {
                kind: IdKind::GlobalId,
                id: i64::from(i32::MAX),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, RegistryError::NotFound { .. }),
            "{api:?}: {err}"
        );
        assert!(!err.retryable());
        assert!(err.to_string().contains("globalId 2147483647"), "{err}");
    }
}

#[tokio::test]
async fn an_unreachable_registry_is_retried_then_reported_as_retryable() {
    // Port 9 (discard) is closed on loopback.
    let mut config = HttpRegistryConfig::new("http://127.0.0.1:9");
    config.backoff = Backoff {
        first: Duration::from_millis(10),
        max: Duration::from_millis(80),
        attempts: Some(3),
    };
    let started = std::time::Instant::now();
    let err = HttpRegistry::new(config)
        .expect("client")
        .resolve(&SchemaRef::Id {
            kind: IdKind::ContentId,
            id: 1,
        })
        .await
        .unwrap_err();
    assert!(err.retryable(), "{err}");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
    // Three waits between four attempts, from 10 ms doubling (jitter only adds).
    assert!(
        started.elapsed() >= Duration::from_millis(70),
        "{:?}",
        started.elapsed()
    );
}
