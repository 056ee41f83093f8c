//! `lakesink check` and `lakesink import-connect` through the binary. `check` runs against
//! the real stack: a good config passes; a wrong S3 port, a wrong PostgreSQL password or a
//! missing topic fails the named check with a non-zero exit.

use std::path::PathBuf;
use std::process::{Command, Output};

use lakesink_tests::{Stack, unique, unreachable};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};

fn lakesink(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lakesink"));
    cmd.args(args).env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run lakesink")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn create_topic(stack: &Stack, topic: &str) {
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_brokers)
        .create()
        .expect("admin client");
    let created = admin
        .create_topics(
            [&NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("Kafka", &stack.kafka_brokers, e)));
    for r in created {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

struct Settings {
    topic: String,
    brokers: String,
    registry: String,
    s3_endpoint: String,
    s3_secret: String,
    pg_url: String,
}

/// A config with every section, written to a temp file; the PG password comes by reference.
fn write_config(stack: &Stack, s: &Settings) -> PathBuf {
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lakesink.toml");
    let text = format!(
        r#"
[kafka]
brokers = "{brokers}"
topics = ["{topic}"]

[registry]
url = "{registry}"

[raw]
url = "s3://{bucket}/{prefix}"

[raw.store]
endpoint = "{endpoint}"
region = "{region}"
access-key-id = "{key}"
secret-access-key = "env:CHECK_S3_SECRET"
allow-http = true

[replica]
url = "{pg}"
password = "env:CHECK_PG_PASSWORD"
offsets-schema = "{offsets}"
"#,
        brokers = s.brokers,
        topic = s.topic,
        registry = s.registry,
        bucket = stack.s3_bucket,
        prefix = unique("check"),
        endpoint = s.s3_endpoint,
        region = stack.s3_region,
        key = stack.s3_access_key_id,
        pg = s.pg_url,
        offsets = unique("check_offsets"),
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// The stack's replica URL without its password, and the password.
fn split_password(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("url");
    let (auth, host) = rest.split_once('@').expect("user info");
    let (user, pw) = auth.split_once(':').unwrap_or((auth, ""));
    (format!("{scheme}://{user}@{host}"), pw.to_owned())
}

fn check(stack: &Stack, s: &Settings, pg_password: &str) -> (bool, String) {
    let path = write_config(stack, s);
    let out = lakesink(
        &["check", "--config", path.to_str().expect("utf-8")],
        &[
            ("CHECK_S3_SECRET", &s.s3_secret),
            ("CHECK_PG_PASSWORD", pg_password),
        ],
    );
    let (stdout, stderr) = text(&out);
    (out.status.success(), format!("{stdout}{stderr}"))
}

fn line<'a>(report: &'a str, status: &str, check: &str) -> Option<&'a str> {
    report
        .lines()
        .find(|l| l.starts_with(status) && l[4..].trim_start().starts_with(check))
}

#[tokio::test(flavor = "multi_thread")]
async fn check_passes_a_good_config_and_names_the_failing_check() {
    let stack = Stack::from_env();
    let topic = unique("check-topic");
    create_topic(&stack, &topic).await;
    let (pg_url, pg_password) = split_password(&stack.replica_pg_url);
    let good = Settings {
        topic: topic.clone(),
        brokers: stack.kafka_brokers.clone(),
        registry: stack.registry_url.clone(),
        s3_endpoint: stack.s3_endpoint.clone(),
        s3_secret: stack.s3_secret_access_key.clone(),
        pg_url: pg_url.clone(),
    };

    let (ok, report) = check(&stack, &good, &pg_password);
    assert!(ok, "a good config must pass:\n{report}");
    for name in [
        "config",
        "kafka",
        "topics",
        "registry",
        "object store",
        "database",
    ] {
        assert!(
            line(&report, "OK", name).is_some(),
            "no OK {name}:\n{report}"
        );
    }
    assert!(!report.contains(&format!(":{pg_password}@")) || pg_password.is_empty());

    // The S3 server on a port where nothing listens.
    let bad_s3 = Settings {
        s3_endpoint: "http://127.0.0.1:1".into(),
        ..clone(&good)
    };
    let (ok, report) = check(&stack, &bad_s3, &pg_password);
    assert!(!ok, "{report}");
    assert!(line(&report, "FAIL", "object store").is_some(), "{report}");
    assert!(line(&report, "OK", "database").is_some(), "{report}");

    // A wrong S3 secret: the store's code and message, the settings to fix, no XML.
    let bad_key = Settings {
        s3_secret: "not-the-secret".into(),
        ..clone(&good)
    };
    let (ok, report) = check(&stack, &bad_key, &pg_password);
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "object store").unwrap_or_else(|| panic!("{report}"));
    assert!(
        fail.contains("SignatureDoesNotMatch") || fail.contains("InvalidAccessKeyId"),
        "{fail}"
    );
    assert!(
        fail.ends_with("check raw.store.access-key-id and raw.store.secret-access-key"),
        "{fail}"
    );
    assert!(!report.contains('<'), "no XML:\n{report}");
    assert!(!report.contains("not-the-secret"), "{report}");

    // A wrong PostgreSQL password: PostgreSQL's words and SQLSTATE, without sqlx's "at line
    // N" (PostgreSQL's own source line), and the settings to check.
    let (ok, report) = check(&stack, &good, "not-the-password");
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "database").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains("password authentication failed"), "{fail}");
    assert!(fail.contains("(28P01)"), "{fail}");
    assert!(!fail.contains("at line"), "{fail}");
    assert!(
        fail.ends_with("check the user in replica.url and replica.password"),
        "{fail}"
    );
    assert!(!report.contains("not-the-password"), "{report}");
    assert!(line(&report, "OK", "object store").is_some(), "{report}");

    // Nothing listening where the registry and the brokers should be: the cause in the FAIL
    // line, and none of librdkafka's own log lines in the report.
    let nothing = Settings {
        brokers: "127.0.0.1:1".into(),
        registry: "http://127.0.0.1:1".into(),
        ..clone(&good)
    };
    let (ok, report) = check(&stack, &nothing, &pg_password);
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "registry").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains("Connection refused"), "{fail}");
    let fail = line(&report, "FAIL", "kafka").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains("Connection refused"), "{fail}");
    assert!(fail.contains("check kafka.brokers"), "{fail}");
    assert!(
        report.lines().count() <= 8 && !report.contains("librdkafka"),
        "one line per check:\n{report}"
    );

    // A topic that does not exist.
    let missing = Settings {
        topic: unique("check-missing"),
        ..clone(&good)
    };
    let (ok, report) = check(&stack, &missing, &pg_password);
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "topics").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains(&missing.topic), "{fail}");
}

