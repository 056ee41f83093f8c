//! Type identity: with Debezium propagating the source column types, every column of the
//! replica has the source's own type (`format_type` equal) and the source's value as text;
//! `json` keeps its text exactly (whitespace, key order, duplicate keys, `\u0000`). Without
//! propagation nothing breaks and `json` stays `json`.

use lakesink_schema_registry::{Format, IdKind};
use lakesink_tests::debezium::decode_all;
use lakesink_tests::{Stack, unique, unreachable};
use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::replica::support::{Capture, replicator, rows};

/// `{"b": 1,  "a": 2, "a": 3, …}`: what `jsonb` would reorder, respace and collapse, and a
/// `\u0000` it refuses outright.
const JSON: &str = r#"'{"b": 1,  "a": 2, "a": 3, "s": "x\u0000y", "n": [1.50, 2e3]}'"#;

/// (column, type, value, extension it needs). `MOOD` is an enum the replica also has; `GONE`
/// one it lacks, which falls back to text.
const COLUMNS: &[(&str, &str, &str, Option<&str>)] = &[
    ("j", "json", JSON, None),
    ("jb", "jsonb", r#"'{"b": 1, "a": [true, null]}'"#, None),
    ("c5", "char(5)", "'ab'", None),
    ("c5a", "char(5)[]", "'{ab,cde}'", None),
    ("ip", "inet", "'10.1.2.3/8'", None),
    ("ips", "inet[]", "'{192.168.0.1,::1}'", None),
    ("cn", "cidr", "'10.0.0.0/8'", None),
    ("mac", "macaddr", "'08:00:2b:01:02:03'", None),
    ("mac8", "macaddr8", "'08:00:2b:01:02:03:04:05'", None),
    ("r4", "int4range", "'[1,10)'", None),
    ("r8", "int8range", "'(,5]'", None),
    ("nr", "numrange", "'(1.5,2.50]'", None),
    (
        "rtz",
        "tstzrange",
        "'[2024-01-01 00:00+00,2024-02-01 12:00+02)'",
        None,
    ),
    ("dr", "daterange", "'[2024-01-01,2024-02-01]'", None),
    ("mo", "MOOD", "'happy'", None),
    ("gone", "GONE", "'b'", None),
    ("lt", "ltree", "'top.mid.leaf'", Some("ltree")),
    (
        "hs",
        "hstore",
        r#"'k=>v, "x y"=>NULL, "q\"uo"=>"b\\s"'"#,
        Some("hstore"),
    ),
    ("ci", "citext", "'MiXeD'", Some("citext")),
];

/// Per column, the expression compared on both sides where plain text depends on the session
/// (a `tstzrange` prints in the session's time zone).
fn compared(col: &str) -> String {
    match col {
        "rtz" => "format('%s %s %s %s', lower(rtz) AT TIME ZONE 'UTC', upper(rtz) AT TIME ZONE \
                  'UTC', lower_inc(rtz), upper_inc(rtz))"
            .into(),
        // The output function's text (`::text` would cut char's padding, add inet's mask).
        c => format!("format('%s', {c})"),
    }
}

struct Fixture {
    stack: Stack,
    src: PgPool,
    name: String,
    mood: String,
    gone: String,
    cols: Vec<(&'static str, String, &'static str)>,
}

async fn exec(pool: &PgPool, sqls: &[String]) {
    for sql in sqls {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Creates `ext` unless it is there (another test may be creating it at the same time).
async fn extension(pool: &PgPool, ext: &str) -> Result<(), sqlx::Error> {
    let sql = format!("CREATE EXTENSION IF NOT EXISTS {ext}");
    match sqlx::query(AssertSqlSafe(sql)).execute(pool).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let there: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_extension WHERE extname = $1")
                    .bind(ext)
                    .fetch_optional(pool)
                    .await?;
            there.map(|_| ()).ok_or(e)
        }
    }
}

/// The source table with a row of every type (the extensions' where the source has them), in
/// the snapshot, and a second row streamed later.
async fn fixture(prefix: &str) -> Fixture {
    let stack = Stack::from_env();
    let src = PgPool::connect(&stack.source_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL source", &stack.source_pg_url, e)
            )
        });
    let name = unique(prefix);
    let mood = format!("{name}_mood");
    let gone = format!("{name}_gone");
    let mut cols = Vec::new();
    let replica = PgPool::connect(&stack.replica_pg_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                unreachable("PostgreSQL replica", &stack.replica_pg_url, e)
            )
        });
    for (col, ty, value, ext) in COLUMNS {
        if let Some(ext) = ext {
            let mut missing = None;
            for (db, pool) in [("source", &src), ("replica", &replica)] {
                if let Err(e) = extension(pool, ext).await {
                    missing = Some(format!("the {db} cannot create extension {ext}: {e}"));
                }
            }
            if let Some(why) = missing {
                eprintln!("NOTE: column {col} not tested: {why} (postgresql-contrib missing?)");
                continue;
            }
        }
        let ty = ty.replace("MOOD", &mood).replace("GONE", &gone);
        cols.push((*col, ty, *value));
    }
    let defs: Vec<String> = cols.iter().map(|(c, t, _)| format!("{c} {t}")).collect();
    let names: Vec<&str> = cols.iter().map(|(c, _, _)| *c).collect();
    let values: Vec<&str> = cols.iter().map(|(_, _, v)| *v).collect();
    exec(
        &src,
        &[
            format!("CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy')"),
            format!("CREATE TYPE {gone} AS ENUM ('a', 'b')"),
            format!(
                "CREATE TABLE public.{name} (id integer PRIMARY KEY, {})",
                defs.join(", ")
            ),
            format!(
                "INSERT INTO public.{name} (id, {}) VALUES (1, {})",
                names.join(", "),
                values.join(", ")
            ),
        ],
    )
    .await;
    Fixture {
        stack,
        src,
        name,
        mood,
        gone,
        cols,
    }
}

