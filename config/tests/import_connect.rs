//! `import-connect` on real connector configs: the seeds' (articles holding Connect JSON) and
//! the peers' documented examples. Each import must load with `Config::from_toml` and carry
//! the expected values; the list of keys not carried over is exact.

use std::path::PathBuf;

use lakesink_config::connect_import::{ImportError, Imported, Input, Options, import};
use lakesink_config::{
    Codec, Config, Content, DeletePolicy, IdentifierCase, Metadata, PartitionerKind, PkMode,
    RecordFormat, SchemaEvolution, TimestampSource, Tombstones,
};

fn fixture(name: &str) -> Input {
    // At run time: a binary built in another checkout sharing the target directory would
    // otherwise read that checkout's fixtures (or fail where it no longer exists).
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    let path = package.join("tests").join("fixtures").join(name);
    let mut input = Input::read(&path).expect("fixture");
    input.name = name.to_owned();
    input
}

fn run(names: &[&str]) -> Result<Imported, ImportError> {
    let inputs: Vec<Input> = names.iter().map(|n| fixture(n)).collect();
    import(&inputs, &Options::default())
}

/// The import, loaded as lakesink would load it, with `env` as the environment.
fn load(imported: &Imported, env: &[(&str, &str)]) -> Config {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::from_toml(&imported.toml, "imported", env)
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml))
}

fn dropped(imported: &Imported) -> Vec<String> {
    imported
        .dropped
        .iter()
        .map(|d| format!("{}: {}", d.file, d.key))
        .collect()
}

#[test]
fn seed_001_s3_sink_time_partitioned_json() {
    let i = run(&["seed-001-orders-s3-sink.json"]).expect("import");
    let c = load(&i, &[]);
    assert_eq!(c.kafka.topics, ["cdc.orders"]);
    assert_eq!(c.kafka.format, RecordFormat::Json);
    let raw = c.raw.expect("raw");
    assert_eq!(raw.url, "s3://analytics-raw");
    assert_eq!(raw.partitioner, PartitionerKind::Time);
    assert_eq!(
        raw.path_format.as_deref(),
        Some("'dt'=yyyy-MM-dd/'hour'=HH")
    );
    assert_eq!(raw.partition_duration_ms, Some(3_600_000));
    assert_eq!(raw.timezone, "Asia/Seoul");
    assert_eq!(raw.locale, "ko-KR");
    // Connect's default extractor is the wall clock.
    assert_eq!(raw.timestamp, TimestampSource::Wallclock);
    assert_eq!(raw.flush_size, 10_000);
    assert_eq!(raw.rotate_interval_ms, Some(300_000));
    assert_eq!(raw.store.region.as_deref(), Some("ap-northeast-2"));
    // errors.tolerance=all with a dead-letter queue carries over.
    assert_eq!(c.errors.tolerance, lakesink_config::Tolerance::All);
    assert_eq!(
        c.errors.dead_letter_topic.as_deref(),
        Some("cdc.orders.DLQ")
    );
    assert!(c.errors.dead_letter_context_headers);
    assert_eq!(
        dropped(&i),
        [
            "seed-001-orders-s3-sink.json: errors.deadletterqueue.topic.replication.factor",
            "seed-001-orders-s3-sink.json: key.converter",
            "seed-001-orders-s3-sink.json: tasks.max",
        ]
    );
    assert!(i.notes.iter().any(|n| n.contains("kafka.brokers")));
}

