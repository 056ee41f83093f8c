//! Soft deletes against real Debezium: deleted rows stay, marked with the time the source
//! deleted them; a re-insert revives a row; a truncate marks what it removed. Applied record
//! by record and all in one call, the replicas are equal.

use lakesink_config::DeleteMode;
use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};

use crate::replica::support::{Capture, exec, record_by_record, replicator, rows, source_pool};

/// id, v, the flag, and the delete time in µs since the epoch.
type Row = (i32, Option<String>, bool, Option<i64>);

const NOW_US: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

#[tokio::test]
async fn soft_deletes_keep_rows_marked_and_revive_them() {
    let stack = Stack::from_env();
    let src = source_pool(&stack).await;
    let name = unique("soft");
    let (soft, trunc) = (format!("{name}_s"), format!("{name}_t"));
    exec(
        &src,
        &[
            format!("CREATE TABLE public.{soft} (id integer PRIMARY KEY, v text)"),
            format!("INSERT INTO public.{soft} VALUES (1, 'a'), (2, 'b'), (3, 'c')"),
            format!("CREATE TABLE public.{trunc} (id integer PRIMARY KEY, v text)"),
            format!("INSERT INTO public.{trunc} VALUES (1, 'x'), (2, 'y')"),
        ],
    )
    .await;
    let capture = Capture::start(&stack, &name, &[&soft, &trunc]).await;
    let (started,): (i64,) = sqlx::query_as(NOW_US).fetch_one(&src).await.expect("clock");
    // Apart in time, so that the deletes' times order them.
    let changes: Vec<String> = [
        format!("DELETE FROM public.{soft} WHERE id = 2"),
        format!("INSERT INTO public.{soft} VALUES (4, 'd')"),
        format!("DELETE FROM public.{soft} WHERE id = 4"),
        format!("INSERT INTO public.{soft} VALUES (2, 'b2')"),
        format!("UPDATE public.{soft} SET v = 'c2' WHERE id = 3"),
        format!("DELETE FROM public.{soft} WHERE id = 3"),
        format!("DELETE FROM public.{soft} WHERE id = 1"),
        format!("DELETE FROM public.{trunc} WHERE id = 1"),
        format!("TRUNCATE public.{trunc}"),
        format!("INSERT INTO public.{trunc} VALUES (3, 'z')"),
    ]
    .into_iter()
    .flat_map(|sql| [sql, "SELECT pg_sleep(0.02)".to_owned()])
    .collect();
    exec(&src, &changes).await;
    let (ended,): (i64,) = sqlx::query_as(NOW_US).fetch_one(&src).await.expect("clock");
    // soft: 3 snapshot, 4 deletes with tombstones, 2 inserts, an update; trunc: 2 snapshot,
    // a delete with its tombstone, the truncate, an insert.
    let records = capture.read(&[14, 6]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    let soft_config = |c: &mut lakesink_config::ReplicaConfig| {
        c.delete_mode = DeleteMode::Soft;
        c.truncate_enabled = true;
    };
    let (each, each_schema) = replicator(soft_config).await;
    for b in record_by_record(&batches) {
        each.apply("soft-each", std::slice::from_ref(&b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let (all, all_schema) = replicator(soft_config).await;
    // Its own group: the offsets table is shared.
    all.apply("soft-all", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    all.apply("soft-all", &batches)
        .await
        .expect("a replay is a no-op");

    let read = |r, schema: String, table: String| async move {
        let r: &lakesink_writers::PgReplicator = r;
        rows::<Row>(
            r,
            &format!(
                "SELECT id, v, __deleted, (extract(epoch FROM __deleted_at) * 1000000)::bigint \
                 FROM \"{schema}\".{table} ORDER BY id"
            ),
        )
        .await
    };
    for table in [&soft, &trunc] {
        let one = read(&each, each_schema.clone(), table.clone()).await;
        let other = read(&all, all_schema.clone(), table.clone()).await;
        assert_eq!(one, other, "{table}: record by record and in one call");
    }

    let got = read(&each, each_schema.clone(), soft.clone()).await;
    let shape: Vec<(i32, Option<&str>, bool, bool)> = got
        .iter()
        .map(|(id, v, d, at)| (*id, v.as_deref(), *d, at.is_some()))
        .collect();
    assert_eq!(
        shape,
        [
            (1, Some("a"), true, true),
            (2, Some("b2"), false, false),
            (3, Some("c2"), true, true),
            (4, Some("d"), true, true),
        ],
        "{got:?}"
    );
    let at = |rows: &[Row], id: i32| {
        rows.iter()
            .find(|r| r.0 == id)
            .and_then(|r| r.3)
            .expect("a delete time")
    };
    // The source's times of the deletes, in the order they ran.
    assert!(
        at(&got, 4) < at(&got, 3) && at(&got, 3) < at(&got, 1),
        "{got:?}"
    );
    let slack = 1_000_000;
    for id in [1, 3, 4] {
        let t = at(&got, id);
        assert!(
            t >= started - slack && t <= ended + slack,
            "{id}: {t} outside {started}..{ended}"
        );
    }

    let got = read(&each, each_schema.clone(), trunc.clone()).await;
    let shape: Vec<(i32, bool)> = got.iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(shape, [(1, true), (2, true), (3, false)], "{got:?}");
    // Row 1 keeps the time of its delete, not the truncate's.
    assert!(at(&got, 1) < at(&got, 2), "{got:?}");
    assert_eq!(got[2].3, None);

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{soft}, public.{trunc}")]).await;
}

/// A pipeline migrated from a Debezium JDBC sink behind the unwrap SMT in rewrite mode with
/// deletes off: its table holds deleted rows with `__deleted` = 'true' (text). The imported
/// config keeps doing that, on flattened records from real Debezium.
#[tokio::test]
async fn rewritten_deletes_of_a_migrated_jdbc_sink_stay_soft() {
    use lakesink_config::connect_import::{Input, Options, import};
    let stack = Stack::from_env();
    let src = source_pool(&stack).await;
    let name = unique("rewrite");
    let jdbc = serde_json::json!({
        "name": "orders-sink",
        "config": {
            "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
            "connection.url": "jdbc:postgresql://127.0.0.1:5434/replica",
            "connection.username": "lakesink",
            "topics": format!("{name}.public.{name}"),
            "insert.mode": "upsert",
            "primary.key.mode": "record_key",
            "schema.evolution": "basic",
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.unwrap.delete.tombstone.handling.mode": "rewrite"
        }
    });
    let imported = import(
        &[Input {
            name: "sink.json".into(),
            text: jdbc.to_string(),
        }],
        &Options {
            brokers: Some(stack.kafka_brokers.clone()),
        },
    )
    .expect("import");
    let config = lakesink_config::Config::from_toml(&imported.toml, "imported", Vec::new())
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml));
    let settings = config.replica.expect("replica");

    exec(
        &src,
        &[
            format!("CREATE TABLE public.{name} (id integer PRIMARY KEY, v text)"),
            format!("INSERT INTO public.{name} VALUES (1, 'a'), (2, 'b')"),
        ],
    )
    .await;
    let unwrap = serde_json::json!({
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
        // The replicator's tables are named `${source.table}`.
        "transforms.unwrap.add.fields": "table",
    });
    let capture = Capture::start_with(&stack, &name, &[&name], unwrap).await;
    exec(
        &src,
        &[
            format!("DELETE FROM public.{name} WHERE id = 2"),
            format!("INSERT INTO public.{name} VALUES (3, 'c')"),
            format!("UPDATE public.{name} SET v = 'a2' WHERE id = 1"),
        ],
    )
    .await;
    let records = capture.read(&[5]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    let (r, schema) = replicator(|c| {
        c.delete_enabled = settings.delete_enabled;
        c.delete_mode = settings.delete_mode;
        c.deleted_column.clone_from(&settings.deleted_column);
        c.deleted_at_column.clone_from(&settings.deleted_at_column);
    })
    .await;
    // The table as the JDBC sink left it.
    exec(
        r.pool(),
        &[
            format!("CREATE SCHEMA \"{schema}\""),
            format!(
                "CREATE TABLE \"{schema}\".{name} (id integer PRIMARY KEY, v text, __deleted text)"
            ),
            format!("INSERT INTO \"{schema}\".{name} VALUES (1, 'a', 'false'), (2, 'b', 'false')"),
        ],
    )
    .await;
    for b in &batches {
        r.apply("rewrite", std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let got: Vec<(i32, String, String)> = rows(
        &r,
        &format!("SELECT id, v, __deleted FROM \"{schema}\".{name} ORDER BY id"),
    )
    .await;
    let want = [(1, "a2", "false"), (2, "b", "true"), (3, "c", "false")]
        .map(|(i, v, d)| (i, v.to_owned(), d.to_owned()));
    assert_eq!(got, want);
    let columns: Vec<(String,)> = rows(
        &r,
        &format!(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = '{schema}' AND table_name = '{name}' ORDER BY ordinal_position"
        ),
    )
    .await;
    assert_eq!(
        columns,
        [("id".into(),), ("v".into(),), ("__deleted".into(),)],
        "no column added"
    );

    capture.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.{name}")]).await;
}
