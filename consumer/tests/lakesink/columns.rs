//! `[[columns]]` end to end with real Debezium: a column excluded, one hashed, one renamed, one
//! masked, a fixed one and metadata added, as the live service writes the raw layer and the replica. Neither holds the excluded column or
//! the hashed values; both hold the same hashes, which are the HMAC of the source's values.

use std::process::Command;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field};
use hmac::{Hmac, KeyInit, Mac};
use lakesink_tests::debezium::Connector;
use lakesink_tests::{Stack, unique};
use sha2::Sha256;
use sqlx::AssertSqlSafe;

use crate::common::{Run, exec, replica_pool};

const KEY: &str = "a-test-key-of-32-bytes-0123456789";

fn hmac_hex(value: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(KEY.as_bytes()).expect("key");
    m.update(value.as_bytes());
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every field name in `f`, nested ones too.
fn names(f: &Field, out: &mut Vec<String>) {
    out.push(f.name().clone());
    if let DataType::Struct(children) = f.data_type() {
        for c in children {
            names(c, out);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn excluded_hashed_and_renamed_columns_reach_both_sinks_alike() {
    let stack = Stack::from_env();
    let name = unique("cols");
    let src = lakesink_tests::source_pool(&stack).await;
    exec(
        &src,
        &[
            format!(
                "CREATE TABLE public.\"{name}\" (id bigint PRIMARY KEY, email text, ssn text, qty integer, phone text)"
            ),
            format!(
                "INSERT INTO public.\"{name}\" SELECT i, 'user' || i || '@example.com', \
                 'ssn-' || i, i, 'phone-' || i FROM generate_series(1, 20) i"
            ),
            format!("INSERT INTO public.\"{name}\" VALUES (21, NULL, 'ssn-21', 21, NULL)"),
        ],
    )
    .await;
    let connector = Connector::start(&stack, &name).await;
    exec(
        &src,
        &[format!(
            "UPDATE public.\"{name}\" SET email = 'changed@example.com' WHERE id = 1"
        )],
    )
    .await;
    connector.read(1).await; // the topic exists
    let topic = connector.topic.clone();
    let policy = format!(
        "[[columns]]\ntopics = \"{}\"\nexclude = [\"ssn\"]\nhash = [\"email\"]\nhash-key = \"env:LAKESINK_HASH_KEY\"\nrename = {{ qty = \"quantity\" }}\nmask = [\"phone\"]\nmask-replacement = \"***\"\nstatic = {{ region = \"eu\" }}\nmetadata = {{ op = \"__op\", source-ts = \"changed_at\", offset = \"kafka_offset\" }}\n",
        regex_escape(&topic)
    );
    let run = Run::with(
        stack.clone(),
        &topic,
        1,
        Some("flush-size = 10\nrotate-interval-ms = 1000"),
        &format!(
            "[replica]\nurl = \"{}\"\ntable-name-format = \"${{source.table}}\"\n\n{policy}",
            stack.replica_pg_url
        ),
    );
    let rep = replica_pool(&stack).await;
    let mut child = run.start_with(None, &[("LAKESINK_HASH_KEY", KEY)]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let query = format!("SELECT id, email, quantity FROM public.\"{name}\" ORDER BY id");
    let got: Vec<(i64, Option<String>, Option<i32>)> = loop {
        let rows: Vec<(i64, Option<String>, Option<i32>)> =
            sqlx::query_as(AssertSqlSafe(query.clone()))
                .fetch_all(&rep)
                .await
                .unwrap_or_default();
        if rows.len() == 21 && rows[0].1.as_deref() == Some(&*hmac_hex("changed@example.com")) {
            break rows;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("lakesink exited: {status}; log:\n{}", run.log_tail());
        }
        assert!(
            Instant::now() < deadline,
            "the replica never caught up ({} rows); log:\n{}",
            rows.len(),
            run.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await; // the raw layer rotates its files
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(child.wait().expect("wait").success(), "stops cleanly");

    // The replica: no ssn, the hash of each email (NULL stays NULL), qty renamed.
    for (id, email, quantity) in &got {
        let want = match id {
            1 => Some(hmac_hex("changed@example.com")),
            21 => None,
            i => Some(hmac_hex(&format!("user{i}@example.com"))),
        };
        assert_eq!(email, &want, "id {id}");
        assert_eq!(*quantity, Some(*id as i32));
    }
    let columns: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT column_name::text FROM information_schema.columns WHERE table_schema = 'public' \
         AND table_name = '{name}' ORDER BY ordinal_position"
    )))
    .fetch_all(&rep)
    .await
    .expect("columns");
    assert_eq!(
        columns.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        [
            "id",
            "email",
            "quantity",
            "phone",
            "region",
            "__op",
            "changed_at",
            "kafka_offset"
        ]
    );
    // The masked column: the replacement, NULL kept.
    let phones: Vec<(Option<String>,)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT phone FROM public.\"{name}\" ORDER BY id"
    )))
    .fetch_all(&rep)
    .await
    .expect("phones");
    let mut want_phones = vec![(Some("***".to_owned()),); 20];
    want_phones.push((None,));
    assert_eq!(phones, want_phones);
    // The added columns: a fixed value, the operation, the source's time, the offset.
    let added: Vec<(i64, String, String, bool, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, region, __op, changed_at > now() - interval '1 hour', kafka_offset \
         FROM public.\"{name}\" ORDER BY id"
    )))
    .fetch_all(&rep)
    .await
    .expect("added columns");
    assert_eq!(added.len(), 21);
    for (id, region, op, recent, offset) in &added {
        assert_eq!(region, "eu");
        assert!(recent, "id {id}: the source's time");
        let (want_op, want_offset) = if *id == 1 { ("u", 21) } else { ("r", id - 1) };
        assert_eq!((op.as_str(), *offset), (want_op, want_offset), "id {id}");
    }

    // The raw layer: no ssn in any file's schema, the same hashes in `after`.
    let files = run.files("").await;
    assert!(!files.is_empty(), "the raw layer has files");
    let mut raw_emails = Vec::new();
    let mut raw_phones = Vec::new();
    for (schema, batches) in &files {
        let mut all = Vec::new();
        for f in schema.fields() {
            names(f, &mut all);
        }
        assert!(!all.iter().any(|n| n == "ssn"), "{all:?}");
        assert!(all.iter().any(|n| n == "quantity"), "{all:?}");
        for b in batches {
            raw_emails.extend(after_emails(b));
            raw_phones.extend(after_text(b, "phone"));
        }
    }
    assert_eq!(raw_emails.len(), 22, "21 snapshot rows and an update");
    assert_eq!(raw_phones.len(), 22);
    assert!(
        raw_phones
            .iter()
            .all(|p| p.as_deref() == Some("***") || p.is_none()),
        "{raw_phones:?}"
    );
    assert_eq!(raw_phones.iter().filter(|p| p.is_none()).count(), 1);
    for (id, email) in raw_emails {
        let want = match id {
            21 => None,
            i => got.iter().find(|g| g.0 == i).and_then(|g| g.1.clone()),
        };
        // Row 1's snapshot image holds its first email, hashed.
        if id == 1 && email.as_deref() == Some(&*hmac_hex("user1@example.com")) {
            continue;
        }
        assert_eq!(email, want, "raw layer, id {id}");
    }

    connector.stop(&src).await;
    exec(&src, &[format!("DROP TABLE public.\"{name}\"")]).await;
    exec(&rep, &[format!("DROP TABLE public.\"{name}\"")]).await;
}