fn clone(s: &Settings) -> Settings {
    Settings {
        topic: s.topic.clone(),
        brokers: s.brokers.clone(),
        registry: s.registry.clone(),
        s3_endpoint: s.s3_endpoint.clone(),
        s3_secret: s.s3_secret.clone(),
        pg_url: s.pg_url.clone(),
    }
}

#[test]
fn check_reports_a_config_that_does_not_load() {
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[kafka]\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"t\"]\n[raw]\nurl = \"memory://x\"\nflush.size = 5\n",
    )
    .expect("write");
    let out = lakesink(&["check", "--config", path.to_str().expect("utf-8")], &[]);
    let (stdout, _) = text(&out);
    assert!(!out.status.success());
    let fail = line(&stdout, "FAIL", "config").unwrap_or_else(|| panic!("{stdout}"));
    assert!(fail.contains("did you mean `flush-size`?"), "{fail}");
}

fn fixture(name: &str) -> String {
    let path = lakesink_tests::workspace_root()
        .join("config/tests/fixtures")
        .join(name);
    path.display().to_string()
}

#[test]
fn import_connect_prints_the_config_and_reports_on_stderr() {
    let out = lakesink(
        &[
            "import-connect",
            &fixture("stack-s3-sink.json"),
            &fixture("stack-debezium-jdbc-sink.json"),
            "--brokers",
            "127.0.0.1:9092",
        ],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("[raw]") && stdout.contains("[replica]"),
        "{stdout}"
    );
    assert!(stdout.contains("brokers = \"127.0.0.1:9092\""), "{stdout}");
    assert!(stderr.contains("not carried over:"), "{stderr}");
    assert!(stderr.contains("tasks.max"), "{stderr}");

    // With -o the report is at the top of the file, as comments.
    let dir = std::env::temp_dir().join(unique("lakesink-import"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("out.toml");
    let out = lakesink(
        &[
            "import-connect",
            &fixture("debezium-jdbc-sink.json"),
            "-o",
            path.to_str().expect("utf-8"),
        ],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let written = std::fs::read_to_string(&path).expect("written");
    assert!(written.starts_with("# imported "), "{written}");
    assert!(written.contains("# notes:"), "{written}");
    assert!(!written.contains("pgpassword"), "{written}");
    assert!(stderr.contains("LAKESINK_REPLICA_PASSWORD"), "{stderr}");

    // Different topics: an error naming both files.
    let out = lakesink(
        &[
            "import-connect",
            &fixture("seed-001-orders-s3-sink.json"),
            &fixture("debezium-jdbc-sink.json"),
        ],
        &[],
    );
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("seed-001-orders-s3-sink.json")
            && stderr.contains("debezium-jdbc-sink.json"),
        "{stderr}"
    );
}

/// Debezium drops truncates before Kafka by default (`skipped.operations=t`): with
/// `truncate-enabled` on, `check` warns about a source connector that keeps that default.
#[test]
fn check_warns_when_the_source_connector_drops_truncates_the_replica_would_apply() {
    let stack = Stack::from_env();
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = |truncate: bool| {
        let path = dir.join(format!("truncate-{truncate}.toml"));
        std::fs::write(
            &path,
            format!(
                "[kafka]\nbrokers = \"{}\"\ntopics = [\"t\"]\n[replica]\nurl = \"{}\"\ntruncate-enabled = {truncate}\n",
                stack.kafka_brokers, stack.replica_pg_url
            ),
        )
        .expect("write");
        path
    };
    let connector = |file: &str, skipped: Option<&str>| {
        let mut cfg = serde_json::json!({
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "topic.prefix": "demo",
        });
        if let Some(s) = skipped {
            cfg["skipped.operations"] = s.into();
        }
        let path = dir.join(file);
        // The REST shape, as `GET /connectors/{name}` gives it.
        let rest = serde_json::json!({"name": "demo", "config": cfg});
        std::fs::write(&path, rest.to_string()).expect("write");
        path
    };
    let unset = connector("unset.json", None);
    let with_t = connector("with-t.json", Some("t,d"));
    let none = connector("none.json", Some("none"));
    let run = |config: &PathBuf, connectors: &[&PathBuf]| {
        let mut args = vec!["check", "--config", config.to_str().expect("utf-8")];
        for c in connectors {
            args.extend(["--source-connector", c.to_str().expect("utf-8")]);
        }
        let out = lakesink(&args, &[]);
        text(&out).0
    };
    let on = config(true);
    let report = run(&on, &[&unset, &with_t, &none]);
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l[4..].trim_start().starts_with("connector"))
        .collect();
    assert_eq!(lines.len(), 3, "{report}");
    assert!(
        lines[0].starts_with("WARN")
            && lines[0].contains("skipped.operations is unset")
            && lines[0].contains("\"skipped.operations\": \"none\""),
        "{report}"
    );
    assert!(
        lines[1].starts_with("WARN") && lines[1].contains("\"t,d\""),
        "{report}"
    );
    assert!(lines[2].starts_with("OK"), "{report}");
    // Truncates not applied: nothing to warn about.
    let report = run(&config(false), &[&unset]);
    assert!(
        line(&report, "OK", "connector").is_some_and(|l| l.contains("truncate-enabled is off")),
        "{report}"
    );
    // An upsert lake table applies truncates too.
    let lake = dir.join("lake.toml");
    std::fs::write(
        &lake,
        format!(
            "[kafka]\nbrokers = \"{}\"\ntopics = [\"t\"]\n[lake]\ncatalog-uri = \"{}\"\n\
             warehouse = \"s3://{}/check\"\n[lake.tables.t]\nmode = \"upsert\"\n[lake.store]\n{}",
            stack.kafka_brokers,
            stack.replica_pg_url,
            stack.s3_bucket,
            stack.store_keys()
        ),
    )
    .expect("write");
    let report = run(&lake, &[&unset]);
    assert!(
        line(&report, "WARN", "connector").is_some_and(|l| l.contains("the lake's upsert tables")),
        "{report}"
    );
}

/// Without `column.propagate.source.type` a PostgreSQL connector's schemas do not say which
/// columns are `jsonb`, `char(n)`, `inet`, …: `check` warns.
#[test]
fn check_warns_when_the_source_connector_does_not_propagate_source_types() {
    let stack = Stack::from_env();
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("replica.toml");
    std::fs::write(
        &config,
        format!(
            "[kafka]\nbrokers = \"{}\"\ntopics = [\"t\"]\n[replica]\nurl = \"{}\"\n",
            stack.kafka_brokers, stack.replica_pg_url
        ),
    )
    .expect("write");
    let connector = |file: &str, propagate: Option<&str>| {
        let mut cfg = serde_json::json!({
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "topic.prefix": "demo",
        });
        if let Some(p) = propagate {
            cfg["column.propagate.source.type"] = p.into();
        }
        let path = dir.join(file);
        std::fs::write(&path, cfg.to_string()).expect("write");
        path
    };
    let off = connector("off.json", None);
    let on = connector("on.json", Some(".*"));
    let out = lakesink(
        &[
            "check",
            "--config",
            config.to_str().expect("utf-8"),
            "--source-connector",
            off.to_str().expect("utf-8"),
            "--source-connector",
            on.to_str().expect("utf-8"),
        ],
        &[],
    );
    let report = text(&out).0;
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l[4..].trim_start().starts_with("source types"))
        .collect();
    assert_eq!(lines.len(), 2, "{report}");
    assert!(
        lines[0].starts_with("WARN")
            && lines[0].contains("off.json")
            && lines[0].contains("\"column.propagate.source.type\": \".*\""),
        "{report}"
    );
    assert!(
        lines[1].starts_with("OK") && lines[1].contains("on.json"),
        "{report}"
    );
}

