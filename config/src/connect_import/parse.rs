//! Reading a connector config: the Connect REST shape `{"name": …, "config": {…}}`, a bare
//! config object, or a `.properties` file.

use std::collections::BTreeMap;

/// A connector's name (when the file gives one) and its config, every value as text.
pub(crate) struct Connector {
    pub name: Option<String>,
    pub config: BTreeMap<String, String>,
}

pub(crate) fn parse(text: &str) -> Result<Connector, String> {
    if text.trim_start().starts_with(['{', '[']) {
        parse_json(text)
    } else {
        let config = parse_properties(text)?;
        Ok(Connector {
            name: config.get("name").cloned(),
            config,
        })
    }
}

fn parse_json(text: &str) -> Result<Connector, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(top) = value else {
        return Err("not a JSON object".into());
    };
    // The REST shape (`POST /connectors`, `GET /connectors/{name}`) or a bare config
    // (`PUT /connectors/{name}/config`).
    let (name, object) = match top.get("config") {
        Some(serde_json::Value::Object(config)) => (
            top.get("name").and_then(|n| n.as_str()).map(str::to_owned),
            config.clone(),
        ),
        _ => (None, top),
    };
    let mut config = BTreeMap::new();
    for (k, v) in object {
        // `"//": "…"` is a comment by convention; Connect ignores such keys.
        if k == "//" {
            continue;
        }
        let text = match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => continue,
            serde_json::Value::Bool(_) | serde_json::Value::Number(_) => v.to_string(),
            other => return Err(format!("`{k}`: a config value is text, not {other}")),
        };
        config.insert(k, text);
    }
    let name = name.or_else(|| config.get("name").cloned());
    Ok(Connector { name, config })
}

/// Java `.properties`: `key=value`, `key: value` or `key value`; `#`/`!` comments; a line
/// ending in an odd number of backslashes continues; `\t`, `\n`, `\uXXXX` and `\x` escapes.
fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines().peekable();
    let mut lineno = 0;
    while let Some(line) = lines.next() {
        lineno += 1;
        let mut logical = line.trim_start().to_owned();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        while ends_in_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => {
                    lineno += 1;
                    logical.push_str(next.trim_start());
                }
                None => break,
            }
        }
        let (key, value) = split_property(&logical);
        let key = unescape(key).map_err(|e| format!("line {lineno}: {e}"))?;
        let value = unescape(value).map_err(|e| format!("line {lineno}: {e}"))?;
        out.insert(key, value);
    }
    Ok(out)
}

fn ends_in_odd_backslashes(s: &str) -> bool {
    s.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

/// The key ends at the first unescaped `=`, `:` or whitespace; the separator and the
/// whitespace around it are not part of the value.
fn split_property(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'=' | b':' | b' ' | b'\t' | b'\x0c' => break,
            _ => i += 1,
        }
    }
    let i = i.min(bytes.len());
    let key = &line[..i];
    let mut rest = line[i..].trim_start_matches([' ', '\t', '\x0c']);
    if let Some(r) = rest.strip_prefix(['=', ':']) {
        rest = r.trim_start_matches([' ', '\t', '\x0c']);
    }
    (key, rest)
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("bad escape \\u{hex}"))?;
                out.push(code);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_shape_and_bare_object() {
        let c = parse(
            r#"{"name": "s3", "config": {"flush.size": 10, "a": true, "//": "x", "n": null}}"#,
        )
        .unwrap();
        assert_eq!(c.name.as_deref(), Some("s3"));
        assert_eq!(c.config["flush.size"], "10");
        assert_eq!(c.config["a"], "true");
        assert!(!c.config.contains_key("//") && !c.config.contains_key("n"));
        let c = parse(r#"{"name": "x", "topics": "t"}"#).unwrap();
        assert_eq!(c.name.as_deref(), Some("x"));
        assert_eq!(c.config["topics"], "t");
        assert!(parse("[1]").is_err());
        assert!(parse(r#"{"a": [1]}"#).is_err());
    }

    #[test]
    fn properties() {
        let c = parse(
            "# comment\n! also\nname=s3-sink\ntopics : a,\\\n    b\nkey\\=x = v\\u0041\nempty\npath.format='dt'=yyyy\n",
        )
        .unwrap();
        assert_eq!(c.name.as_deref(), Some("s3-sink"));
        assert_eq!(c.config["topics"], "a,b");
        assert_eq!(c.config["key=x"], "vA");
        assert_eq!(c.config["empty"], "");
        assert_eq!(c.config["path.format"], "'dt'=yyyy");
    }
}
