//! docker-compose.yml cannot run here, so check that it describes the same stack as
//! `dev/stack`: the same service names, published ports and LAKESINK_* variables.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;

#[derive(Deserialize)]
struct Compose {
    services: BTreeMap<String, Service>,
}

#[derive(Deserialize)]
struct Service {
    #[serde(default)]
    ports: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, serde_yaml::Value>,
    build: Option<serde_yaml::Value>,
}

fn root() -> PathBuf {
    lakesink_tests::workspace_root()
}

fn compose() -> Compose {
    let text =
        std::fs::read_to_string(root().join("docker-compose.yml")).expect("docker-compose.yml");
    serde_yaml::from_str(&text).expect("docker-compose.yml parses")
}

/// The variables `dev/stack env` prints, by name.
fn stack_env() -> BTreeMap<String, String> {
    let out = Command::new("bash")
        .arg(root().join("dev/stack"))
        .arg("env")
        .output()
        .expect("run dev/stack env");
    assert!(out.status.success(), "dev/stack env failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn port_of(endpoint: &str) -> u16 {
    let url = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("tcp://{endpoint}")
    };
    reqwest::Url::parse(&url)
        .expect("endpoint url")
        .port()
        .expect("explicit port")
}

#[test]
fn compose_names_the_same_services_as_dev_stack() {
    let compose = compose();
    let names: Vec<&str> = compose.services.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "connect",
            "iceberg-rest",
            "kafka",
            "kafka-secure",
            "kafka-secure-tls",
            "lakesink",
            "mariadb",
            "registry",
            "replica-pg",
            "s3",
            "s3-init",
            "source-pg"
        ]
    );
    assert!(
        compose.services["lakesink"].build.is_some(),
        "lakesink is built from the Dockerfile"
    );
    assert!(root().join("Dockerfile").is_file());
}

#[test]
fn compose_publishes_the_ports_dev_stack_uses() {
    let env = stack_env();
    let compose = compose();
    for (service, var) in [
        ("kafka", "LAKESINK_KAFKA_BROKERS"),
        ("kafka-secure", "LAKESINK_KAFKA_SASL_BROKERS"),
        ("kafka-secure", "LAKESINK_KAFKA_SSL_BROKERS"),
        ("kafka-secure", "LAKESINK_KAFKA_SASL_SSL_BROKERS"),
        ("kafka-secure", "LAKESINK_KAFKA_OAUTH_BROKERS"),
        ("registry", "LAKESINK_REGISTRY_URL"),
        ("connect", "LAKESINK_CONNECT_URL"),
        ("s3", "LAKESINK_S3_ENDPOINT"),
        ("source-pg", "LAKESINK_SOURCE_PG_URL"),
        ("replica-pg", "LAKESINK_REPLICA_PG_URL"),
        ("mariadb", "LAKESINK_MARIADB_URL"),
        ("iceberg-rest", "LAKESINK_ICEBERG_REST_URL"),
    ] {
        let port = port_of(&env[var]);
        let published = &compose.services[service].ports;
        assert!(
            published
                .iter()
                .any(|p| p.starts_with(&format!("127.0.0.1:{port}:"))),
            "{service} should publish 127.0.0.1:{port} as dev/stack does ({var}); it has {published:?}"
        );
    }
}

/// Variables for the tests on the host, not for the lakesink service: the readers' Python,
/// Apache Spark's Python and jars (the lake tests' read-back), and the TLS-only PostgreSQL of
/// the security tests.
const HOST_ONLY: [&str; 4] = [
    "LAKESINK_PYTHON",
    "LAKESINK_SPARK_PYTHON",
    "LAKESINK_SPARK_JARS",
    "LAKESINK_TLS_PG_URL",
];

#[test]
fn compose_gives_lakesink_every_variable_dev_stack_prints() {
    let env = stack_env();
    assert!(env.len() >= 10, "dev/stack env printed {env:?}");
    let lakesink = &compose().services["lakesink"].environment;
    for var in env.keys().filter(|v| !HOST_ONLY.contains(&v.as_str())) {
        assert!(lakesink.contains_key(var), "lakesink service lacks {var}");
    }
    let bucket = lakesink["LAKESINK_S3_BUCKET"].as_str().expect("bucket");
    assert_eq!(bucket, env["LAKESINK_S3_BUCKET"]);
}
