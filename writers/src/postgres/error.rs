//! The replica's one error type, classified by whether a retry can help.

use lakesink_model::{Classify, Fault, System, with_causes};
use sqlx::postgres::PgDatabaseError;

/// Where in the input an error belongs: a record, or the whole batch range a statement covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub topic: String,
    pub partition: i32,
    /// First and last offset concerned; equal for one record.
    pub offsets: (i64, i64),
    /// The target table (`schema.table`), when known.
    pub table: Option<String>,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}] offset ", self.topic, self.partition)?;
        match self.offsets {
            (a, b) if a == b => write!(f, "{a}")?,
            (a, b) => write!(f, "{a}..={b}")?,
        }
        if let Some(t) = &self.table {
            write!(f, ", table {t}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The replica could not be reached, or asked to retry (connection lost, serialization
    /// failure, deadlock, shutting down or starting up). Nothing was committed.
    #[error("replica database unavailable{}: {}", at.as_ref().map(|a| format!(" ({a})")).unwrap_or_default(), describe_pg(source))]
    Unavailable {
        at: Option<At>,
        #[source]
        source: sqlx::Error,
    },
    /// A record the replica cannot apply as configured: no key where one is needed, a value
    /// the column cannot hold, a table name PostgreSQL cannot hold.
    #[error("{at}: {reason}")]
    BadData { at: At, reason: String },
    /// The database refused a statement for a reason a retry will not fix (a table the
    /// config may not create, a column type conflict, a permission).
    #[error("{at}: replica refused the change: {}", describe_pg(source))]
    Rejected {
        at: At,
        #[source]
        source: sqlx::Error,
    },
    /// The replica's settings do not work (`replica.url`, a template, the offsets table's
    /// name).
    #[error("replica setup: {0}")]
    Setup(String),
    /// Connecting or preparing the offsets table failed for a reason a retry will not fix
    /// (credentials, permissions). The database's error is kept, said in PostgreSQL's words
    /// here and not again as a cause.
    #[error("replica setup: {}", describe_pg(error))]
    SetupRefused { error: sqlx::Error },
}

impl Classify for ReplicaError {
    fn fault(&self) -> Fault {
        match self {
            Self::Unavailable { .. } => Fault::Unavailable(System::Database),
            Self::BadData { .. } => Fault::BadData,
            Self::Rejected { .. } | Self::Setup(_) | Self::SetupRefused { .. } => {
                Fault::Refused(Some(System::Database))
            }
        }
    }
}

impl ReplicaError {
    /// Classifies a database error for the statement covering `at`.
    pub(crate) fn from_sqlx(source: sqlx::Error, at: Option<At>) -> Self {
        if is_transient(&source) {
            return Self::Unavailable { at, source };
        }
        let code = source.as_database_error().and_then(|d| d.code());
        let data = code
            .as_deref()
            .is_some_and(|c| c.starts_with("22") || c.starts_with("23"));
        let widen = match code.as_deref() {
            // numeric_value_out_of_range: what a source's widened column first brings.
            Some("22003") => {
                "; if the source widened the column, set replica.schema-evolution = \"evolve\" \
                 to widen it too, or widen it by hand (ALTER TABLE … ALTER COLUMN … TYPE …)"
            }
            // not_null_violation: a value the record leaves unknown (an unchanged TOASTed value
            // of a row the replica does not hold) in a column the source declares NOT NULL.
            Some("23502") => {
                "; the record leaves this NOT NULL column's value unknown (an unchanged \
                 TOASTed value of a row the replica does not hold, say): set REPLICA IDENTITY \
                 FULL at the source, or drop NOT NULL on the replica's column to take NULL \
                 there (counted in lakesink_replica_values_unknown_total)"
            }
            _ => "",
        };
        match at {
            Some(at) if data => Self::BadData {
                reason: format!(
                    "a value the table cannot hold: {}{widen}",
                    describe_pg(&source)
                ),
                at,
            },
            Some(at) => Self::Rejected { at, source },
            None => Self::SetupRefused { error: source },
        }
    }
}

/// A database error as PostgreSQL words it, with its SQLSTATE, detail and hint; without
/// sqlx's "error returned from database" and the " at line N" of PostgreSQL's own source,
/// which reads like a line of the user's config. Other errors with their causes.
pub fn describe_pg(e: &sqlx::Error) -> String {
    let sqlx::Error::Database(d) = e else {
        return with_causes(e);
    };
    let mut out = d.message().to_owned();
    if let Some(code) = d.code() {
        out.push_str(&format!(" ({code})"));
    }
    if let Some(pg) = d.try_downcast_ref::<PgDatabaseError>() {
        if let Some(detail) = pg.detail() {
            out.push_str(&format!(": {detail}"));
        }
        if let Some(hint) = pg.hint() {
            out.push_str(&format!(" (hint: {hint})"));
        }
    }
    out
}

/// Whether the server refused who we are (28000 invalid authorization, 28P01 wrong password):
/// a setting to fix, not an outage to wait out.
pub fn is_auth_failure(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.starts_with("28"))
}

/// Connection trouble and the SQLSTATEs PostgreSQL uses for "try again".
fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| {
            // 08 connection exception, 40001 serialization, 40P01 deadlock, 53 resources,
            // 57P01..57P05 admin/crash shutdown, cannot connect now, idle session timeout.
            c.starts_with("08")
                || c == "40001"
                || c == "40P01"
                || c.starts_with("53")
                || c.starts_with("57P")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_retryable_and_messages_name_the_place() {
        let at = At {
            topic: "t".into(),
            partition: 2,
            offsets: (5, 9),
            table: Some("public.x".into()),
        };
        let e = ReplicaError::from_sqlx(
            sqlx::Error::Io(std::io::Error::other("reset")),
            Some(at.clone()),
        );
        assert!(e.retryable());
        assert!(
            e.to_string().contains("t[2] offset 5..=9, table public.x"),
            "{e}"
        );
        let bad = ReplicaError::BadData {
            at: At {
                offsets: (7, 7),
                ..at
            },
            reason: "no key".into(),
        };
        assert!(!bad.retryable());
        assert_eq!(bad.to_string(), "t[2] offset 7, table public.x: no key");
    }
}
