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

/// From a serde "unknown field" message, the unknown key and what it should be: serde lists
/// the expected fields in the message itself (`unknown field `x`, expected one of `a`, `b``).
pub(crate) fn from_message(message: &str) -> Option<(String, String)> {
    let rest = message.split("unknown field `").nth(1)?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = if let Some(list) = rest.split_once("expected one of ") {
        list.1.split(", ").filter_map(backticked).collect()
    } else if let Some(one) = rest.split_once("expected ") {
        backticked(one.1.split_whitespace().next()?)
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    let s = suggest(unknown, &expected)?;
    Some((unknown.to_owned(), s.to_owned()))
}

fn backticked(s: &str) -> Option<&str> {
    let s = s.trim_start_matches('`');
    let end = s.find('`')?;
    Some(&s[..end])
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

    #[test]
    fn parses_serde_messages() {
        let m = "unknown field `flush.size`, expected one of `url`, `store`, `flush-size`";
        assert_eq!(
            from_message(m),
            Some(("flush.size".into(), "flush-size".into()))
        );
        let m = "unknown field `ulr`, expected `url`";
        assert_eq!(from_message(m), Some(("ulr".into(), "url".into())));
        assert_eq!(
            from_message("unknown field `zzz`, there are no fields"),
            None
        );
    }
}
