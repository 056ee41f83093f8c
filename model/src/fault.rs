//! One fault taxonomy: every crate's error says which of these it is, and the pipeline acts on
//! that (retry, dead-letter, stop, which component to blame), never on message text.

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
}
