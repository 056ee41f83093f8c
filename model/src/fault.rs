//! One fault taxonomy: every crate's error says which of these it is, and the pipeline acts on
//! that (retry, dead-letter, stop, which component to blame), never on message text.

use std::error::Error;
use std::fmt;

/// An external system lakesink depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    Kafka,
    Registry,
    ObjectStore,
    Database,
}

impl System {
    /// The name `/status`, the metrics and the alerts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Registry => "registry",
            Self::ObjectStore => "object_store",
            Self::Database => "database",
        }
    }
}

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The input: a record lakesink cannot decode or a sink cannot hold. Retrying the same
    /// record fails the same way; `errors.tolerance = "all"` sends it to the dead-letter topic.
    BadData,
    /// The system could not be reached or asked to be tried again: nothing was done, and the
    /// same call can succeed later.
    Unavailable(System),
    /// The system (or lakesink's own configuration) refused: credentials, permissions, a
    /// setting that does not fit. An operator must act; retrying does not help.
    Refused(Option<System>),
    /// lakesink itself: a task that panicked, a state that cannot happen.
    Bug,
}

impl Fault {
    /// Whether the same call can succeed later.
    pub fn retryable(self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// The system to blame, if it is one.
    pub fn system(self) -> Option<System> {
        match self {
            Self::Unavailable(s) | Self::Refused(Some(s)) => Some(s),
            _ => None,
        }
    }
}

/// An error that knows its fault. Every crate's error type implements it.
pub trait Classify {
    fn fault(&self) -> Fault;

    fn retryable(&self) -> bool {
        self.fault().retryable()
    }
}

/// An error that has been classified, with the sink it came from if one: what crosses from a
/// typed error into the run's error chain, so that whoever reports the run's end reads the
/// fault here instead of guessing from concrete types. It says what its source says (and, with
/// a sink, names it first).
#[derive(Debug)]
pub struct Failure {
    sink: Option<&'static str>,
    fault: Fault,
    source: Box<dyn Error + Send + Sync>,
}

impl Failure {
    /// `e` classified by itself, from no sink in particular.
    pub fn new<E>(e: E) -> Self
    where
        E: Classify + Error + Send + Sync + 'static,
    {
        Self {
            sink: None,
            fault: e.fault(),
            source: Box::new(e),
        }
    }

    /// `e` classified by itself, from `sink`.
    pub fn in_sink<E>(sink: &'static str, e: E) -> Self
    where
        E: Classify + Error + Send + Sync + 'static,
    {
        Self {
            sink: Some(sink),
            ..Self::new(e)
        }
    }

    /// An error whose type does not know its fault (a dead-letter hand-off, a task).
    pub fn with_fault(
        sink: Option<&'static str>,
        fault: Fault,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Self {
            sink,
            fault,
            source: source.into(),
        }
    }

    pub fn sink(&self) -> Option<&'static str> {
        self.sink
    }

    /// The first failure in a chain of errors, outermost first.
    pub fn find<'a>(
        chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>,
    ) -> Option<&'a Self> {
        chain.into_iter().find_map(|e| e.downcast_ref::<Self>())
    }
}

impl Classify for Failure {
    fn fault(&self) -> Fault {
        self.fault
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sink {
            Some(sink) => write!(f, "{sink} sink"),
            None => self.source.fmt(f),
        }
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self.sink {
            Some(_) => Some(&*self.source),
            // Said by Display already: its own source comes next.
            None => self.source.source(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unavailable_system_is_worth_a_retry() {
        assert!(Fault::Unavailable(System::Database).retryable());
        for f in [
            Fault::BadData,
            Fault::Refused(Some(System::ObjectStore)),
            Fault::Refused(None),
            Fault::Bug,
        ] {
            assert!(!f.retryable(), "{f:?}");
        }
        assert_eq!(
            Fault::Refused(Some(System::ObjectStore)).system(),
            Some(System::ObjectStore)
        );
        assert_eq!(Fault::BadData.system(), None);
    }

    #[derive(Debug)]
    struct Down;

    impl fmt::Display for Down {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection refused")
        }
    }

    impl Error for Down {}

    impl Classify for Down {
        fn fault(&self) -> Fault {
            Fault::Unavailable(System::Database)
        }
    }

    #[test]
    fn a_failure_says_its_source_once_and_is_found_in_a_chain() {
        let plain = Failure::new(Down);
        assert_eq!(plain.to_string(), "connection refused");
        assert!(plain.source().is_none());
        let sunk = Failure::in_sink("replica", Down);
        assert_eq!(sunk.to_string(), "replica sink");
        assert_eq!(
            sunk.source().map(|s| s.to_string()).as_deref(),
            Some("connection refused")
        );

        #[derive(Debug)]
        struct Outer(Failure);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("writing")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(sunk);
        let first: &(dyn Error + 'static) = &outer;
        let chain = std::iter::successors(Some(first), |&e| e.source());
        let found = Failure::find(chain).expect("found");
        assert_eq!(found.sink(), Some("replica"));
        assert_eq!(found.fault(), Fault::Unavailable(System::Database));
    }
}
