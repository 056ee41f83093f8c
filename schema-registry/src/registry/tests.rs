//! The HTTP client against a scripted local server: token refresh on 401, retries on 503.

use lakesink_model::Classify;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::{IdKind, SchemaRef};

/// Serves HTTP/1.1 on loopback, one request per connection, answering with `respond`.
async fn serve(respond: impl Fn(&str) -> (u16, String) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                let (status, body) = respond(&request);
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

fn quick() -> Backoff {
    // Three attempts in all: the first and two retries.
    Backoff {
        first: Duration::from_millis(5),
        max: Duration::from_millis(20),
        attempts: Some(2),
    }
}

const ID: SchemaRef = SchemaRef::Id {
    kind: IdKind::GlobalId,
    id: 1,
};

#[tokio::test]
async fn a_refused_token_is_replaced_once() {
    let tokens = Arc::new(AtomicUsize::new(0));
    let issued = tokens.clone();
    let base = serve(move |req| {
        if req.starts_with("POST /token") {
            assert!(req.contains("grant_type=client_credentials"), "{req}");
            let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
            return (
                200,
                format!(r#"{{"access_token":"t{n}","expires_in":3600}}"#),
            );
        }
        // Only the second token is accepted, as after a key rotation.
        if !req.contains("authorization: Bearer t2") {
            return (401, String::new());
        }
        if req.contains("/references ") {
            (200, "[]".into())
        } else {
            (200, r#"{"type":"string"}"#.into())
        }
    })
    .await;
    let mut config = HttpRegistryConfig::new(&base);
    config.auth = Auth::ClientCredentials {
        token_url: format!("{base}/token"),
        client_id: "lakesink".into(),
        client_secret: "secret".into(),
        scope: None,
    };
    config.backoff = quick();
    let registry = HttpRegistry::new(config).unwrap();
    let schema = registry.resolve(&ID).await.unwrap();
    assert_eq!(schema.text, r#"{"type":"string"}"#);
    // The schema and references requests, asked at once, are both refused t1: one new token
    // (t2) serves both. Were each refusal to drop whatever token is held, a third would be
    // fetched, which this registry refuses.
    assert_eq!(tokens.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_token_refused_twice_is_unauthorized() {
    let base = serve(|req| {
        if req.starts_with("POST /token") {
            (200, r#"{"access_token":"t","expires_in":3600}"#.into())
        } else {
            (401, String::new())
        }
    })
    .await;
    let mut config = HttpRegistryConfig::new(&base);
    config.auth = Auth::ClientCredentials {
        token_url: format!("{base}/token"),
        client_id: "c".into(),
        client_secret: "s".into(),
        scope: Some("registry".into()),
    };
    let err = HttpRegistry::new(config)
        .unwrap()
        .resolve(&ID)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    assert!(!err.retryable());
}

#[tokio::test]
async fn basic_auth_is_sent_and_5xx_is_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let base = serve(move |req| {
        // "lakesink:pw" in base64.
        assert!(
            req.contains("authorization: Basic bGFrZXNpbms6cHc="),
            "{req}"
        );
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            return (503, String::new());
        }
        if req.contains("/references ") {
            (200, "[]".into())
        } else {
            (200, r#"{"type":"long"}"#.into())
        }
    })
    .await;
    let mut config = HttpRegistryConfig::new(&base);
    config.auth = Auth::Basic {
        username: "lakesink".into(),
        password: "pw".into(),
    };
    config.backoff = quick();
    let schema = HttpRegistry::new(config)
        .unwrap()
        .resolve(&ID)
        .await
        .unwrap();
    assert_eq!(schema.text, r#"{"type":"long"}"#);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn persistent_5xx_is_unavailable_after_the_attempts() {
    // The schema and its references are asked at once: each request gets its attempts.
    let calls = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let seen = calls.clone();
    let base = serve(move |req| {
        seen[usize::from(req.contains("/references "))].fetch_add(1, Ordering::SeqCst);
        (500, String::new())
    })
    .await;
    let mut config = HttpRegistryConfig::new(&base);
    config.backoff = quick();
    let err = HttpRegistry::new(config)
        .unwrap()
        .resolve(&ID)
        .await
        .unwrap_err();
    assert!(err.retryable(), "{err}");
    assert_eq!(calls[0].load(Ordering::SeqCst), 3, "schema requests");
    assert_eq!(calls[1].load(Ordering::SeqCst), 3, "references requests");
}
