//! `jdbc:postgresql://host:port/db?user=…&password=…` → `postgres://user@host:port/db?…`.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// A converted URL: the `postgres://` URL (no password), the password the JDBC URL held, the
/// default schema `currentSchema` named, and the parts that could not be carried.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PgUrl {
    pub url: String,
    pub password: Option<String>,
    pub current_schema: Option<String>,
    /// (part, reason)
    pub dropped: Vec<(String, String)>,
}

/// pgjdbc parameters with the same meaning for sqlx, under their libpq names.
const KEPT: [(&str, &str); 6] = [
    ("sslmode", "sslmode"),
    ("sslrootcert", "sslrootcert"),
    ("sslcert", "sslcert"),
    ("sslkey", "sslkey"),
    ("applicationname", "application_name"),
    ("options", "options"),
];

pub(crate) fn convert(jdbc: &str, user: Option<&str>) -> Result<PgUrl, String> {
    let rest = jdbc.strip_prefix("jdbc:postgresql:").ok_or_else(|| {
        match jdbc.strip_prefix("jdbc:").and_then(|r| r.split(':').next()) {
            Some(db) => {
                format!("a {db} JDBC URL: lakesink's replica is PostgreSQL (jdbc:postgresql://…)")
            }
            None => "not a JDBC URL (jdbc:postgresql://host:port/db)".to_owned(),
        }
    })?;
    let mut out = PgUrl::default();
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hosts, database) = match location.strip_prefix("//") {
        Some(l) => l.split_once('/').unwrap_or((l, "")),
        // `jdbc:postgresql:db` and `jdbc:postgresql:/`: localhost.
        None => ("", location.trim_start_matches('/')),
    };
    let mut hosts = hosts.split(',');
    let host = hosts.next().unwrap_or("").to_owned();
    let others: Vec<&str> = hosts.collect();
    if !others.is_empty() {
        out.dropped.push((
            format!("connection.url hosts {}", others.join(",")),
            "lakesink connects to one host: the first is kept".into(),
        ));
    }
    let host = if host.is_empty() {
        "localhost".to_owned()
    } else {
        host
    };
    let mut user = user.map(str::to_owned);
    let mut params: Vec<(String, String)> = Vec::new();
    let mut ssl_on = false;
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = percent_decode(v);
        match k.to_ascii_lowercase().as_str() {
            // In pgjdbc the URL's user and password win over the connection properties.
            "user" => user = Some(v),
            "password" => out.password = Some(v),
            "currentschema" => {
                out.current_schema = v.split(',').next().map(|s| s.trim().to_owned());
            }
            "ssl" => ssl_on = v.eq_ignore_ascii_case("true") || v.is_empty(),
            lower => match KEPT.iter().find(|(j, _)| *j == lower) {
                Some((_, name)) => params.push((name.to_string(), v)),
                None => out.dropped.push((
                    format!("connection.url parameter {k}"),
                    "a pgjdbc setting with no lakesink equivalent".into(),
                )),
            },
        }
    }
    // pgjdbc's `ssl=true` without a mode verifies the server fully.
    if ssl_on && !params.iter().any(|(k, _)| k == "sslmode") {
        params.insert(0, ("sslmode".into(), "verify-full".into()));
    }
    let mut url = String::from("postgres://");
    if let Some(u) = &user {
        url.push_str(&percent_encode(u));
        url.push('@');
    }
    url.push_str(&host);
    url.push('/');
    url.push_str(database);
    if !params.is_empty() {
        let q: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        url.push('?');
        url.push_str(&q.join("&"));
    }
    out.url = url;
    Ok(out)
}

/// Everything but RFC 3986's unreserved characters is encoded.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub(super) fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED).to_string()
}

fn percent_decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = convert(
            "jdbc:postgresql://pg:5432/postgres?user=postgres&password=s%40cret",
            None,
        )
        .unwrap();
        assert_eq!(u.url, "postgres://postgres@pg:5432/postgres");
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        let u = convert("jdbc:postgresql://localhost/db", Some("pg user")).unwrap();
        assert_eq!(u.url, "postgres://pg%20user@localhost/db");
        assert_eq!(u.password, None);
        let u = convert(
            "jdbc:postgresql://h1:5432,h2:5433/db?ssl=true&currentSchema=repl,public&reWriteBatchedInserts=true&ApplicationName=x",
            None,
        )
        .unwrap();
        assert_eq!(
            u.url,
            "postgres://h1:5432/db?sslmode=verify-full&application_name=x"
        );
        assert_eq!(u.current_schema.as_deref(), Some("repl"));
        let dropped: Vec<&str> = u.dropped.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            dropped,
            [
                "connection.url hosts h2:5433",
                "connection.url parameter reWriteBatchedInserts"
            ]
        );
        assert_eq!(
            convert("jdbc:postgresql:db?sslmode=require", None)
                .unwrap()
                .url,
            "postgres://localhost/db?sslmode=require"
        );
        // A `%` not followed by two hex digits stays as written.
        let u = convert("jdbc:postgresql://h/db?password=a%+1%zz%", None).unwrap();
        assert_eq!(u.password.as_deref(), Some("a%+1%zz%"));
        let u = convert("jdbc:postgresql://h/db?user=J%C3%BCrgen", None).unwrap();
        assert_eq!(u.url, "postgres://J%C3%BCrgen@h/db");
        let err = convert("jdbc:mysql://h/db", None).unwrap_err();
        assert!(err.contains("mysql"), "{err}");
        assert!(convert("postgres://h/db", None).is_err());
    }
}