/// A connector that flattens its records (ExtractNewRecordState) drops the `source` block
/// naming it: `check` warns until `kafka.source-connector` names it, and fails when it names
/// another connector.
#[test]
fn check_asks_for_the_connector_of_flattened_records() {
    let stack = Stack::from_env();
    let dir = std::env::temp_dir().join(unique("lakesink-check"));
    std::fs::create_dir_all(&dir).expect("dir");
    let connector = dir.join("mysql.json");
    std::fs::write(
        &connector,
        serde_json::json!({
            "connector.class": "io.debezium.connector.mysql.MySqlConnector",
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        })
        .to_string(),
    )
    .expect("write");
    let line = |setting: &str| {
        let config = dir.join("flat.toml");
        std::fs::write(
            &config,
            format!(
                "[kafka]\nbrokers = \"{}\"\ntopics = [\"t\"]\n{setting}\n",
                stack.kafka_brokers
            ),
        )
        .expect("write");
        let out = lakesink(
            &[
                "check",
                "--config",
                config.to_str().expect("utf-8"),
                "--source-connector",
                connector.to_str().expect("utf-8"),
            ],
            &[],
        );
        let report = text(&out).0;
        report
            .lines()
            .find(|l| l[4..].trim_start().starts_with("flattened"))
            .unwrap_or_else(|| panic!("no flattened line: {report}"))
            .to_owned()
    };
    let unset = line("");
    assert!(
        unset.starts_with("WARN") && unset.contains("kafka.source-connector = \"mysql\""),
        "{unset}"
    );
    let right = line("source-connector = \"mysql\"");
    assert!(right.starts_with("OK"), "{right}");
    let wrong = line("source-connector = \"postgresql\"");
    assert!(
        wrong.starts_with("FAIL") && wrong.contains("kafka.source-connector = \"mysql\""),
        "{wrong}"
    );
}