#[test]
fn seed_003_s3_sink_daily() {
    let i = run(&["seed-003-s3-sink-orders.json"]).expect("import");
    let c = load(&i, &[]);
    assert_eq!(c.kafka.topics, ["raw.orders"]);
    let raw = c.raw.expect("raw");
    assert_eq!(raw.url, "s3://data-lake");
    assert_eq!(
        raw.path_format.as_deref(),
        Some("'year'=YYYY/'month'=MM/'day'=dd")
    );
    assert_eq!(raw.partition_duration_ms, Some(86_400_000));
    assert_eq!(raw.timezone, "UTC");
    assert_eq!(raw.locale, "en-US");
    assert_eq!(
        (raw.flush_size, raw.rotate_interval_ms),
        (1000, Some(60_000))
    );
    assert_eq!(raw.codec, Codec::Snappy);
    assert_eq!(raw.store.region.as_deref(), Some("eu-west-1"));
    assert!(dropped(&i).is_empty(), "{:?}", dropped(&i));
    assert!(
        i.notes
            .iter()
            .any(|n| n.contains("value.converter is not set"))
    );
}

#[test]
fn confluent_s3_quickstart_properties() {
    let i = run(&["confluent-s3-quickstart.properties"]).expect("import");
    let c = load(&i, &[]);
    assert_eq!(c.kafka.topics, ["s3_topic"]);
    let raw = c.raw.expect("raw");
    assert_eq!(raw.url, "s3://confluent-kafka-connect-s3-testing");
    assert_eq!(raw.partitioner, PartitionerKind::Default);
    assert_eq!((raw.flush_size, raw.part_size_bytes), (3, 5_242_880));
    assert_eq!(raw.store.region.as_deref(), Some("us-west-2"));
    assert_eq!(
        dropped(&i),
        ["confluent-s3-quickstart.properties: format.class"]
    );
    assert!(i.dropped[0].reason.contains("Parquet only"));
}

#[test]
fn confluent_s3_with_unwrap_field_partitioner_and_oauth() {
    let i = run(&["confluent-s3-unwrapped.json"]).expect("import");
    let c = load(&i, &[("SR_CLIENT_SECRET", "oauth-hunter2")]);
    let r = &c.registry;
    assert_eq!(
        r.url.as_deref(),
        Some("http://apicurio:8080/apis/ccompat/v7")
    );
    assert_eq!(r.api, None);
    let oauth = r.oauth.as_ref().expect("oauth");
    assert_eq!(oauth.client_id, "s3-sink");
    assert_eq!(oauth.client_secret.expose(), "oauth-hunter2");
    assert_eq!(oauth.scope.as_deref(), Some("registry"));
    let raw = c.raw.expect("raw");
    assert_eq!(raw.partitioner, PartitionerKind::Field);
    // The SMT's row field `region` is `after.region` in the change event.
    assert_eq!(raw.partition_fields, ["after.region"]);
    assert_eq!(raw.content, Content::Flattened);
    // ExtractNewRecordState drops tombstones by default.
    assert_eq!(raw.tombstones, Tombstones::Skip);
    assert_eq!(
        raw.file_key,
        "{topics-dir}/{topic}/{encoded}/{topic}-{partition}-{start-offset:20}{ext}"
    );
    assert!(raw.store.virtual_hosted);
    assert_eq!(
        raw.store.options["aws_server_side_encryption"].expose(),
        "aws:kms"
    );
    assert_eq!(
        raw.store.options["aws_sse_kms_key_id"].expose(),
        "alias/analytics"
    );
    assert_eq!(raw.codec, Codec::Snappy);
    assert_eq!(
        dropped(&i),
        [
            "confluent-s3-unwrapped.json: key.converter",
            "confluent-s3-unwrapped.json: parquet.codec",
            "confluent-s3-unwrapped.json: transforms.route.*",
            "confluent-s3-unwrapped.json: transforms.unwrap.add.fields",
        ]
    );
}

