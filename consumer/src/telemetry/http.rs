//! The operator's HTTP endpoint: `/metrics`, `/health`, `/ready`, `/status`.

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
        "/health" if telemetry.status.healthy() => text(StatusCode::OK, "ok\n".into()),
        "/health" => text(StatusCode::SERVICE_UNAVAILABLE, "a sink failed\n".into()),
        "/ready" => match telemetry.status.ready() {
            Ok(()) => text(StatusCode::OK, "ready\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/status" => {
            let mut r = text(StatusCode::OK, telemetry.status.to_json().to_string());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "try /metrics, /health, /ready or /status\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