/// moto's server (PyPI), speaking the AWS Secrets Manager API on loopback; killed on drop.
struct SecretsManager {
    child: std::process::Child,
    endpoint: String,
}

impl SecretsManager {
    fn start(stack: &Stack) -> Self {
        let addr = crate::common::free_port();
        let child = Command::new(&stack.python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
            .arg(addr.port().to_string())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}: run `dev/stack install` (moto)", stack.python));
        let endpoint = format!("http://{addr}");
        let up = (0..300).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::net::TcpStream::connect(addr).is_ok()
        });
        assert!(up, "moto's server did not listen on {addr} within 30 s");
        Self { child, endpoint }
    }

    fn put(&self, stack: &Stack, name: &str, value: &str) {
        let script = lakesink_tests::workspace_root().join("tests/python/secretsmanager.py");
        let status = Command::new(&stack.python)
            .arg(script)
            .args([&self.endpoint, name, value])
            .status()
            .expect("python runs");
        assert!(status.success(), "creating secret {name}");
    }
}

impl Drop for SecretsManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `replica.password = "aws-secretsmanager:NAME#password"`: the password is read from AWS
/// Secrets Manager (moto's server) at load time through the AWS credential chain, and a key
/// the secret lacks is named, with the secret's keys and none of its values.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_come_from_aws_secrets_manager() {
    let stack = Stack::from_env();
    let topic = unique("check-secrets");
    create_topic(&stack, &topic).await;
    let (pg_url, pg_password) = split_password(&stack.replica_pg_url);
    let aws = SecretsManager::start(&stack);
    let name = unique("lakesink/replica");
    aws.put(
        &stack,
        &name,
        &format!(
            r#"{{"username": "lakesink", "password": "{pg_password}", "note": "not-for-logs-7f3a"}}"#
        ),
    );
    let settings = Settings {
        topic,
        brokers: stack.kafka_brokers.clone(),
        registry: stack.registry_url.clone(),
        s3_endpoint: stack.s3_endpoint.clone(),
        s3_secret: stack.s3_secret_access_key.clone(),
        pg_url,
    };
    let path = write_config(&stack, &settings);
    let check = |reference: &str| {
        let toml = std::fs::read_to_string(&path).expect("config");
        let toml = toml.replace(
            "password = \"env:CHECK_PG_PASSWORD\"",
            &format!("password = \"aws-secretsmanager:{reference}\""),
        );
        let path = path.with_file_name(unique("aws") + ".toml");
        std::fs::write(&path, toml).expect("write");
        let out = lakesink(
            &["check", "--config", path.to_str().expect("utf-8")],
            &[
                ("CHECK_S3_SECRET", &stack.s3_secret_access_key),
                ("AWS_ENDPOINT_URL_SECRETS_MANAGER", &aws.endpoint),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
        );
        let (stdout, stderr) = text(&out);
        (out.status.success(), format!("{stdout}{stderr}"))
    };
    let (ok, report) = check(&format!("{name}#password"));
    assert!(ok, "{report}");
    assert!(line(&report, "OK", "database").is_some(), "{report}");

    let (ok, report) = check(&format!("{name}#pw"));
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "config").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains("replica.password"), "{fail}");
    assert!(
        fail.contains("its keys: note, password, username"),
        "{fail}"
    );
    assert!(
        !report.contains("not-for-logs-7f3a"),
        "no value shown:\n{report}"
    );

    let (ok, report) = check("lakesink/no-such-secret#password");
    assert!(!ok, "{report}");
    let fail = line(&report, "FAIL", "config").unwrap_or_else(|| panic!("{report}"));
    assert!(fail.contains("ResourceNotFoundException"), "{fail}");
    assert!(fail.contains("lakesink/no-such-secret"), "{fail}");
}
