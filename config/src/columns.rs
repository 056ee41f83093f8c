//! `[[columns]]`: column policies, applied once to the decoded records so that every sink (the
//! raw layer and the replica) holds the same columns: a column excluded for privacy is
//! excluded everywhere.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::{ConfigError, Secret};

/// One policy: which topics, and what to do with their columns (fields of the key and of the
/// row images, by name).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ColumnPolicy {
    /// A regex the whole topic name must match; absent: every topic.
    pub topics: Option<String>,
    /// Columns left out.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// When set, only these columns (and the key's) are kept.
    #[serde(default)]
    pub include: Vec<String>,
    /// Old name → new name.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Columns replaced by the keyed hash (HMAC-SHA-256, hex) of their text: equal values stay
    /// equal, so joins and keys still work, but the value cannot be read back.
    #[serde(default)]
    pub hash: Vec<String>,
    /// The hash's key: a secret (`env:NAME`, `file:/path`, …), at least 16 bytes.
    pub hash_key: Option<Secret>,
    /// Columns whose values are replaced (Kafka Connect's `MaskField`): by `mask-replacement`
    /// where set, else by their type's empty value (0, `""`, false, the epoch); nulls stay
    /// null.
    #[serde(default)]
    pub mask: Vec<String>,
    /// What masked values become, as text read as the column's type (`"***"`, `"0"`).
    pub mask_replacement: Option<String>,
    /// Columns added to each row with a fixed text value: name → value.
    #[serde(default, rename = "static")]
    pub static_columns: BTreeMap<String, String>,
    /// The record's metadata added to each row as columns: what → column name.
    #[serde(default)]
    pub metadata: BTreeMap<Metadata, String>,
}

/// Record metadata a policy can add as a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metadata {
    /// The operation: `r`, `c`, `u`, `d`, `t`.
    Op,
    /// When the change happened at the source (`timestamptz`).
    SourceTs,
    /// The Kafka record's timestamp (`timestamptz`).
    KafkaTs,
    Topic,
    Partition,
    Offset,
    /// When lakesink took the change in (`timestamptz`): every sink gets the same value, so
    /// the replica's is when its row was written, to the transaction's latency, and a
    /// replay keeps the raw layer's.
    UpdatedAt,
}

/// Checks what needs no secret's value.
pub(crate) fn validate(policies: &[ColumnPolicy]) -> Result<(), ConfigError> {
    let invalid = |reason: String| {
        Err(ConfigError::Invalid {
            field: "columns",
            reason,
        })
    };
    for (i, p) in policies.iter().enumerate() {
        let at = format!("[[columns]] #{}", i + 1);
        let named = p
            .exclude
            .iter()
            .chain(&p.include)
            .chain(&p.hash)
            .chain(&p.mask)
            .chain(p.rename.keys())
            .chain(p.rename.values())
            .chain(p.static_columns.keys())
            .chain(p.metadata.values());
        if named.clone().any(|n| n.is_empty()) {
            return invalid(format!("{at}: a column name is empty"));
        }
        if p.exclude.is_empty()
            && p.include.is_empty()
            && p.rename.is_empty()
            && p.hash.is_empty()
            && p.mask.is_empty()
            && p.static_columns.is_empty()
            && p.metadata.is_empty()
        {
            return invalid(format!(
                "{at}: says nothing to do (exclude, include, rename, hash, mask, static or metadata)"
            ));
        }
        if let Some(c) = p.mask.iter().find(|c| p.hash.contains(c)) {
            return invalid(format!("{at}: column `{c}` is both hashed and masked"));
        }
        if p.mask.is_empty() && p.mask_replacement.is_some() {
            return invalid(format!("{at}: mask-replacement without mask"));
        }
        let mut added = BTreeSet::new();
        for name in p.static_columns.keys().chain(p.metadata.values()) {
            if !added.insert(name) {
                return invalid(format!("{at}: two added columns are named `{name}`"));
            }
        }
        if !p.exclude.is_empty() && !p.include.is_empty() {
            return invalid(format!(
                "{at}: exclude and include together; use one (include keeps only what it names)"
            ));
        }
        let dropped: BTreeSet<&String> = p.exclude.iter().collect();
        if let Some(c) = p
            .hash
            .iter()
            .chain(&p.mask)
            .chain(p.rename.keys())
            .find(|c| dropped.contains(c))
        {
            return invalid(format!(
                "{at}: column `{c}` is excluded and also hashed, masked or renamed"
            ));
        }
        let mut targets = BTreeSet::new();
        for to in p.rename.values() {
            if !targets.insert(to) {
                return invalid(format!("{at}: two columns are renamed to `{to}`"));
            }
        }
        if !p.hash.is_empty() && p.hash_key.is_none() {
            return invalid(format!(
                "{at}: hash needs hash-key (a secret: hash-key = \"env:LAKESINK_HASH_KEY\")"
            ));
        }
    }
    Ok(())
}

/// Checks the hash keys' values.
pub(crate) fn validate_keys(policies: &[ColumnPolicy]) -> Result<(), ConfigError> {
    for (i, p) in policies.iter().enumerate() {
        if let Some(k) = &p.hash_key
            && k.expose().len() < 16
        {
            return Err(ConfigError::Invalid {
                field: "columns",
                reason: format!(
                    "[[columns]] #{}: hash-key is {} bytes; use at least 16 (32 random bytes, say) so that hashes cannot be guessed by trying values",
                    i + 1,
                    k.expose().len()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Config, ConfigError};

    const BASE: &str =
        "[kafka]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n[raw]\nurl = \"memory://x\"\n";

    fn parse(columns: &str) -> Result<Config, ConfigError> {
        let env = [("K".to_owned(), "0123456789abcdef0123".to_owned())];
        Config::from_toml(&format!("{BASE}{columns}"), "test.toml", env)
    }

    #[test]
    fn policies_parse_and_say_what_is_wrong() {
        let c = parse(
            "[[columns]]\ntopics = \"db\\\\.public\\\\..*\"\nexclude = [\"ssn\"]\nhash = [\"email\"]\nhash-key = \"env:K\"\n",
        )
        .expect("valid");
        assert_eq!(c.columns[0].exclude, ["ssn"]);
        assert_eq!(c.columns[0].topics.as_deref(), Some("db\\.public\\..*"));
        assert!(
            !format!("{c:?}").contains("0123456789abcdef0123"),
            "the key is a secret"
        );
        for (text, says) in [
            ("[[columns]]\nhash = [\"email\"]\n", "hash needs hash-key"),
            ("[[columns]]\n", "says nothing to do"),
            (
                "[[columns]]\nexclude = [\"a\"]\ninclude = [\"b\"]\n",
                "exclude and include together",
            ),
            (
                "[[columns]]\nexclude = [\"a\"]\nhash = [\"a\"]\nhash-key = \"env:K\"\n",
                "excluded and also hashed",
            ),
            (
                "[[columns]]\nrename = { a = \"c\", b = \"c\" }\n",
                "two columns are renamed to `c`",
            ),
            (
                "[[columns]]\nhash = [\"a\"]\nhash-key = \"short\"\n",
                "use at least 16",
            ),
            ("[[columns]]\nexclude = [\"a\"]\nblank = [\"b\"]\n", "blank"),
            (
                "[[columns]]\nmask = [\"a\"]\nhash = [\"a\"]\nhash-key = \"env:K\"\n",
                "both hashed and masked",
            ),
            (
                "[[columns]]\nexclude = [\"a\"]\nmask-replacement = \"x\"\n",
                "mask-replacement without mask",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }
}
