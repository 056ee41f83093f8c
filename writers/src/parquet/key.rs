//! Object keys of data files, from a template (Kafka Connect's layout by default).

use lakesink_config::Codec;

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    TopicsDir,
    Topic,
    Encoded,
    Partition,
    StartOffset(usize),
    Ext,
}

/// A compiled `file-key` template.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyTemplate {
    prefix: String,
    topics_dir: String,
    ext: &'static str,
    parts: Vec<Part>,
}

/// Confluent's extension for a codec: `.snappy.parquet`, `.gz.parquet`, … or `.parquet`.
pub(crate) fn extension(codec: Codec) -> &'static str {
    match codec {
        Codec::None => ".parquet",
        Codec::Snappy => ".snappy.parquet",
        Codec::Zstd => ".zstd.parquet",
        Codec::Gzip => ".gz.parquet",
        Codec::Lz4 => ".lz4.parquet",
    }
}

impl KeyTemplate {
    /// `prefix` is the store URL's path, put before every key.
    pub fn compile(
        template: &str,
        prefix: &str,
        topics_dir: &str,
        codec: Codec,
    ) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("unclosed {{ in {template:?}"))?
                + open;
            let name = &rest[open + 1..close];
            parts.push(match name {
                "topics-dir" => Part::TopicsDir,
                "topic" => Part::Topic,
                "encoded" => Part::Encoded,
                "partition" => Part::Partition,
                "start-offset" => Part::StartOffset(10),
                "ext" => Part::Ext,
                _ => match name.strip_prefix("start-offset:") {
                    Some(width) => Part::StartOffset(
                        width
                            .parse()
                            .map_err(|_| format!("{{{name}}}: the width is not a number"))?,
                    ),
                    None => return Err(format!("unknown placeholder {{{name}}} in {template:?}")),
                },
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self {
            prefix: prefix.trim_matches('/').to_owned(),
            topics_dir: topics_dir.trim_matches('/').to_owned(),
            ext: extension(codec),
            parts,
        })
    }

    pub fn key(&self, topic: &str, encoded: &str, partition: i32, start_offset: i64) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(96);
        out.push_str(&self.prefix);
        out.push('/');
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::TopicsDir => out.push_str(&self.topics_dir),
                Part::Topic => out.push_str(topic),
                Part::Encoded => out.push_str(encoded),
                Part::Partition => {
                    let _ = write!(out, "{partition}");
                }
                Part::StartOffset(w) => {
                    let _ = write!(out, "{start_offset:0w$}");
                }
                Part::Ext => out.push_str(self.ext),
            }
        }
        // An empty prefix, topics dir or encoded path leaves empty segments: drop them.
        let mut clean = String::with_capacity(out.len());
        for segment in out.split('/').filter(|s| !s.is_empty()) {
            if !clean.is_empty() {
                clean.push('/');
            }
            clean.push_str(segment);
        }
        clean
    }

    /// The `{encoded}` part of a key this template made for `topic` and `partition`; None
    /// when the key does not have the template's shape (or the template has no `{encoded}`).
    pub fn encoded_of(&self, key: &str, topic: &str, partition: i32) -> Option<String> {
        let re = self.encoded_pattern(topic, partition)?;
        re.captures(key)?.get(1).map(|m| m.as_str().to_owned())
    }

    /// A regex over the keys of `topic` and `partition`, capturing `{encoded}`.
    pub fn encoded_pattern(&self, topic: &str, partition: i32) -> Option<regex::Regex> {
        if !self.parts.contains(&Part::Encoded) {
            return None;
        }
        // The key with placeholders for the parts not known here, cleaned as key() cleans.
        const ENCODED: char = '\u{1}';
        const OFFSET: char = '\u{2}';
        let mut shape = String::with_capacity(96);
        shape.push_str(&self.prefix);
        shape.push('/');
        for part in &self.parts {
            match part {
                Part::Text(t) => shape.push_str(t),
                Part::TopicsDir => shape.push_str(&self.topics_dir),
                Part::Topic => shape.push_str(topic),
                Part::Encoded => shape.push(ENCODED),
                Part::Partition => shape.push_str(&partition.to_string()),
                Part::StartOffset(_) => shape.push(OFFSET),
                Part::Ext => shape.push_str(self.ext),
            }
        }
        let mut pattern = String::from("^");
        let mut first = true;
        for segment in shape.split('/').filter(|s| !s.is_empty()) {
            if !first {
                pattern.push('/');
            }
            first = false;
            let mut literal = String::new();
            for c in segment.chars() {
                if c == ENCODED || c == OFFSET {
                    pattern.push_str(&regex::escape(&std::mem::take(&mut literal)));
                    pattern.push_str(if c == ENCODED { "(.+)" } else { "[0-9]+" });
                } else {
                    literal.push(c);
                }
            }
            pattern.push_str(&regex::escape(&literal));
        }
        pattern.push('$');
        regex::Regex::new(&pattern).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confluent_default_layout() {
        let t = KeyTemplate::compile(
            "{topics-dir}/{topic}/{encoded}/{topic}+{partition}+{start-offset}{ext}",
            "",
            "topics",
            Codec::Snappy,
        )
        .expect("template");
        assert_eq!(
            t.key("orders", "year=2024/month=05/day=01/hour=13", 3, 12345),
            "topics/orders/year=2024/month=05/day=01/hour=13/orders+3+0000012345.snappy.parquet"
        );
        assert_eq!(
            t.encoded_of(
                "topics/orders/year=2024/month=05/day=01/hour=13/orders+3+0000012345.snappy.parquet",
                "orders",
                3
            )
            .as_deref(),
            Some("year=2024/month=05/day=01/hour=13")
        );
    }

    #[test]
    fn seed_layout_and_prefix() {
        let t = KeyTemplate::compile(
            "{topic}/{encoded}/{partition}-{start-offset:0}.parquet",
            "/raw/",
            "",
            Codec::Zstd,
        )
        .expect("template");
        assert_eq!(
            t.key("db.public.t", "2024-05-01/13", 0, 42),
            "raw/db.public.t/2024-05-01/13/0-42.parquet"
        );
        assert_eq!(
            t.encoded_of(
                "raw/db.public.t/2024-05-01/13/0-42.parquet",
                "db.public.t",
                0
            )
            .as_deref(),
            Some("2024-05-01/13")
        );
        assert_eq!(
            t.encoded_of(
                "raw/db.public.t/2024-05-01/13/1-42.parquet",
                "db.public.t",
                0
            ),
            None
        );
        assert!(KeyTemplate::compile("{nope}", "", "", Codec::None).is_err());
        assert!(KeyTemplate::compile("{topic", "", "", Codec::None).is_err());
    }
}
