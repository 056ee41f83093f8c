//! An error with its causes on one line. Many clients' top-level message names only the
//! request ("error sending request for url …"); what went wrong (a refused connection, a name
//! that does not resolve) is in the source chain.

use std::error::Error;

/// `e` and each of its sources, joined by ": ", a cause said once: one whose text the line
/// already holds (wrappers that repeat their source) is left out.
pub fn with_causes(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &dyn Error)
        }
    }

    #[test]
    fn each_cause_once_in_order() {
        let e = E(
            "error sending request",
            Some(Box::new(E(
                "client error (Connect)",
                Some(Box::new(E(
                    "Connection refused (os error 111)",
                    Some(Box::new(E("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        assert_eq!(
            with_causes(&e),
            "error sending request: client error (Connect): Connection refused (os error 111)"
        );
        assert_eq!(with_causes(&E("alone", None)), "alone");
    }
}
