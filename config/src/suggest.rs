//! "Did you mean …?" for unknown keys: the expected key closest to the unknown one.

/// The spelling lakesink uses for a key written Kafka Connect style (`flush.size`), in
/// snake case (`flush_size`) or in another case: lower case, `-` between words.
pub(crate) fn kebab(key: &str) -> String {
    key.to_lowercase().replace(['.', '_'], "-")
}

/// The expected key `unknown` most likely meant, if one is close enough.
pub(crate) fn suggest<'a>(unknown: &str, expected: &[&'a str]) -> Option<&'a str> {
    let k = kebab(unknown);
    if let Some(exact) = expected.iter().find(|e| **e == k) {
        return Some(exact);
    }
    let best = expected
        .iter()
        // Optimal string alignment: a transposition of neighbours counts one edit, like the
        // other edits.
        .map(|e| (strsim::osa_distance(&k, e), *e))
        .min_by_key(|(d, _)| *d)?;
    // One edit in four characters, at least one, at most three.
    let limit = (k.chars().count() / 4).clamp(1, 3);
    (best.0 <= limit).then_some(best.1)
}

/// The keys a serde "unknown field" message about `unknown` says were expected (serde lists
/// them only in the message: `unknown field `x`, expected one of `a`, `b``, or `expected `a``,
/// or `expected `a` or `b``); None for another message.
pub(crate) fn expected_keys<'m>(message: &'m str, unknown: &str) -> Option<Vec<&'m str>> {
    let head = format!("unknown field `{unknown}`, ");
    let rest = &message[message.find(&head)? + head.len()..];
    // toml adds the table's name on a line of its own.
    let line = rest.lines().next().unwrap_or_default();
    let list = line.strip_prefix("expected ").unwrap_or_default();
    Some(list.split('`').skip(1).step_by(2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strsim::osa_distance as distance;

    #[test]
    fn distances() {
        assert_eq!(distance("flush-size", "flush-size"), 0);
        assert_eq!(distance("flush-siz", "flush-size"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("ulr", "url"), 1);
    }

    #[test]
    fn suggestions() {
        let keys = ["flush-size", "rotate-interval-ms", "url", "topics-dir"];
        assert_eq!(suggest("flush.size", &keys), Some("flush-size"));
        assert_eq!(suggest("flush_size", &keys), Some("flush-size"));
        assert_eq!(suggest("FLUSH-SIZE", &keys), Some("flush-size"));
        assert_eq!(suggest("flush-sise", &keys), Some("flush-size"));
        assert_eq!(suggest("topics.dir", &keys), Some("topics-dir"));
        assert_eq!(
            suggest("rotate.interval", &keys),
            Some("rotate-interval-ms")
        );
        assert_eq!(suggest("rotate", &keys), None);
        assert_eq!(suggest("completely-else", &keys), None);
        assert_eq!(suggest("ur", &keys), Some("url"));
    }

    /// The suggestion for `unknown` among the keys a serde message lists.
    fn from_message(message: &str, unknown: &str) -> Option<String> {
        suggest(unknown, &expected_keys(message, unknown)?).map(str::to_owned)
    }

    #[test]
    fn parses_serde_messages() {
        let m = "unknown field `flush.size`, expected one of `url`, `store`, `flush-size`";
        assert_eq!(from_message(m, "flush.size"), Some("flush-size".into()));
        let m = "unknown field `ulr`, expected `url`";
        assert_eq!(from_message(m, "ulr"), Some("url".into()));
        assert_eq!(
            from_message("unknown field `zzz`, there are no fields", "zzz"),
            None
        );
    }

    #[test]
    fn expected_keys_in_each_shape() {
        let m = "unknown field `x`, expected one of `url`, `store`\nin `raw`\n";
        assert_eq!(expected_keys(m, "x"), Some(vec!["url", "store"]));
        let m = "unknown field `x`, expected `endpoint` or `options`\nin `raw.store`\n";
        assert_eq!(expected_keys(m, "x"), Some(vec!["endpoint", "options"]));
        let m = "unknown field `x`, there are no fields";
        assert_eq!(expected_keys(m, "x"), Some(vec![]));
        // About another key, or not about a key.
        assert_eq!(
            expected_keys("unknown field `y`, expected `url`", "x"),
            None
        );
        assert_eq!(
            expected_keys("invalid type: string \"x\", expected i64", "x"),
            None
        );
    }
}