impl Fixture {
    /// Starts the capture, streams row 2 (the same values) and an update of row 1, and
    /// applies every record (one call each, then all replayed) to a fresh replica schema.
    async fn replicate(
        &self,
        extra: serde_json::Value,
    ) -> (lakesink_writers::PgReplicator, String) {
        let capture = Capture::start_with(&self.stack, &self.name, &[&self.name], extra).await;
        let names: Vec<&str> = self.cols.iter().map(|(c, _, _)| *c).collect();
        let values: Vec<&str> = self.cols.iter().map(|(_, _, v)| *v).collect();
        exec(
            &self.src,
            &[
                format!(
                    "INSERT INTO public.{} (id, {}) VALUES (2, {})",
                    self.name,
                    names.join(", "),
                    values.join(", ")
                ),
                format!(
                    "UPDATE public.{} SET c5 = 'x', ip = '::1', mo = 'sad' WHERE id = 1",
                    self.name
                ),
            ],
        )
        .await;
        let records = capture.read(&[3]).await;
        let avro = Format::Avro {
            payload_ids: IdKind::ContentId,
            check_artifacts: true,
        };
        let batches = decode_all(&self.stack, avro, &records).await;
        capture.stop(&self.src).await;
        let (r, schema) = replicator(|_| {}).await;
        // The replica has the one enum (the fixture saw to the extensions), not the other.
        exec(
            r.pool(),
            &[format!(
                "CREATE TYPE public.{} AS ENUM ('sad', 'ok', 'happy')",
                self.mood
            )],
        )
        .await;
        for b in &batches {
            r.apply("types", std::slice::from_ref(b))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        r.apply("types", &batches).await.expect("replay");
        (r, schema)
    }

    /// Each column's type: on the source, and in the replica's table.
    async fn types(
        &self,
        r: &lakesink_writers::PgReplicator,
        schema: &str,
    ) -> [Vec<(String, String)>; 2] {
        let sql = |s: &str| {
            format!(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
                 WHERE a.attrelid = '\"{s}\".{}'::regclass AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attname",
                self.name
            )
        };
        let src: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(sql("public")))
            .fetch_all(&self.src)
            .await
            .expect("source types");
        [src, rows(r, &sql(schema)).await]
    }

