//! Apache Iceberg's sink configs, in the shapes of its documented examples: each import must
//! load with `Config::from_toml` and carry the expected values; the list of keys not carried
//! over is exact.

use super::split_outside_parens;
use crate::connect_import::{ImportError, Imported, Input, Options, import};
use crate::{CatalogKind, Codec, Config, Content, LakeConfig, LakeMode, RecordFormat};

/// A REST catalog (Polaris-style credential), S3FileIO on MinIO, Debezium's unwrap SMT.
const REST: &str = r#"{
  "name": "events-sink",
  "config": {
    "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
    "tasks.max": "1",
    "topics": "events",
    "iceberg.tables": "analytics.events",
    "iceberg.catalog": "prod",
    "iceberg.catalog.type": "rest",
    "iceberg.catalog.uri": "https://catalog.example.com/api/catalog",
    "iceberg.catalog.credential": "sink-client:rest-hunter2",
    "iceberg.catalog.scope": "PRINCIPAL_ROLE:ALL",
    "iceberg.catalog.warehouse": "s3://lake-bucket/warehouse",
    "iceberg.catalog.header.X-Iceberg-Access-Delegation": "vended-credentials",
    "iceberg.catalog.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
    "iceberg.catalog.s3.endpoint": "http://minio:9000",
    "iceberg.catalog.s3.path-style-access": "true",
    "iceberg.catalog.s3.access-key-id": "minio",
    "iceberg.catalog.s3.secret-access-key": "s3-hunter2",
    "iceberg.catalog.client.region": "us-east-1",
    "iceberg.control.commit.interval-ms": "120000",
    "iceberg.control.topic": "control-iceberg",
    "iceberg.tables.auto-create-enabled": "true",
    "iceberg.tables.evolve-schema-enabled": "true",
    "iceberg.tables.schema-force-optional": "true",
    "iceberg.tables.default-partition-by": "region, bucket(id, 16)",
    "iceberg.tables.write-props.write.parquet.compression-codec": "snappy",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "true",
    "transforms": "unwrap",
    "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"
  }
}"#;

/// Iceberg's JDBC catalog in PostgreSQL, with the driver's user and password.
const JDBC: &str = r#"{
  "name": "orders-lake",
  "config": {
    "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
    "topics": "shop.public.orders",
    "iceberg.tables": "cdc.shop_public_orders",
    "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
    "iceberg.catalog.uri": "jdbc:postgresql://pg.example.com:5432/iceberg?sslmode=require",
    "iceberg.catalog.jdbc.user": "iceberg",
    "iceberg.catalog.jdbc.password": "pg-hunter2",
    "iceberg.catalog.warehouse": "s3a://lake/warehouse",
    "iceberg.catalog.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
    "iceberg.tables.auto-create-enabled": "true",
    "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
    "value.converter.apicurio.registry.url": "http://apicurio:8080/apis/registry/v3",
    "iceberg.hadoop.fs.s3a.endpoint": "http://minio:9000"
  }
}"#;

fn input(name: &str, text: &str) -> Input {
    Input::new(name, text)
}

fn run(inputs: &[(&str, &str)]) -> Result<Imported, ImportError> {
    let inputs: Vec<Input> = inputs.iter().map(|(n, t)| input(n, t)).collect();
    import(&inputs, &Options::default())
}

/// The import, loaded as lakesink would load it, with `env` as the environment.
fn load(imported: &Imported, env: &[(&str, &str)]) -> Config {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::from_toml(&imported.toml, "imported", env)
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml))
}

fn lake(imported: &Imported, env: &[(&str, &str)]) -> LakeConfig {
    load(imported, env).lake.expect("[lake]")
}

fn dropped(imported: &Imported) -> Vec<String> {
    imported
        .dropped
        .iter()
        .map(|d| format!("{}: {}", d.file, d.key))
        .collect()
}

