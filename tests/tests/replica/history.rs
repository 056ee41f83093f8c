//! History tables against real Debezium: every change (snapshot reads, updates, deletes with
//! their before image, truncates) a row of its own beside the mirror, keyed by its Kafka
//! coordinates, so applying the records again, under another group, adds nothing.

use lakesink_config::TableMode;
use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique};

use crate::replica::support::{Capture, exec, replicator, rows, source_pool};

/// op, id, v, and whether the source time and position are set.
type Change = (String, Option<i32>, Option<String>, bool, bool);

#[tokio::test]
async fn every_change_is_a_history_row_once() {
    let stack = Stack::from_env();
    let src = source_pool(&stack).await;
    let name = unique("hist");
    let (keyed, nokey) = (format!("{name}_k"), format!("{name}_n"));
    exec(
        &src,
        &[
            format!("CREATE TABLE public.{keyed} (id integer PRIMARY KEY, v text)"),
            format!("ALTER TABLE public.{keyed} REPLICA IDENTITY FULL"),
            format!("INSERT INTO public.{keyed} VALUES (1, 'a'), (2, 'b')"),
            format!("CREATE TABLE public.{nokey} (id integer, v text)"),
            format!("INSERT INTO public.{nokey} VALUES (7, 'x')"),
        ],
    )
    .await;
    let capture = Capture::start(&stack, &name, &[&keyed, &nokey]).await;
    exec(
        &src,
        &[
            format!("UPDATE public.{keyed} SET v = 'a2' WHERE id = 1"),
            format!("DELETE FROM public.{keyed} WHERE id = 2"),
            format!("INSERT INTO public.{keyed} VALUES (3, 'c')"),
            format!("TRUNCATE public.{keyed}"),
            format!("INSERT INTO public.{keyed} VALUES (4, 'd')"),
            format!("INSERT INTO public.{nokey} VALUES (8, 'y')"),
        ],
    )
    .await;
    // keyed: 2 snapshot, update, delete + tombstone, insert, truncate, insert; nokey: 1
    // snapshot, 1 insert.
    let records = capture.read(&[8, 2]).await;
    let avro = Format::Avro {
        payload_ids: IdKind::ContentId,
        check_artifacts: true,
    };
    let batches = decode_all(&stack, avro, &records).await;

    let (r, schema) = replicator(|c| {
        c.mode = TableMode::Both;
        c.truncate_enabled = true;
    })
    .await;
    for b in &batches {
        r.apply("hist", std::slice::from_ref(b))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // Everything again under another group: the coordinates are taken.
    r.apply("hist-again", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let history = |table: &str| {
        format!(
            "SELECT __op, id, v, __source_ts IS NOT NULL, __source_position IS NOT NULL \
             FROM \"{schema}\".{table}_history ORDER BY __offset"
        )
    };
    let got: Vec<Change> = rows(&r, &history(&keyed)).await;
    let want: Vec<Change> = [
        ("r", Some(1), Some("a")),
        ("r", Some(2), Some("b")),
        ("u", Some(1), Some("a2")),
        ("d", Some(2), Some("b")), // the before image (REPLICA IDENTITY FULL)
        ("c", Some(3), Some("c")),
        ("t", None, None),
        ("c", Some(4), Some("d")),
    ]
    .into_iter()
    .map(|(op, id, v)| (op.to_owned(), id, v.map(str::to_owned), true, true))
    .collect();
    assert_eq!(got, want);
    let coordinates: Vec<(String, i32, i64)> = rows(
        &r,
        &format!(
            "SELECT __topic, __partition, __offset FROM \"{schema}\".{keyed}_history \
             ORDER BY __offset"
        ),
    )
    .await;
    let topic = format!("{name}.public.{keyed}");
    // Offset 4 is the tombstone, which is no change of its own.
    let offsets: Vec<i64> = coordinates.iter().map(|c| c.2).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 5, 6, 7]);
    assert!(coordinates.iter().all(|c| c.0 == topic && c.1 == 0));
    let key: Vec<(String,)> = rows(
        &r,
        &format!(
            "SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey, a.attnum))::text \
             FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = '\"{schema}\".{keyed}_history'::regclass AND i.indisprimary"
        ),
    )
    .await;
    assert_eq!(key, [("__topic,__partition,__offset".to_owned(),)]);

    // The mirror beside it, as without a history.
    let mirror: Vec<(i32, Option<String>)> = rows(
        &r,
        &format!("SELECT id, v FROM \"{schema}\".{keyed} ORDER BY id"),
    )
    .await;
    assert_eq!(mirror, [(4, Some("d".to_owned()))]);
    let got: Vec<Change> = rows(&r, &history(&nokey)).await;
    assert_eq!(
        got.iter().map(|c| (c.0.as_str(), c.1)).collect::<Vec<_>>(),
        [("r", Some(7)), ("c", Some(8))]
    );

    // A table with only a history: no mirror is made.
    let (only, only_schema) = replicator(|c| c.mode = TableMode::History).await;
    only.apply("hist-only", &batches)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tables: Vec<(String,)> = rows(
        &only,
        &format!(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = '{only_schema}' ORDER BY 1"
        ),
    )
    .await;
    assert_eq!(
        tables,
        [(format!("{keyed}_history"),), (format!("{nokey}_history"),)]
    );

    capture.stop(&src).await;
    exec(
        &src,
        &[format!("DROP TABLE public.{keyed}, public.{nokey}")],
    )
    .await;
}
