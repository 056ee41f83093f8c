//! The wide table of the benchmarks: 32 columns, about 1.2 KB a change event on average, the
//! shape of the published S3 sink figures (~1.2 KB rows), so lakesink's MB/s can be set beside
//! them. Names, addresses and free text are drawn from word lists by a hash of the row, so values
//! repeat as a real table's do, without compressing to nothing.

use serde_json::{Value, json};

use super::{decimal, long, splitmix64, string};

/// Debezium's value schema of the wide `orders` table: its PostgreSQL connector's types for
/// `bigint`, `text`, `numeric(12,2)`, `integer`, `boolean`, `timestamp`, `timestamptz`,
/// `date`, `time`, `jsonb`, `uuid` and `double precision`.
pub(super) fn value_schema(ns: &str) -> Value {
    let decimal = || {
        json!({"type": "bytes", "scale": 2, "precision": 12, "connect.version": 1,
            "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"},
            "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"})
    };
    let named =
        |t: &str, name: &str| json!({"type": t, "connect.version": 1, "connect.name": name});
    let mut fields = vec![
        json!({"name": "id", "type": "long"}),
        json!({"name": "account_id", "type": "long"}),
    ];
    for name in [
        "order_no",
        "first_name",
        "last_name",
        "email",
        "phone",
        "street",
        "city",
        "region",
        "postal_code",
        "country",
        "currency",
    ] {
        fields.push(json!({"name": name, "type": "string"}));
    }
    for name in ["amount", "tax", "discount"] {
        fields.push(json!({"name": name, "type": decimal()}));
    }
    for name in ["quantity", "weight_grams", "priority"] {
        fields.push(json!({"name": name, "type": "int"}));
    }
    fields.extend([
        json!({"name": "is_gift", "type": "boolean"}),
        json!({"name": "is_paid", "type": "boolean"}),
        json!({"name": "status", "type": "string"}),
        json!({"name": "channel", "type": "string"}),
        json!({"name": "created_at", "type": named("long", "io.debezium.time.MicroTimestamp")}),
        json!({"name": "updated_at", "type": named("string", "io.debezium.time.ZonedTimestamp")}),
        json!({"name": "ship_date", "type": named("int", "io.debezium.time.Date")}),
        json!({"name": "ship_window", "type": named("long", "io.debezium.time.MicroTime")}),
        json!({"name": "attributes", "type": named("string", "io.debezium.data.Json")}),
        json!({"name": "notes", "type": ["null", "string"], "default": null}),
        json!({"name": "description", "type": "string"}),
        json!({"name": "external_id", "type": named("string", "io.debezium.data.Uuid")}),
        json!({"name": "score", "type": "double"}),
    ]);
    json!({
        "type": "record", "name": "Value", "namespace": ns, "fields": fields,
        "connect.name": format!("{ns}.Value")
    })
}

const FIRST: [&str; 16] = [
    "Amelia", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
    "Kavya", "Liam", "Mei", "Nadia", "Oscar", "Priya",
];
const LAST: [&str; 16] = [
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Gonzalez",
    "Schneider",
    "Kowalski",
    "Haddad",
    "O'Brien",
    "Nakamura",
    "Rossi",
    "Petrov",
    "Fernandes",
    "Adeyemi",
    "Van der Berg",
    "Novak",
];
const CITY: [(&str, &str, &str); 8] = [
    ("Lisbon", "Lisboa", "PT"),
    ("Lyon", "Auvergne-Rhône-Alpes", "FR"),
    ("Osaka", "Kansai", "JP"),
    ("Kraków", "Lesser Poland", "PL"),
    ("Austin", "Texas", "US"),
    ("Porto Alegre", "Rio Grande do Sul", "BR"),
    ("Leeds", "West Yorkshire", "GB"),
    ("Nairobi", "Nairobi County", "KE"),
];
const WORDS: [&str; 32] = [
    "delivery",
    "fragile",
    "handle",
    "with",
    "care",
    "customer",
    "requested",
    "morning",
    "window",
    "gift",
    "wrapping",
    "invoice",
    "attached",
    "warehouse",
    "dispatch",
    "priority",
    "express",
    "return",
    "policy",
    "applies",
    "signature",
    "required",
    "leave",
    "parcel",
    "neighbour",
    "contact",
    "before",
    "arrival",
    "discounted",
    "bundle",
    "replacement",
    "order",
];

