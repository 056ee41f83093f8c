//! The one retry helper: a call that failed because a system was unavailable is tried again
//! with capped exponential backoff and jitter, so that several instances restarting together
//! do not retry in lockstep. Anything else is returned at once.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tracing::warn;

use crate::fault::{Classify, Fault, System};

/// How a retried call waits: from about `first`, doubling up to `max`, each wait with jitter
/// (between half and all of it once capped, so waits at the cap spread too); `attempts`
/// retries at most (None: until the system answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub attempts: Option<usize>,
}

impl Backoff {
    /// What every sink and lookup uses: a database or store back within seconds is seen
    /// within a second, a long outage is tried every 15 to 30 s.
    pub const DEFAULT: Backoff = Backoff {
        first: Duration::from_millis(200),
        max: Duration::from_secs(30),
        attempts: None,
    };

    /// The waits, in order.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        self.builder().build()
    }

    fn builder(&self) -> ExponentialBuilder {
        // backon's jitter adds up to the delay itself: half the cap keeps waits within it.
        let b = ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max / 2)
            .with_jitter();
        match self.attempts {
            Some(n) => b.with_max_times(n),
            None => b.without_max_times(),
        }
    }
}

/// Who hears of retries: `/status`, the metrics. `sink` is the sink waiting (None: every
/// sink waits, as for the registry).
pub trait Observe: Send + Sync {
    fn retrying(&self, sink: Option<&'static str>, system: System, error: &str);
    fn recovered(&self, sink: Option<&'static str>, system: System);
    /// Stop retrying (shutting down): the last error is returned.
    fn give_up(&self) -> bool {
        false
    }
}

/// Runs `op` until it succeeds or fails with anything but an unavailable system; `what` names
/// the call in the log.
pub async fn retrying<T, E, Fut>(
    backoff: Backoff,
    observe: &dyn Observe,
    sink: Option<&'static str>,
    what: &str,
    mut op: impl FnMut() -> Fut,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
    E: Classify + std::fmt::Display,
{
    let mut retry = Retry::new(backoff, observe, sink, what);
    loop {
        if let Some(done) = retry.settle(op().await).await {
            return done;
        }
    }
}

/// [`retrying`] for a call that borrows what the loop owns: `settle` each result; `None`
/// means it waited and the call is to be made again.
pub struct Retry<'a> {
    delays: backon::ExponentialBackoff,
    observe: &'a dyn Observe,
    sink: Option<&'static str>,
    what: &'a str,
    waited_for: Option<System>,
}

impl<'a> Retry<'a> {
    pub fn new(
        backoff: Backoff,
        observe: &'a dyn Observe,
        sink: Option<&'static str>,
        what: &'a str,
    ) -> Self {
        Self {
            delays: backoff.builder().build(),
            observe,
            sink,
            what,
            waited_for: None,
        }
    }

    pub async fn settle<T, E>(&mut self, result: Result<T, E>) -> Option<Result<T, E>>
    where
        E: Classify + std::fmt::Display,
    {
        let e = match result {
            Ok(v) => {
                if let Some(system) = self.waited_for.take() {
                    self.observe.recovered(self.sink, system);
                }
                return Some(Ok(v));
            }
            Err(e) => e,
        };
        let Fault::Unavailable(system) = e.fault() else {
            return Some(Err(e));
        };
        let Some(wait) = self.delays.next().filter(|_| !self.observe.give_up()) else {
            return Some(Err(e));
        };
        warn!(error = %e, retry_in = ?wait, system = system.as_str(), "{}: retrying", self.what);
        self.observe.retrying(self.sink, system, &e.to_string());
        self.waited_for = Some(system);
        tokio::time::sleep(wait).await;
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug)]
    struct Failed(Fault);
    impl Classify for Failed {
        fn fault(&self) -> Fault {
            self.0
        }
    }
    impl std::fmt::Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }

    /// Observes nothing.
    struct Quiet;

    impl Observe for Quiet {
        fn retrying(&self, _: Option<&'static str>, _: System, _: &str) {}
        fn recovered(&self, _: Option<&'static str>, _: System) {}
    }

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl Observe for Log {
        fn retrying(&self, _: Option<&'static str>, s: System, _: &str) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("retry {}", s.as_str()));
        }
        fn recovered(&self, _: Option<&'static str>, s: System) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("back {}", s.as_str()));
        }
    }

    #[test]
    fn waits_grow_to_the_cap_with_jitter_and_differ_between_instances() {
        let b = Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
            attempts: None,
        };
        let a: Vec<Duration> = b.delays().take(40).collect();
        let c: Vec<Duration> = b.delays().take(40).collect();
        assert_eq!(a.len(), 40, "no deadline");
        for d in &a {
            assert!(*d >= b.first / 2 && *d <= b.max, "within the cap: {d:?}");
        }
        assert!(
            a[30] >= b.max / 2,
            "capped and still waiting about the cap: {:?}",
            a[30]
        );
        assert_ne!(a, c, "two instances do not retry in lockstep");
        let limited = Backoff {
            attempts: Some(3),
            ..b
        };
        assert_eq!(limited.delays().count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unavailable_system_is_retried_until_it_answers_and_nothing_else_is() {
        let log = Log::default();
        let mut calls = 0;
        let got: Result<u32, Failed> =
            retrying(Backoff::DEFAULT, &log, Some("replica"), "apply", || {
                calls += 1;
                let n = calls;
                async move {
                    if n < 4 {
                        Err(Failed(Fault::Unavailable(System::Database)))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(got.ok(), Some(4));
        let log = log.0.into_inner().unwrap_or_default();
        assert_eq!(
            log,
            [
                "retry database",
                "retry database",
                "retry database",
                "back database"
            ]
        );

        let mut calls = 0;
        let got: Result<(), Failed> = retrying(Backoff::DEFAULT, &Quiet, None, "decode", || {
            calls += 1;
            async { Err(Failed(Fault::BadData)) }
        })
        .await;
        assert!(matches!(got, Err(Failed(Fault::BadData))));
        assert_eq!(calls, 1, "bad data is not retried");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limited_backoff_returns_the_last_error() {
        let b = Backoff {
            attempts: Some(2),
            ..Backoff::DEFAULT
        };
        let mut calls = 0;
        let got: Result<(), Failed> = retrying(b, &Quiet, None, "x", || {
            calls += 1;
            async { Err(Failed(Fault::Unavailable(System::ObjectStore))) }
        })
        .await;
        assert!(got.is_err());
        assert_eq!(calls, 3, "the call and two retries");
    }
}