#[test]
fn debezium_jdbc_sink_documented_example() {
    let i = run(&["debezium-jdbc-sink.json"]).expect("import");
    // The literal password is not in the output: a variable stands for it.
    assert!(!i.toml.contains("pgpassword"), "{}", i.toml);
    assert!(
        i.toml
            .contains("password = \"env:LAKESINK_REPLICA_PASSWORD\"")
    );
    assert!(
        i.notes
            .iter()
            .any(|n| n.contains("set LAKESINK_REPLICA_PASSWORD")),
        "{:?}",
        i.notes
    );
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pgpassword")]);
    assert_eq!(c.kafka.topics, ["orders"]);
    let r = c.replica.expect("replica");
    assert_eq!(r.url.expose(), "postgres://pguser@localhost/db");
    assert_eq!(r.password.as_ref().map(|p| p.expose()), Some("pgpassword"));
    assert_eq!(r.pk_mode, PkMode::RecordKey);
    assert!(r.delete_enabled && r.auto_create && r.dots_to_underscores);
    assert_eq!(r.schema_evolution, SchemaEvolution::Basic);
    // Unquoted names, which PostgreSQL folded: the same tables, in lower case.
    assert_eq!(r.identifier_case, IdentifierCase::Lower);
    assert!(dropped(&i).is_empty(), "{:?}", dropped(&i));

    let mut input = fixture("debezium-jdbc-sink.json");
    input.text = input.text.replace(
        "\"tasks.max\"",
        "\"quote.identifiers\": \"true\", \"tasks.max\"",
    );
    let i = import(&[input], &Options::default()).expect("import");
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pgpassword")]);
    assert_eq!(
        c.replica.expect("replica").identifier_case,
        IdentifierCase::Preserve
    );
}

#[test]
fn confluent_jdbc_sink_with_registry_auth_and_file_provider() {
    let i = run(&["confluent-jdbc-sink-postgres.json"]).expect("import");
    assert!(!i.toml.contains("sr-secret"), "{}", i.toml);
    // `${file:…:key}` names a key in a properties file: a variable stands for it.
    assert!(
        i.notes
            .iter()
            .any(|n| n.contains("LAKESINK_REPLICA_PASSWORD") && n.contains("${file:")),
        "{:?}",
        i.notes
    );
    let c = load(
        &i,
        &[
            ("LAKESINK_REPLICA_PASSWORD", "pg"),
            ("LAKESINK_REGISTRY_PASSWORD", "sr-secret"),
        ],
    );
    assert_eq!(c.kafka.topics, ["orders", "customers"]);
    assert_eq!(c.kafka.format, RecordFormat::Avro);
    let reg = &c.registry;
    assert_eq!(reg.url.as_deref(), Some("http://schema-registry:8081"));
    assert_eq!(reg.api, Some(lakesink_config::RegistryApi::Ccompat));
    assert_eq!(reg.username.as_deref(), Some("sr-user"));
    assert_eq!(reg.password.as_ref().map(|p| p.expose()), Some("sr-secret"));
    let r = c.replica.expect("replica");
    assert_eq!(
        r.url.expose(),
        "postgres://sink@pg.example.com:5432/warehouse?sslmode=require"
    );
    assert_eq!(r.default_schema, "replica");
    // Confluent names tables after the topic as is.
    assert!(!r.dots_to_underscores);
    assert_eq!(r.table_name_format, "${topic}");
    assert_eq!(r.pk_mode, PkMode::RecordValue);
    assert_eq!(r.pk_fields, ["id"]);
    // Connect's default: deletes off; names quoted (quote.sql.identifiers = always).
    assert!(!r.delete_enabled);
    assert_eq!(r.identifier_case, IdentifierCase::Preserve);
    assert!(r.auto_create);
    assert_eq!(r.schema_evolution, SchemaEvolution::Basic);
    assert_eq!(r.batch_max_rows, 3000);
    assert_eq!(c.errors.dead_letter_topic.as_deref(), Some("dlq-warehouse"));
    assert_eq!(
        dropped(&i),
        [
            "confluent-jdbc-sink-postgres.json: connection.url parameter reWriteBatchedInserts",
            "confluent-jdbc-sink-postgres.json: max.retries",
            "confluent-jdbc-sink-postgres.json: retry.backoff.ms",
            "confluent-jdbc-sink-postgres.json: tasks.max",
        ]
    );
}

