//! Deserialization errors in a user's words: "a whole number ≥ 0", not "u64"; and the line of
//! the file a value is on, which the merged tree (file plus `LAKESINK__…` overrides) has lost.

use std::ops::Range;

/// serde's message with Rust's type names said as a user would, and on one line.
pub(crate) fn plain(message: &str) -> String {
    const TYPES: [(&str, &str); 10] = [
        ("u64", "a whole number ≥ 0"),
        ("u32", "a whole number ≥ 0"),
        ("u16", "a whole number ≥ 0"),
        ("u8", "a whole number ≥ 0"),
        ("usize", "a whole number ≥ 0"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("i16", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let mut out = message.split_whitespace().collect::<Vec<_>>().join(" ");
    for (rust, said) in TYPES {
        for end in ["", ",", " "] {
            out = replace_word(
                &out,
                &format!("expected {rust}{end}"),
                &format!("expected {said}{end}"),
            );
        }
    }
    out
}

fn replace_word(text: &str, from: &str, to: &str) -> String {
    // "expected u64" but not "expected u64x": the word ends at the text's end or at a
    // character that cannot continue it.
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let ends = from.ends_with([',', ' '])
            || after.is_empty()
            || !after.starts_with(|c: char| c.is_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if ends { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The 1-based line of `text` where `span` starts.
pub(crate) fn line_of(text: &str, span: Range<usize>) -> usize {
    text.get(..span.start)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_types_are_said_in_words() {
        assert_eq!(
            plain("invalid type: string \"200\", expected u64\nin `raw.flush-size`\n"),
            "invalid type: string \"200\", expected a whole number ≥ 0 in `raw.flush-size`"
        );
        assert_eq!(
            plain("invalid value: integer `-5`, expected u64"),
            "invalid value: integer `-5`, expected a whole number ≥ 0"
        );
        assert_eq!(
            plain("expected i32, got x"),
            "expected a whole number, got x"
        );
        assert_eq!(plain("expected u64x"), "expected u64x");
        assert_eq!(
            plain("invalid type: string, expected a boolean"),
            "invalid type: string, expected a boolean"
        );
    }

    #[test]
    fn lines_count_from_one() {
        let text = "a = 1\nb = 2\nc = 3\n";
        assert_eq!(line_of(text, 0..1), 1);
        assert_eq!(line_of(text, 6..7), 2);
        assert_eq!(line_of(text, 16..17), 3);
        assert_eq!(line_of(text, 500..501), 1);
    }
}
