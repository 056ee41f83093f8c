//! The operator's HTTP endpoint: `/metrics`, `/health`, `/ready`, `/status`, and the part of
//! Kafka Connect's REST API that status tools read (`/connectors/<group>/status`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const ACCEPT_FIRST_WAIT: Duration = Duration::from_millis(50);
const ACCEPT_MAX_WAIT: Duration = Duration::from_secs(1);

use super::Telemetry;

/// Binds `addr` and serves from a task of its own; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    telemetry: Arc<Telemetry>,
) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("service.http-listen: binding {addr}"))?;
    let bound = listener.local_addr()?;
    telemetry.status.set_port(bound.port());
    info!(address = %bound, "serving /metrics, /health, /ready and /status");
    tokio::spawn(async move {
        // A persistent accept error (out of file descriptors) must not spin a core: wait,
        // longer each time, and say so once per streak.
        let mut failing = None;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => {
                    failing = None;
                    stream
                }
                Err(e) => {
                    let wait = failing.map_or(ACCEPT_FIRST_WAIT, |w: Duration| {
                        (w * 2).min(ACCEPT_MAX_WAIT)
                    });
                    if failing.is_none() {
                        warn!(error = %e, "the HTTP endpoint cannot accept connections; retrying");
                    }
                    failing = Some(wait);
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            let telemetry = telemetry.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let telemetry = telemetry.clone();
                    async move { Ok::<_, Infallible>(route(&req, &telemetry)) }
                });
                // A client that never finishes its headers is dropped, not kept forever.
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(error = %e, "http connection");
                }
            });
        }
    });
    Ok(bound)
}

fn route(req: &Request<Incoming>, telemetry: &Telemetry) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = text(StatusCode::OK, telemetry.metrics.render());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        "/health" => match telemetry.alive() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/ready" => match telemetry.status.ready() {
            Ok(()) => text(StatusCode::OK, "ready\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/status" => json(StatusCode::OK, &telemetry.status_json()),
        path => connect(path, req.uri().query(), telemetry).unwrap_or_else(|| {
            text(
                StatusCode::NOT_FOUND,
                "try /metrics, /health, /ready, /status or /connectors/<group>/status\n".into(),
            )
        }),
    }
}

/// Kafka Connect's read-only status routes, the service as its one connector; errors in
/// Connect's shape (`error_code`, `message`).
fn connect(path: &str, query: Option<&str>, t: &Telemetry) -> Option<Response<Full<Bytes>>> {
    let id = t.status.identity()?;
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let status = || t.status.to_connect_json();
    let unknown = |what: &str| {
        json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error_code": 404, "message": format!("{what} not found")}),
        )
    };
    Some(match parts.as_slice() {
        [""] => json(
            StatusCode::OK,
            &serde_json::json!({"version": id.version, "commit": "", "kafka_cluster_id": ""}),
        ),
        ["connectors"] if query.is_some_and(|q| q.contains("expand=status")) => json(
            StatusCode::OK,
            &serde_json::json!({ id.name.as_str(): {"status": status()} }),
        ),
        ["connectors"] => json(StatusCode::OK, &serde_json::json!([id.name])),
        ["connectors", name, ..] if *name != id.name => unknown(&format!("Connector {name}")),
        ["connectors", _, "status"] => json(StatusCode::OK, &status()),
        ["connectors", _, "tasks", task, "status"] => {
            let s = status();
            match task
                .parse::<usize>()
                .ok()
                .and_then(|i| s["tasks"].get(i).cloned())
            {
                Some(task) => json(StatusCode::OK, &task),
                None => unknown(&format!("Task {task}")),
            }
        }
        _ => return None,
    })
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = text(status, body.to_string());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