#[test]
fn seed_004_style_apicurio_jdbc_sink_with_password_in_the_url() {
    let i = run(&["apicurio-confluent-jdbc-sink.json"]).expect("import");
    assert!(!i.toml.contains("password=postgres"), "{}", i.toml);
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "postgres")]);
    assert_eq!(c.kafka.brokers, "kafka:9092");
    assert_eq!(
        c.kafka.topics,
        ["postgres.school.student", "postgres.school.teacher"]
    );
    assert_eq!(
        c.registry.url.as_deref(),
        Some("http://apicurio-registry:8080/apis/registry/v2")
    );
    let r = c.replica.expect("replica");
    assert_eq!(
        r.url.expose(),
        "postgres://postgres@postgres-replica:5432/postgres"
    );
    assert_eq!(r.password.as_ref().map(|p| p.expose()), Some("postgres"));
    assert!(r.delete_enabled && !r.dots_to_underscores);
    assert_eq!(
        dropped(&i),
        [
            "apicurio-confluent-jdbc-sink.json: schema.history.internal.kafka.bootstrap.servers",
            "apicurio-confluent-jdbc-sink.json: schema.history.internal.kafka.topic",
            "apicurio-confluent-jdbc-sink.json: schema.name.adjustment.mode",
        ]
    );
}

#[test]
fn an_s3_sink_and_a_jdbc_sink_on_the_same_topics_merge() {
    let i = run(&["stack-s3-sink.json", "stack-debezium-jdbc-sink.json"]).expect("import");
    // The S3 secret is a file that is not here: load with the references as written.
    let c = Config::from_toml_unresolved(&i.toml, "imported", Vec::new())
        .unwrap_or_else(|e| panic!("{e}\n{}", i.toml));
    assert_eq!(
        c.kafka.topics_regex.as_deref(),
        Some("^demo\\.inventory\\..*$")
    );
    assert_eq!(
        c.registry.payload_ids,
        lakesink_config::PayloadIds::GlobalId
    );
    let raw = c.raw.expect("raw");
    assert_eq!(raw.url, "s3://lakesink");
    assert_eq!(raw.topics_dir, "raw");
    assert_eq!(raw.partitioner, PartitionerKind::Time);
    assert_eq!(
        raw.path_format.as_deref(),
        Some("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH")
    );
    assert_eq!(raw.timestamp, TimestampSource::Field);
    assert_eq!(raw.timestamp_field.as_deref(), Some("source.ts_ms"));
    assert_eq!(raw.timezone, "Europe/Lisbon");
    assert_eq!(raw.rotate_schedule_interval_ms, Some(3_600_000));
    assert_eq!(raw.codec, Codec::Zstd);
    assert_eq!(raw.store.endpoint.as_deref(), Some("http://127.0.0.1:8333"));
    assert!(raw.store.allow_http);
    // `${directory:/run/secrets:s3_secret_key}` is the file /run/secrets/s3_secret_key.
    assert_eq!(
        raw.store.secret_access_key.as_ref().map(|s| s.expose()),
        Some("file:/run/secrets/s3_secret_key")
    );
    let r = c.replica.expect("replica");
    // `${env:REPLICA_PASSWORD}` stays a reference to the same variable.
    assert_eq!(
        r.password.as_ref().map(|p| p.expose()),
        Some("env:REPLICA_PASSWORD")
    );
    assert_eq!(r.table_name_format, "${source.schema}.${source.table}");
    assert!(r.truncate_enabled && r.delete_enabled);
    assert_eq!((r.pool_size, r.batch_max_rows), (8, 2000));
    assert_eq!(
        dropped(&i),
        [
            "stack-s3-sink.json: s3.part.retries",
            "stack-s3-sink.json: store.kafka.keys",
            "stack-s3-sink.json: tasks.max",
            "stack-debezium-jdbc-sink.json: connection.pool.min_size",
            "stack-debezium-jdbc-sink.json: flush.max.retries",
        ]
    );
}