    /// The value of each of `cols` as text (or `compared`), by id: on the source and in the
    /// replica.
    async fn values(
        &self,
        r: &lakesink_writers::PgReplicator,
        schema: &str,
        cols: &[&str],
    ) -> [Vec<Vec<Option<String>>>; 2] {
        let exprs: Vec<String> = cols.iter().map(|c| compared(c)).collect();
        let sql = |s: &str| {
            format!(
                "SELECT ARRAY[{}] FROM \"{s}\".{} ORDER BY id",
                exprs.join(", "),
                self.name
            )
        };
        let get = |rows: Vec<(Vec<Option<String>>,)>| rows.into_iter().map(|(r,)| r).collect();
        let src: Vec<(Vec<Option<String>>,)> = sqlx::query_as(AssertSqlSafe(sql("public")))
            .fetch_all(&self.src)
            .await
            .expect("source values");
        [get(src), get(rows(r, &sql(schema)).await)]
    }

    async fn drop(self, r: &lakesink_writers::PgReplicator) {
        let sql = format!("DROP TYPE public.{} CASCADE", self.mood);
        exec(r.pool(), &[sql]).await;
        exec(
            &self.src,
            &[
                format!("DROP TABLE public.{}", self.name),
                format!("DROP TYPE {}, {}", self.mood, self.gone),
            ],
        )
        .await;
    }
}

#[tokio::test]
async fn the_replica_keeps_the_source_types_debezium_propagates() {
    let f = fixture("types").await;
    let (r, schema) = f
        .replicate(json!({"column.propagate.source.type": ".*"}))
        .await;
    let [src, got] = f.types(&r, &schema).await;
    let want: Vec<(String, String)> = src
        .into_iter()
        .map(|(c, t)| {
            // The enum the replica lacks is text; the one it has is found by its name.
            let t = if c == "gone" { "text".to_owned() } else { t };
            (c, t)
        })
        .collect();
    assert_eq!(got, want, "column types: replica vs source");
    let cols: Vec<&str> = f.cols.iter().map(|(c, _, _)| *c).collect();
    let [src, got] = f.values(&r, &schema, &cols).await;
    assert_eq!(got.len(), 2, "{got:?}");
    for (i, (g, w)) in got.iter().zip(&src).enumerate() {
        for (c, name) in cols.iter().enumerate() {
            assert_eq!(g[c], w[c], "row {i} column {name}");
        }
    }
    // The padding is the type's, not data: char(5) 'ab' is 'ab' to the replica too.
    let c5: Vec<(bool, i32)> = rows(
        &r,
        &format!(
            "SELECT c5 = 'ab', octet_length(c5::text) FROM \"{schema}\".{} WHERE id = 2",
            f.name
        ),
    )
    .await;
    assert_eq!(c5, vec![(true, 2)]);
    f.drop(&r).await;
}

#[tokio::test]
async fn without_propagation_json_stays_json_and_nothing_breaks() {
    let f = fixture("types_plain").await;
    let (r, schema) = f.replicate(json!({})).await;
    let [_, got] = f.types(&r, &schema).await;
    let ty = |c: &str| got.iter().find(|(n, _)| n == c).map(|(_, t)| t.as_str());
    assert_eq!(ty("j"), Some("json"), "{got:?}");
    // Without the source type json and jsonb look alike: json, which holds either's text.
    assert_eq!(ty("jb"), Some("json"), "{got:?}");
    assert_eq!(ty("c5"), Some("text"), "{got:?}");
    assert_eq!(ty("ip"), Some("text"), "{got:?}");
    let [src, got] = f.values(&r, &schema, &["j", "jb", "ip"]).await;
    assert_eq!(
        got, src,
        "json text exactly as written, jsonb's text, inet's text"
    );
    assert_eq!(got.len(), 2);
    f.drop(&r).await;
}