/// `column`'s text in each row's `after` image that has one.
fn after_text(b: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let Some(after) = b.column_by_name("after").and_then(|a| a.as_struct_opt()) else {
        return Vec::new();
    };
    let values = after
        .column_by_name(column)
        .expect("column")
        .as_string::<i32>();
    (0..b.num_rows())
        .filter(|r| after.is_valid(*r))
        .map(|r| values.is_valid(r).then(|| values.value(r).to_owned()))
        .collect()
}

/// (id, email) of each row's `after` image that has one.
fn after_emails(b: &RecordBatch) -> Vec<(i64, Option<String>)> {
    let Some(after) = b.column_by_name("after").and_then(|a| a.as_struct_opt()) else {
        return Vec::new();
    };
    let ids = after
        .column_by_name("id")
        .expect("id")
        .as_primitive::<arrow_array::types::Int64Type>();
    let emails = after
        .column_by_name("email")
        .expect("email")
        .as_string::<i32>();
    (0..b.num_rows())
        .filter(|r| after.is_valid(*r))
        .map(|r| {
            (
                ids.value(r),
                emails.is_valid(r).then(|| emails.value(r).to_owned()),
            )
        })
        .collect()
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                vec![c]
            } else {
                vec!['\\', '\\', c]
            }
        })
        .collect()
}
