//! The REST commit's endpoint; the commits themselves run against the real catalogs in the
//! lake's end-to-end tests, and `applied` in the row delta's tests.

use iceberg::NamespaceIdent;

use super::*;

fn url(uri: &str, prefix: Option<&str>, ns: &[&str], table: &str) -> String {
    let c = RestCommitter::new(uri, "wh", HashMap::new()).expect("committer");
    let session = Session {
        prefix: prefix.map(str::to_owned),
        token: None,
    };
    let ns = NamespaceIdent::from_strs(ns).expect("namespace");
    c.table_url(&session, &TableIdent::new(ns, table.to_owned()))
        .expect("url")
        .to_string()
}

#[test]
fn the_table_endpoint_is_the_rest_specs() {
    assert_eq!(
        url("http://127.0.0.1:8282", None, &["cdc"], "orders"),
        "http://127.0.0.1:8282/v1/namespaces/cdc/tables/orders"
    );
    assert_eq!(
        url(
            "https://cat.example/api/catalog/",
            Some("wh-1"),
            &["a", "b c"],
            "t/1"
        ),
        "https://cat.example/api/catalog/v1/wh-1/namespaces/a%1Fb%20c/tables/t%2F1"
    );
}