fn reason<'a>(imported: &'a Imported, key: &str) -> &'a str {
    imported
        .dropped
        .iter()
        .find(|d| d.key == key)
        .map(|d| d.reason.as_str())
        .unwrap_or_else(|| panic!("{key} is not listed: {:?}", dropped(imported)))
}

fn noted(imported: &Imported, text: &str) -> bool {
    imported.notes.iter().any(|n| n.contains(text))
}

/// `text` with `key`'s value replaced (the key must be there).
fn with(text: &str, key: &str, value: &str) -> String {
    let start = text.find(&format!("\"{key}\": \"")).expect(key) + key.len() + 5;
    let end = start + text[start..].find('"').expect("value");
    format!("{}{value}{}", &text[..start], &text[end..])
}

/// `text` with more keys in its config.
fn adding(text: &str, keys: &[(&str, &str)]) -> String {
    let extra: String = keys
        .iter()
        .map(|(k, v)| format!("\"{k}\": \"{v}\", "))
        .collect();
    text.replacen("\"config\": {", &format!("\"config\": {{ {extra}"), 1)
}

/// `text` without `key`.
fn without(text: &str, key: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with(&format!("\"{key}\":")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_rest_catalog_sink_becomes_a_lake_section() {
    let i = run(&[("rest.json", REST)]).expect("import");
    for secret in ["rest-hunter2", "s3-hunter2"] {
        assert!(
            !i.toml.contains(secret) && !i.report().contains(secret),
            "{}",
            i.toml
        );
    }
    assert!(noted(&i, "set LAKESINK_LAKE_CREDENTIAL"), "{:?}", i.notes);
    assert!(noted(&i, "set LAKESINK_LAKE_SECRET_ACCESS_KEY"));
    let c = load(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "sink-client:rest-hunter2"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s3-hunter2"),
        ],
    );
    assert_eq!(c.kafka.topics, ["events"]);
    assert_eq!(c.kafka.format, RecordFormat::ConnectJson);
    assert!(c.raw.is_none() && c.replica.is_none());
    let l = c.lake.expect("[lake]");
    assert_eq!(l.catalog, CatalogKind::Rest);
    assert_eq!(
        l.catalog_uri.expose(),
        "https://catalog.example.com/api/catalog"
    );
    assert_eq!(l.catalog_name, "prod");
    assert_eq!(
        l.catalog_properties["credential"].expose(),
        "sink-client:rest-hunter2"
    );
    assert_eq!(l.catalog_properties["scope"].expose(), "PRINCIPAL_ROLE:ALL");
    // A header's name is quoted in the TOML: it holds a dot and capitals.
    assert_eq!(
        l.catalog_properties["header.X-Iceberg-Access-Delegation"].expose(),
        "vended-credentials"
    );
    assert_eq!(l.warehouse, "s3://lake-bucket/warehouse");
    // `analytics.events` is the topic's name in the namespace `analytics`.
    assert_eq!(l.namespace, "analytics");
    assert_eq!(l.table_name_format, "${topic}");
    assert_eq!(l.table_name("events"), "events");
    assert_eq!(l.content, Content::Flattened);
    assert_eq!(l.commit_interval_ms, 120_000);
    assert_eq!(l.codec, Codec::Snappy);
    assert_eq!(l.partition_by, ["region", "bucket(id, 16)"]);
    assert_eq!(l.partition_fields().len(), 2);
    let s = &l.store;
    assert_eq!(s.endpoint.as_deref(), Some("http://minio:9000"));
    assert!(s.allow_http && !s.virtual_hosted);
    assert_eq!(s.region.as_deref(), Some("us-east-1"));
    assert_eq!(s.access_key_id.as_deref(), Some("minio"));
    assert_eq!(
        s.secret_access_key.as_ref().map(|k| k.expose()),
        Some("s3-hunter2")
    );
    assert_eq!(dropped(&i), ["rest.json: iceberg.control.topic"]);
    assert!(reason(&i, "iceberg.control.topic").contains("no coordinator"));
    // Auto-create and evolution on, as lakesink does (evolution but for type widening).
    assert!(!noted(&i, "auto-create-enabled is off"));
    assert!(noted(&i, "does not widen"));
    assert!(noted(&i, "lake.content = \"flattened\""));

    // Iceberg's default commit interval, set explicitly; S3FileIO's virtual-hosted style.
    let text = without(
        &without(REST, "iceberg.control.commit.interval-ms"),
        "iceberg.catalog.s3.path-style-access",
    );
    let text = with(
        &text,
        "iceberg.tables.write-props.write.parquet.compression-codec",
        "zstd",
    );
    let i = run(&[("rest.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.commit_interval_ms, 300_000);
    assert!(
        noted(
            &i,
            "lake.commit-interval-ms = 300000, the Iceberg sink's default"
        ),
        "{:?}",
        i.notes
    );
    assert_eq!(l.codec, Codec::Zstd);
    // A REST catalog may have set the addressing style in its answer: lakesink's is kept.
    assert!(!l.store.virtual_hosted);
}

#[test]
fn a_rest_catalogs_warehouse_name_is_a_catalog_property_and_the_location_a_placeholder() {
    let text = with(REST, "iceberg.catalog.warehouse", "polaris_wh");
    let i = run(&[("rest.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.catalog_properties["warehouse"].expose(), "polaris_wh");
    assert_eq!(l.warehouse, "s3://lake/warehouse");
    assert!(
        noted(&i, "stands in for the object store URL"),
        "{:?}",
        i.notes
    );
}

#[test]
fn a_jdbc_catalog_in_postgresql_is_the_sql_catalog_without_its_password() {
    let i = run(&[("jdbc.json", JDBC)]).expect("import");
    assert!(!i.toml.contains("pg-hunter2") && !i.report().contains("pg-hunter2"));
    let url = "postgres://iceberg@pg.example.com:5432/iceberg?sslmode=require";
    assert!(
        noted(
            &i,
            "set LAKESINK__LAKE__CATALOG_URI to postgres://iceberg:PASSWORD@pg.example.com:5432/iceberg?sslmode=require, PASSWORD being the value of `iceberg.catalog.jdbc.password`"
        ),
        "{:?}",
        i.notes
    );
    assert!(noted(&i, "ADD COLUMN iceberg_type"));
    let l = lake(&i, &[]);
    assert_eq!(l.catalog, CatalogKind::Sql);
    assert_eq!(l.catalog_uri.expose(), url);
    // Iceberg's default catalog name: the catalog_name column of the same rows.
    assert_eq!(l.catalog_name, "iceberg");
    assert_eq!(l.warehouse, "s3a://lake/warehouse");
    assert_eq!(l.namespace, "cdc");
    // The topic's dots become underscores: the same table.
    assert_eq!(l.table_name("shop.public.orders"), "shop_public_orders");
    assert_eq!(l.commit_interval_ms, 300_000);
    assert_eq!(l.content, Content::Envelope);
    // S3FileIO's and HadoopFileIO's default: virtual-hosted-style requests.
    assert!(l.store.virtual_hosted);
    assert_eq!(
        dropped(&i),
        [
            "jdbc.json: iceberg.catalog.io-impl",
            "jdbc.json: iceberg.hadoop.fs.s3a.endpoint",
        ]
    );
    // The override the note names gives the password.
    let c = load(
        &i,
        &[(
            "LAKESINK__LAKE__CATALOG_URI",
            "postgres://iceberg:pg-hunter2@pg.example.com:5432/iceberg?sslmode=require",
        )],
    );
    assert!(
        c.lake
            .expect("lake")
            .catalog_uri
            .expose()
            .contains(":pg-hunter2@")
    );

    // The password in the URL, a schema, V1 tables and a table named around the topic.
    let text = with(
        JDBC,
        "iceberg.catalog.uri",
        "jdbc:postgresql://pg:5432/iceberg?password=pg-hunter2&currentSchema=catalog",
    );
    let text = with(&text, "iceberg.tables", "cdc.raw_shop_public_orders_v2");
    let text = adding(&text, &[("iceberg.catalog.jdbc.schema-version", "V1")]);
    let i = run(&[("jdbc.json", &text)]).expect("import");
    assert!(!i.toml.contains("pg-hunter2") && !i.report().contains("pg-hunter2"));
    assert!(noted(
        &i,
        "PASSWORD being the password in `iceberg.catalog.uri`"
    ));
    assert!(!noted(&i, "iceberg_type"));
    let l = lake(&i, &[]);
    assert_eq!(
        l.catalog_uri.expose(),
        "postgres://iceberg@pg:5432/iceberg?options=-c%20search_path%3Dcatalog"
    );
    assert_eq!(l.table_name_format, "raw_${topic}_v2");
    assert_eq!(
        l.table_name("shop.public.orders"),
        "raw_shop_public_orders_v2"
    );
}

#[test]
fn a_fixed_table_name_is_not_expressible_and_is_reported() {
    let text = with(JDBC, "iceberg.tables", "cdc.all_orders");
    let i = run(&[("jdbc.json", &text)]).expect("import");
    let l = lake(&i, &[]);
    assert_eq!(l.namespace, "cdc");
    assert_eq!(l.table_name_format, "${topic}");
    let why = reason(&i, "iceberg.tables");
    assert!(
        why.contains("must contain ${topic}") && why.contains("cdc.shop_public_orders"),
        "{why}"
    );

    // Several topics into one table: lakesink makes one per topic.
    let text = with(JDBC, "topics", "orders,customers");
    let i = run(&[("jdbc.json", &text)]).expect("import");
    let why = reason(&i, "iceberg.tables");
    assert!(
        why.contains("every topic's records to the one table"),
        "{why}"
    );

    // Several tables without a route field: every record went to each.
    let text = with(JDBC, "topics", "orders,customers");
    let text = with(&text, "iceberg.tables", "cdc.orders,cdc.customers");
    let i = run(&[("jdbc.json", &text)]).expect("import");
    assert_eq!(lake(&i, &[]).namespace, "cdc");
    let why = reason(&i, "iceberg.tables");
    assert!(
        why.contains("every record to each of the 2 tables")
            && why.contains("which here are the listed tables by name"),
        "{why}"
    );
}

#[test]
fn an_unsupported_catalog_is_reported_with_a_rest_placeholder() {
    let text = REST
        .replace(
            "\"iceberg.catalog.type\": \"rest\"",
            "\"iceberg.catalog.catalog-impl\": \"org.apache.iceberg.aws.glue.GlueCatalog\"",
        )
        .replace(
            "\"iceberg.catalog.uri\": \"https://catalog.example.com/api/catalog\",",
            "",
        );
    let i = run(&[("glue.json", &text)]).expect("import");
    assert!(!i.toml.contains("rest-hunter2") && !i.report().contains("rest-hunter2"));
    let l = lake(&i, &[("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s")]);
    assert_eq!(l.catalog, CatalogKind::Rest);
    assert_eq!(l.catalog_uri.expose(), "http://localhost:8181");
    assert!(l.catalog_properties.is_empty());
    // The store and the tables are carried all the same.
    assert_eq!(l.warehouse, "s3://lake-bucket/warehouse");
    assert_eq!(l.namespace, "analytics");
    assert!(reason(&i, "iceberg.catalog.catalog-impl").contains("GlueCatalog"));
    assert!(
        noted(&i, "stands in for a REST catalog's URI"),
        "{:?}",
        i.notes
    );
    assert_eq!(
        dropped(&i),
        [
            "glue.json: iceberg.catalog.catalog-impl",
            "glue.json: iceberg.catalog.credential",
            "glue.json: iceberg.catalog.header.X-Iceberg-Access-Delegation",
            "glue.json: iceberg.catalog.scope",
            "glue.json: iceberg.control.topic",
        ]
    );

    // Neither type nor catalog-impl: Iceberg's default, the Hive catalog.
    let text = without(REST, "iceberg.catalog.type");
    let i = run(&[("hive.json", &text)]).expect("import");
    assert!(reason(&i, "iceberg.catalog.type").contains("hive"));
    assert!(reason(&i, "iceberg.catalog.uri").contains("not carried"));

    // A JDBC catalog in another database.
    let text = with(JDBC, "iceberg.catalog.uri", "jdbc:mysql://db:3306/iceberg");
    let i = run(&[("mysql.json", &text)]).expect("import");
    assert_eq!(lake(&i, &[]).catalog, CatalogKind::Rest);
    assert!(reason(&i, "iceberg.catalog.uri").contains("mysql"));
    assert!(reason(&i, "iceberg.catalog.jdbc.password").contains("not carried"));
    assert!(!i.report().contains("pg-hunter2"));
}

#[test]
fn routing_by_a_record_field_is_reported() {
    // Dynamic: the table a field names.
    let text = without(REST, "iceberg.tables");
    let text = adding(
        &text,
        &[
            ("iceberg.tables.dynamic-enabled", "true"),
            ("iceberg.tables.route-field", "db_table"),
        ],
    );
    let i = run(&[("dynamic.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.namespace, "lakesink");
    let why = reason(&i, "iceberg.tables.dynamic-enabled");
    assert!(
        why.contains("`db_table`") && why.contains("routes by topic"),
        "{why}"
    );
    assert_eq!(
        dropped(&i),
        [
            "dynamic.json: iceberg.control.topic",
            "dynamic.json: iceberg.tables.dynamic-enabled",
            "dynamic.json: iceberg.tables.route-field",
        ]
    );

    // Static fan-out: listed tables matched by a field's value.
    let text = with(
        REST,
        "iceberg.tables",
        "analytics.events_list,analytics.events_create",
    );
    let text = adding(
        &text,
        &[
            ("iceberg.tables.route-field", "type"),
            ("iceberg.table.analytics.events_list.route-regex", "list"),
            (
                "iceberg.table.analytics.events_create.route-regex",
                "create",
            ),
        ],
    );
    let i = run(&[("fanout.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.namespace, "analytics");
    assert!(reason(&i, "iceberg.tables.route-field").contains("route-regex"));
    assert_eq!(
        dropped(&i),
        [
            "fanout.json: iceberg.control.topic",
            "fanout.json: iceberg.table.analytics.events_create.route-regex",
            "fanout.json: iceberg.table.analytics.events_list.route-regex",
            "fanout.json: iceberg.tables.route-field",
        ]
    );

    // The sink's own config checks.
    let both = adding(REST, &[("iceberg.tables.dynamic-enabled", "true")]);
    let err = run(&[("both.json", &both)]).unwrap_err().to_string();
    assert!(
        err.starts_with("both.json") && err.contains("rejects"),
        "{err}"
    );
    let neither = without(REST, "iceberg.tables");
    let err = run(&[("neither.json", &neither)]).unwrap_err().to_string();
    assert!(err.contains("neither"), "{err}");
}

#[test]
fn upsert_mode_maps_to_upsert_tables_and_debeziums_transform_flattens() {
    // Tabular's connector, before it moved to Apache Iceberg, with its Debezium transform.
    let text = REST
        .replace(
            "org.apache.iceberg.connect.IcebergSinkConnector",
            "io.tabular.iceberg.connect.IcebergSinkConnector",
        )
        .replace(
            "io.debezium.transforms.ExtractNewRecordState",
            "io.tabular.iceberg.connect.transforms.DebeziumTransform",
        );
    let text = adding(
        &text,
        &[
            ("iceberg.tables.upsert-mode-enabled", "true"),
            ("iceberg.tables.cdc-field", "_cdc.op"),
            ("iceberg.tables.default-id-columns", "id"),
            ("transforms.unwrap.cdc.target.pattern", "{db}.{table}"),
        ],
    );
    let i = run(&[("tabular.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.content, Content::Flattened);
    assert!(noted(
        &i,
        "(DebeziumTransform) → lake.content = \"flattened\""
    ));
    assert_eq!(l.mode, LakeMode::Upsert);
    assert!(noted(
        &i,
        "iceberg.tables.upsert-mode-enabled = true → lake.mode = \"upsert\""
    ));
    assert!(reason(&i, "iceberg.tables.cdc-field").contains("Debezium operation itself"));
    assert!(reason(&i, "iceberg.tables.default-id-columns").contains("record key"));
    assert_eq!(
        dropped(&i),
        [
            "tabular.json: iceberg.control.topic",
            "tabular.json: iceberg.tables.cdc-field",
            "tabular.json: iceberg.tables.default-id-columns",
            "tabular.json: transforms.unwrap.cdc.target.pattern",
        ]
    );
    // Without upsert mode, the operation and id columns have no table to key.
    let text = adding(
        REST,
        &[
            ("iceberg.tables.cdc-field", "_cdc.op"),
            ("iceberg.tables.default-id-columns", "id"),
        ],
    );
    let i = run(&[("append.json", &text)]).expect("import");
    let l = lake(
        &i,
        &[
            ("LAKESINK_LAKE_CREDENTIAL", "c"),
            ("LAKESINK_LAKE_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(l.mode, LakeMode::Append);
    for key in [
        "iceberg.tables.cdc-field",
        "iceberg.tables.default-id-columns",
    ] {
        assert!(reason(&i, key).contains("append tables"), "{key}");
    }
    // Upsert mode off is what lakesink does.
    let text = adding(REST, &[("iceberg.tables.upsert-mode-enabled", "false")]);
    let i = run(&[("rest.json", &text)]).expect("import");
    assert_eq!(dropped(&i), ["rest.json: iceberg.control.topic"]);
}

#[test]
fn settings_of_the_coordinator_hadoop_and_the_defaults_are_reported() {
    let text = adding(
        JDBC,
        &[
            ("iceberg.control.commit.timeout-ms", "60000"),
            ("iceberg.control.group-id-prefix", "cg-"),
            ("iceberg.kafka.bootstrap.servers", "kafka:9092"),
            ("iceberg.kafka.security.protocol", "SASL_SSL"),
            ("iceberg.tables.default-commit-branch", "staging"),
            ("iceberg.tables.auto-create-props.format-version", "2"),
            ("iceberg.tables.schema-case-insensitive", "true"),
            (
                "iceberg.tables.write-props.write.parquet.compression-codec",
                "brotli",
            ),
            ("iceberg.tables.default-partition-by", "weeks(ts)"),
        ],
    );
    let text = without(&text, "iceberg.tables.auto-create-enabled");
    let i = run(&[("jdbc.json", &text)]).expect("import");
    let c = load(&i, &[]);
    // The control topic's brokers are the cluster's.
    assert_eq!(c.kafka.brokers, "kafka:9092");
    assert!(noted(
        &i,
        "kafka.brokers is iceberg.kafka.bootstrap.servers"
    ));
    let l = c.lake.expect("lake");
    assert_eq!(l.codec, Codec::Zstd);
    assert!(l.partition_by.is_empty());
    assert!(noted(&i, "auto-create-enabled is off (its default)"));
    assert!(noted(&i, "evolve-schema-enabled is off (its default)"));
    assert!(noted(&i, "schema-case-insensitive"));
    for key in [
        "iceberg.control.commit.timeout-ms",
        "iceberg.control.group-id-prefix",
    ] {
        assert!(reason(&i, key).contains("no coordinator"), "{key}");
    }
    assert!(reason(&i, "iceberg.tables.default-partition-by").contains("weeks"));
    assert_eq!(
        dropped(&i),
        [
            "jdbc.json: iceberg.catalog.io-impl",
            "jdbc.json: iceberg.control.commit.timeout-ms",
            "jdbc.json: iceberg.control.group-id-prefix",
            "jdbc.json: iceberg.hadoop.fs.s3a.endpoint",
            "jdbc.json: iceberg.kafka.security.protocol",
            "jdbc.json: iceberg.tables.auto-create-props.format-version",
            "jdbc.json: iceberg.tables.default-commit-branch",
            "jdbc.json: iceberg.tables.default-partition-by",
            "jdbc.json: iceberg.tables.write-props.write.parquet.compression-codec",
        ]
    );
}

#[test]
fn an_iceberg_sink_and_a_debezium_jdbc_sink_merge_beside_each_other() {
    let jdbc = include_str!("../../../tests/fixtures/debezium-jdbc-sink.json");
    let lake_sink = with(JDBC, "topics", "orders").replace(
        "\"iceberg.tables\": \"cdc.shop_public_orders\"",
        "\"iceberg.tables\": \"cdc.orders\"",
    );
    // The same format as the JDBC sink, which names no converter.
    let lake_sink = without(
        &without(&lake_sink, "value.converter"),
        "value.converter.apicurio.registry.url",
    );
    let i = run(&[
        ("debezium-jdbc-sink.json", jdbc),
        ("iceberg.json", &lake_sink),
    ])
    .expect("import");
    let c = load(&i, &[("LAKESINK_REPLICA_PASSWORD", "pgpassword")]);
    assert_eq!(c.kafka.topics, ["orders"]);
    let r = c.replica.expect("replica");
    assert_eq!(r.url.expose(), "postgres://pguser@localhost/db");
    let l = c.lake.expect("lake");
    assert_eq!(l.catalog, CatalogKind::Sql);
    assert_eq!(
        (l.namespace.as_str(), l.table_name("orders").as_str()),
        ("cdc", "orders")
    );
    assert_eq!(
        i.sources
            .iter()
            .map(|(f, _, _)| f.as_str())
            .collect::<Vec<_>>(),
        ["debezium-jdbc-sink.json", "iceberg.json"]
    );
    // The lake section comes after the replica's, and the commented form loads too.
    assert!(i.toml.find("[replica]") < i.toml.find("[lake]"));
    Config::from_toml_unresolved(&i.with_report_comments(), "commented", Vec::new())
        .expect("loads");

    // Two Iceberg sinks: one [lake] section.
    let err = run(&[("a.json", &lake_sink), ("b.json", &lake_sink)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a.json and b.json are both Iceberg sinks") && err.contains("[lake]"),
        "{err}"
    );
    // Different topics: as for the other sinks.
    let err = run(&[("debezium-jdbc-sink.json", jdbc), ("iceberg.json", JDBC)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("disagree on the topics"), "{err}");
    // Different formats: JSON and Avro.
    let err = run(&[
        ("rest.json", &with(REST, "topics", "orders")),
        ("jdbc.json", &with(JDBC, "topics", "orders")),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("disagree on the format"), "{err}");
}

#[test]
fn conflicting_catalog_settings_are_errors() {
    let text = adding(
        REST,
        &[(
            "iceberg.catalog.catalog-impl",
            "org.apache.iceberg.rest.RESTCatalog",
        )],
    );
    let err = run(&[("x.json", &text)]).unwrap_err().to_string();
    assert!(err.contains("both `iceberg.catalog.type`"), "{err}");
    let text = without(REST, "iceberg.catalog.uri");
    let err = run(&[("x.json", &text)]).unwrap_err().to_string();
    assert!(err.contains("without `iceberg.catalog.uri`"), "{err}");
    let text = with(REST, "iceberg.control.commit.interval-ms", "0");
    assert!(run(&[("x.json", &text)]).is_err());
}

#[test]
fn partition_lists_split_outside_parentheses() {
    assert_eq!(
        split_outside_parens("region, bucket(id, 16),truncate(4, code) ,"),
        ["region", "bucket(id, 16)", "truncate(4, code)"]
    );
    assert!(split_outside_parens(" ").is_empty());
}