/// A fixed pseudo-random value per (row, salt).
fn mix(id: i64, salt: u64) -> u64 {
    splitmix64(
        (id as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(salt),
    )
}

/// `n` words picked by the row's hash, as a sentence.
fn text(id: i64, salt: u64, n: usize) -> String {
    let mut out = String::with_capacity(n * 9);
    for k in 0..n {
        if k > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[(mix(id, salt + k as u64) % WORDS.len() as u64) as usize]);
    }
    out.push('.');
    out
}

/// Row `id` at `version`, as the Avro record after its union branch.
pub(super) fn row(out: &mut Vec<u8>, id: i64, v: i64, ts_ms: i64) {
    let h = mix(id, 0);
    let first = FIRST[(h % 16) as usize];
    let last = LAST[((h >> 4) % 16) as usize];
    let (city, region, country) = CITY[((h >> 8) % 8) as usize];
    long(out, id);
    long(out, id % 50_000);
    string(out, &format!("ORD-{id:012}"));
    string(out, first);
    string(out, last);
    string(
        out,
        &format!(
            "{}.{}{}@example.com",
            first.to_lowercase(),
            last.to_lowercase().replace([' ', '\''], ""),
            id % 97
        ),
    );
    string(out, &format!("+44 20 7946 {:04}", h % 10_000));
    string(
        out,
        &format!(
            "{} {} Street",
            (h >> 12) % 400 + 1,
            LAST[((h >> 20) % 16) as usize]
        ),
    );
    string(out, city);
    string(out, region);
    string(out, &format!("{:05}", (h >> 24) % 100_000));
    string(out, country);
    string(out, ["EUR", "USD", "GBP", "JPY"][((h >> 28) % 4) as usize]);
    let amount = 100 + ((h >> 32) as i64 % 500_000) + v;
    decimal(out, amount);
    decimal(out, amount / 5);
    decimal(out, if id % 4 == 0 { amount / 10 } else { 0 });
    long(out, (v % 9) + 1);
    long(out, ((h >> 40) % 20_000) as i64);
    long(out, ((h >> 52) % 5) as i64);
    out.push(u8::from(id % 11 == 0));
    out.push(u8::from(v > 1));
    string(
        out,
        ["new", "paid", "packed", "shipped", "delivered"][(v % 5) as usize],
    );
    string(
        out,
        ["web", "mobile", "store", "phone"][((h >> 56) % 4) as usize],
    );
    long(out, ts_ms * 1000 + 456);
    string(out, "2024-05-01T13:00:00.123456Z");
    long(out, 19_845 + id % 60);
    long(out, (id % 86_400) * 1_000_000);
    string(
        out,
        &format!(
            r#"{{"gift_message": "{}", "loyalty_tier": {}, "source": "{}"}}"#,
            text(id, 100, 4),
            h % 4,
            ["campaign", "organic", "referral"][(h % 3) as usize]
        ),
    );
    if id % 3 == 0 {
        long(out, 0);
    } else {
        long(out, 1);
        string(out, &text(id, 200, 30));
    }
    string(out, &text(id + v, 300, 62));
    string(
        out,
        &format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            h >> 32,
            (h >> 16) & 0xffff,
            h & 0xfff,
            (h >> 12) & 0xfff,
            mix(id, 1) & 0xffff_ffff_ffff
        ),
    );
    out.extend_from_slice(&(((h % 10_000) as f64) / 100.0).to_le_bytes());
}