#[test]
fn different_topics_are_an_error_naming_both_files() {
    let err = run(&["seed-001-orders-s3-sink.json", "debezium-jdbc-sink.json"]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("seed-001-orders-s3-sink.json") && text.contains("debezium-jdbc-sink.json"),
        "{text}"
    );
    assert!(
        text.contains("cdc.orders") && text.contains("orders"),
        "{text}"
    );
    let err = run(&["stack-s3-sink.json", "stack-s3-sink.json"]).unwrap_err();
    assert!(err.to_string().contains("both S3 sinks"), "{err}");
}

#[test]
fn connectors_lakesink_does_not_replace_are_named() {
    for (file, says) in [
        ("seed-001-orders-file-sink.json", "FileStreamSinkConnector"),
        ("seed-000-sqlserver-source.json", "a source connector"),
        (
            "seed-003-debezium-postgres-source.json",
            "a source connector",
        ),
    ] {
        let err = run(&[file]).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with(file) && text.contains(says), "{text}");
    }
}

#[test]
fn the_report_lists_what_was_not_carried_and_the_output_never_has_a_literal_secret() {
    let i = run(&["stack-s3-sink.json", "stack-debezium-jdbc-sink.json"]).expect("import");
    let report = i.report();
    assert!(report.contains("not carried over:"), "{report}");
    assert!(
        report.contains("stack-s3-sink.json: tasks.max: "),
        "{report}"
    );
    let commented = i.with_report_comments();
    assert!(commented.lines().take_while(|l| l.starts_with('#')).count() > 3);
    // The commented form loads too.
    Config::from_toml_unresolved(&commented, "commented", Vec::new()).expect("loads");
    for input in [
        "confluent-jdbc-sink-postgres.json",
        "debezium-jdbc-sink.json",
        "apicurio-confluent-jdbc-sink.json",
    ] {
        let i = run(&[input]).expect("import");
        for secret in ["pgpassword", "sr-secret", "password=postgres"] {
            assert!(!i.toml.contains(secret) && !i.report().contains(secret));
        }
    }
}

#[test]
fn brokers_come_from_the_options() {
    let inputs = vec![fixture("debezium-jdbc-sink.json")];
    let i = import(
        &inputs,
        &Options {
            brokers: Some("k1:9092,k2:9092".into()),
        },
    )
    .expect("import");
    let c = Config::from_toml_unresolved(&i.toml, "x", Vec::new()).expect("loads");
    assert_eq!(c.kafka.brokers, "k1:9092,k2:9092");
    assert!(!i.notes.iter().any(|n| n.contains("kafka.brokers")));
}

#[test]
fn rewritten_deletes_a_jdbc_sink_kept_become_soft_deletes() {
    let i = run(&["debezium-jdbc-sink-rewrite.json"]).expect("import");
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pg")]);
    let r = c.replica.expect("replica");
    assert!(r.delete_enabled);
    assert_eq!(
        r.delete_policy("public.orders"),
        DeletePolicy::Soft {
            flag: "__deleted".into(),
            at: None
        }
    );
    assert!(
        i.notes.iter().any(|n| n.contains("delete-mode = \"soft\"")),
        "{:?}",
        i.notes
    );
    assert!(dropped(&i).is_empty(), "{:?}", dropped(&i));

    // With deletes on and the tombstones kept, the sink removed the rows: hard deletes.
    let mut input = fixture("debezium-jdbc-sink-rewrite.json");
    input.text = input
        .text
        .replace("\"false\"", "\"true\"")
        .replace("\"rewrite\"", "\"rewrite-with-tombstone\"");
    let i = import(&[input], &Options::default()).expect("import");
    let r = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pg")])
        .replica
        .expect("replica");
    assert!(r.delete_enabled);
    assert_eq!(r.delete_policy("public.orders"), DeletePolicy::Hard);
}

