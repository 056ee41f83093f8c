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
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const ACCEPT_FIRST_WAIT: Duration = Duration::from_millis(50);
const ACCEPT_MAX_WAIT: Duration = Duration::from_secs(1);

use super::Telemetry;

/// How long connections being served at shutdown get to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The endpoint being served: [`Server::shutdown`] stops it.
pub(crate) struct Server {
    #[cfg(test)]
    bound: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Stops accepting, lets each open connection finish the request it is on (an idle
    /// keep-alive connection is closed), and returns once all are done or the grace is up.
    pub(crate) async fn shutdown(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), self.task)
            .await
            .is_err()
        {
            warn!("the HTTP endpoint did not stop in time");
        }
    }
}

/// Binds `addr` and serves from a task of its own.
pub(crate) async fn serve(addr: SocketAddr, telemetry: Arc<Telemetry>) -> anyhow::Result<Server> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("service.http-listen: binding {addr}"))?;
    let bound = listener.local_addr()?;
    telemetry.status.set_port(bound.port());
    info!(address = %bound, "serving /metrics, /health, /ready and /status");
    let (stop, stopping) = watch::channel(false);
    let task = tokio::spawn(accept(listener, telemetry, stopping));
    Ok(Server {
        #[cfg(test)]
        bound,
        stop,
        task,
    })
}

async fn accept(
    listener: TcpListener,
    telemetry: Arc<Telemetry>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    // A persistent accept error (out of file descriptors) must not spin a core: wait,
    // longer each time, and say so once per streak.
    let mut failing = None;
    loop {
        let accepted = tokio::select! {
            _ = stopping.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
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
                tokio::select! {
                    _ = stopping.changed() => break,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        connections.spawn(connection(stream, telemetry.clone(), stopping.clone()));
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        debug!(
            open = connections.len(),
            "HTTP connections still open at shutdown: closed"
        );
        connections.abort_all();
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    telemetry: Arc<Telemetry>,
    mut stopping: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |req| {
        let telemetry = telemetry.clone();
        async move { Ok::<_, Infallible>(route(&req, &telemetry)) }
    });
    // A client that never finishes its headers is dropped, not kept forever.
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let done = tokio::select! {
        done = conn.as_mut() => done,
        _ = stopping.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = done {
        debug!(error = %e, "http connection");
    }
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::telemetry::Setup;

    async fn get(stream: &mut tokio::net::TcpStream, path: &str) -> String {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(req.as_bytes()).await.expect("sent");
        let mut buf = vec![0; 4096];
        let n = stream.read(&mut buf).await.expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_and_stops_accepting() {
        let setup = Setup {
            sinks: &["raw"],
            group: "test",
            brokers: "127.0.0.1:9",
            kafka_grace: Duration::from_secs(300),
        };
        let telemetry = Arc::new(Telemetry::new(&setup, None));
        let server = serve("127.0.0.1:0".parse().expect("addr"), telemetry)
            .await
            .expect("served");
        let addr = server.bound;
        // A keep-alive connection, idle after its request.
        let mut open = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connected");
        let answer = get(&mut open, "/health").await;
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");

        let started = std::time::Instant::now();
        server.shutdown().await;
        assert!(
            started.elapsed() < SHUTDOWN_GRACE,
            "an idle connection held the shutdown for {:?}",
            started.elapsed()
        );
        // The idle connection was closed by the server, and nothing listens any more.
        let mut rest = Vec::new();
        let n = open.read_to_end(&mut rest).await.unwrap_or(0);
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(&rest));
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
