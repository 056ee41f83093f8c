//! The raw layer's error, and how each kind is handled.

use lakesink_model::{Classify, Fault, System};

use super::file::FileError;

#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("raw layer config: {0}")]
    Config(String),
    #[error("raw layer: {topic}[{partition}] offset {offset}: {reason}")]
    Data {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    #[error("raw layer: {topic}[{partition}] file {key}: {source}")]
    File {
        topic: String,
        partition: i32,
        key: String,
        source: FileError,
    },
    #[error("raw layer: {topic}[{partition}] marker {key}: {reason}")]
    Marker {
        topic: String,
        partition: i32,
        key: String,
        reason: StoreFailure,
    },
    /// lakesink's own state: a state that cannot happen.
    #[error("raw layer: {0}")]
    Bug(&'static str),
    /// An upload or probe task that panicked or was cancelled.
    #[error("raw layer: a task failed")]
    Task(#[source] tokio::task::JoinError),
    #[error("raw layer: object store, at {key}: {}", describe_store(source))]
    Unavailable {
        key: String,
        #[source]
        source: object_store::Error,
    },
}

impl Classify for RawError {
    /// Store errors: retrying the segment (from the durable offset) can help, unless the store
    /// refused the credentials.
    fn fault(&self) -> Fault {
        match self {
            Self::Config(_) => Fault::Refused(None),
            Self::Data { .. } => Fault::BadData,
            Self::Marker { reason, .. } => reason.fault(),
            Self::Unavailable { source, .. }
            | Self::File {
                source: FileError::Store(source),
                ..
            } => store_fault(source),
            Self::File {
                source: FileError::Parquet(_),
                ..
            }
            | Self::Bug(_)
            | Self::Task(_) => Fault::Bug,
        }
    }
}

/// A read or write of the raw layer's own small objects (markers, positions) that failed:
/// why, and whether the store refused (credentials, permissions) rather than failed to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFailure {
    pub reason: String,
    pub refused: bool,
}

impl StoreFailure {
    /// A store error, after `context` (the key or the listing it was for).
    pub(crate) fn store(context: impl std::fmt::Display, e: &object_store::Error) -> Self {
        Self {
            reason: format!("{context}: {}", describe_store(e)),
            refused: matches!(store_fault(e), Fault::Refused(_)),
        }
    }

    /// Anything else (a body that does not parse): worth another try, as a half-written
    /// object is.
    pub(crate) fn other(reason: String) -> Self {
        Self {
            reason,
            refused: false,
        }
    }
}

impl Classify for StoreFailure {
    fn fault(&self) -> Fault {
        if self.refused {
            Fault::Refused(Some(System::ObjectStore))
        } else {
            Fault::Unavailable(System::ObjectStore)
        }
    }
}

impl std::error::Error for StoreFailure {}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// An object store error: refused credentials and permissions are for an operator to fix.
pub(crate) fn store_fault(e: &object_store::Error) -> Fault {
    match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => Fault::Refused(Some(System::ObjectStore)),
        _ => Fault::Unavailable(System::ObjectStore),
    }
}

/// An object store error in a line an operator can act on: the server's XML body cut down to
/// its code and message, and for refused credentials the settings to check.
pub fn describe_store(e: &object_store::Error) -> String {
    let text = e.to_string();
    let (head, code, message) = match text.find("<?xml").or_else(|| text.find("<Error>")) {
        Some(at) => {
            let body = &text[at..];
            (
                text[..at].trim_end().trim_end_matches(':').to_owned(),
                xml_field(body, "Code"),
                xml_field(body, "Message"),
            )
        }
        None => (text.clone(), None, None),
    };
    let said = match (code, message) {
        (Some(c), Some(m)) => format!("{head}: {c}: {m}"),
        (Some(c), None) => format!("{head}: {c}"),
        _ => head,
    };
    let bad_key = [
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
    ]
    .iter()
    .any(|c| text.contains(&format!("<Code>{c}</Code>")));
    match e {
        object_store::Error::Unauthenticated { .. } => {
            format!("{said}: check raw.store.access-key-id and raw.store.secret-access-key")
        }
        object_store::Error::PermissionDenied { .. } if bad_key => {
            format!("{said}: check raw.store.access-key-id and raw.store.secret-access-key")
        }
        object_store::Error::PermissionDenied { .. } => {
            format!("{said}: check that the key may read, write, list and delete under raw.url")
        }
        _ => said,
    }
}

/// The text of the first `<name>…</name>` in an S3 error body.
fn xml_field(body: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let len = body[start..].find(&format!("</{name}>"))?;
    Some(body[start..start + len].trim().to_owned()).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>\
        <Message>The request signature we calculated does not match the signature you provided.</Message>\
        <Resource>/b/k</Resource><RequestId>18ED</RequestId></Error>";

    #[test]
    fn refused_keys_name_the_settings_without_the_xml() {
        let e = object_store::Error::PermissionDenied {
            path: "demo/x".into(),
            source: format!("PUT http://127.0.0.1:8333/b/k - Server returned non-2xx status code: 403 Forbidden: {XML}").into(),
        };
        let said = describe_store(&e);
        assert!(!said.contains('<'), "{said}");
        assert!(
            said.contains("SignatureDoesNotMatch: The request signature we calculated"),
            "{said}"
        );
        assert!(
            said.ends_with("check raw.store.access-key-id and raw.store.secret-access-key"),
            "{said}"
        );
        assert_eq!(store_fault(&e), Fault::Refused(Some(System::ObjectStore)));

        let denied = object_store::Error::PermissionDenied {
            path: "demo/x".into(),
            source: "403 Forbidden: <Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>".into(),
        };
        let said = describe_store(&denied);
        assert!(
            said.contains("AccessDenied: Access Denied: check that the key may"),
            "{said}"
        );

        let plain = object_store::Error::NotFound {
            path: "x".into(),
            source: "gone".into(),
        };
        assert_eq!(describe_store(&plain), plain.to_string());
    }
}