#[test]
fn replace_field_and_insert_field_transforms_become_column_policies() {
    let i = run(&["confluent-jdbc-sink-replacefield.json"]).expect("import");
    let c = load(&i, &[]);
    assert_eq!(c.columns.len(), 3, "{}", i.toml);
    // ValueToKey made the key of two value fields; the sink keyed rows by that key.
    let r = c.replica.as_ref().expect("replica");
    assert_eq!(r.pk_mode, PkMode::RecordValue);
    assert_eq!(r.pk_fields, ["customer_id", "region"]);
    // RegexRouter named the tables.
    assert_eq!(r.topic_regex.as_deref(), Some("(.*)"));
    assert_eq!(r.topic_replacement, "crm_$1");
    let meta = &c.columns[2];
    assert_eq!(
        meta.metadata,
        [
            (Metadata::Topic, "kafka_topic".to_owned()),
            (Metadata::Offset, "kafka_offset".to_owned())
        ]
        .into()
    );
    assert_eq!(
        meta.static_columns,
        [("source_dc".to_owned(), "eu-west-1".to_owned())].into()
    );
    assert_eq!(c.columns[0].exclude, ["ssn", "card_number"]);
    assert_eq!(c.columns[0].topics, None, "every topic of the connector");
    assert_eq!(
        c.columns[1].rename,
        [
            ("fname".to_owned(), "first_name".to_owned()),
            ("lname".to_owned(), "last_name".to_owned())
        ]
        .into()
    );
    assert!(dropped(&i).is_empty(), "{:?}", dropped(&i));

    // Two sinks of one pipeline that keep different columns cannot share one config.
    let mut other = fixture("confluent-jdbc-sink-replacefield.json");
    other.name = "s3.json".into();
    other.text = other.text.replace("ssn,card_number", "ssn");
    let mut first = fixture("confluent-jdbc-sink-replacefield.json");
    first.text = first
        .text
        .replace(
            "io.confluent.connect.jdbc.JdbcSinkConnector",
            "io.confluent.connect.s3.S3SinkConnector",
        )
        .replace(
            "\"connection.url\"",
            "\"s3.bucket.name\": \"b\", \"connection.url\"",
        );
    let err = import(&[first, other], &Options::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("transform the columns differently"),
        "{err}"
    );
}

#[test]
fn a_mask_field_transform_becomes_a_masking_column_policy() {
    let mut input = fixture("confluent-jdbc-sink-replacefield.json");
    input.text = input.text.replace(
        "\"transforms\": \"drop,rename,meta,key,route\",",
        "\"transforms\": \"drop,rename,meta,key,route,hide,zero\", \
         \"transforms.hide.type\": \"org.apache.kafka.connect.transforms.MaskField$Value\", \
         \"transforms.hide.fields\": \"email, phone\", \"transforms.hide.replacement\": \"***\", \
         \"transforms.zero.type\": \"org.apache.kafka.connect.transforms.MaskField$Value\", \
         \"transforms.zero.fields\": \"salary\",",
    );
    let i = import(&[input], &Options::default()).expect("import");
    let c = load(&i, &[]);
    assert_eq!(c.columns.len(), 5, "{}", i.toml);
    assert_eq!(c.columns[3].mask, ["email", "phone"]);
    assert_eq!(c.columns[3].mask_replacement.as_deref(), Some("***"));
    assert_eq!(c.columns[4].mask, ["salary"]);
    assert_eq!(
        c.columns[4].mask_replacement, None,
        "the type's empty value"
    );
    assert!(dropped(&i).is_empty(), "{:?}", dropped(&i));
}

#[test]
fn a_field_transform_before_the_unwrap_smt_is_not_carried() {
    let mut input = fixture("debezium-jdbc-sink-rewrite.json");
    input.text = input.text.replace(
        "\"transforms\": \"unwrap\",",
        "\"transforms\": \"drop,unwrap\", \"transforms.drop.type\": \"org.apache.kafka.connect.transforms.ReplaceField$Value\", \"transforms.drop.exclude\": \"source\",",
    );
    let i = import(&[input], &Options::default()).expect("import");
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pg")]);
    assert!(c.columns.is_empty(), "{}", i.toml);
    assert_eq!(
        dropped(&i),
        ["debezium-jdbc-sink-rewrite.json: transforms.drop.*"]
    );
}
