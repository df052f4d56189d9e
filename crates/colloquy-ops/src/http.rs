//! The HTTP edge: `GET /metrics` and `GET /healthz` on axum, served on hyper's HTTP/1
//! connection so that every wait has a bound. A client has `header_read_timeout` to send its
//! request, no connection lives past `connection_timeout` (a scraper reconnects), and a stop
//! gives the answers in flight `shutdown_timeout`, then drops them.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::metrics::Metrics;

/// The address a host serves on unless it chooses another: loopback only, on the port of the
/// OpenTelemetry Prometheus exporter (9464). Binding a reachable address is the host's choice.
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

/// The content type of `GET /metrics`: the OpenMetrics text format, which the encoder writes.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the process takes new work, as `GET /healthz` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Ready: `200 ok`.
    Ready,
    /// Not ready, with the reason (`draining`, `nats disconnected`…): `503` and the reason.
    NotReady(String),
}

impl Health {
    /// Not ready, for `reason`.
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Self::NotReady(reason.into())
    }
}

/// The routes: `GET /metrics` (the exposition of `metrics`) and `GET /healthz` (what `health`
/// says, asked on each request; keep it quick, it runs on the request's task). Any other path
/// is a `404`.
pub fn router(metrics: Metrics, health: impl Fn() -> Health + Send + Sync + 'static) -> Router {
    let health = Arc::new(health);
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let text = metrics.render();
                async move { ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text) }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let answer = match health() {
                    Health::Ready => (StatusCode::OK, "ok".to_string()),
                    Health::NotReady(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
                };
                async move { answer.into_response() }
            }),
        )
}

/// The bounds of the HTTP edge.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    header_read_timeout: Duration,
    connection_timeout: Duration,
    shutdown_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

impl ServeOptions {
    /// How long a client has to send a request's headers, and an idle kept-alive connection
    /// to start its next request, before it is closed (5 s unless set).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a connection may live; then it finishes the answer in flight (within the
    /// shutdown timeout) and closes (60 s unless set). A scraper opens a new one.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long a stop, or a connection's end, waits for the answers in flight before it drops
    /// them (5 s unless set).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }
}

/// A running server; [`stop`](Self::stop) it, or drop it to stop it in the background.
#[derive(Debug)]
pub struct OpsServer {
    /// Dropping it tells the accept loop and every connection to stop.
    stop: watch::Sender<()>,
    task: JoinHandle<()>,
}

impl OpsServer {
    /// Stops accepting, lets the answers in flight finish (up to the shutdown timeout), closes
    /// every connection, and returns once the server's tasks have ended.
    pub async fn stop(self) {
        let Self { stop, task } = self;
        drop(stop);
        let _ = task.await;
    }
}

/// [`serve_with`] the default [`ServeOptions`].
///
/// # Errors
/// The address cannot be bound (in use, not ours, no permission).
pub async fn serve(addr: SocketAddr, router: Router) -> io::Result<(SocketAddr, OpsServer)> {
    serve_with(addr, router, ServeOptions::default()).await
}

/// Binds `addr` (port 0 picks a free one) and serves `router` on it in a task; returns the
/// bound address and the server's handle.
///
/// # Errors
/// The address cannot be bound (in use, not ours, no permission).
pub async fn serve_with(
    addr: SocketAddr,
    router: Router,
    options: ServeOptions,
) -> io::Result<(SocketAddr, OpsServer)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let (stop, stopped) = watch::channel(());
    let task = tokio::spawn(accept(listener, router, options, stopped));
    Ok((bound, OpsServer { stop, task }))
}

/// Accepts connections until told to stop, then gives them the shutdown timeout to finish.
async fn accept(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    mut stopped: watch::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let serving = connection(stream, router.clone(), options.clone(), stopped.clone());
                    connections.spawn(serving);
                }
                Err(e) => {
                    // Out of file descriptors, most likely: wait a little rather than spin.
                    tracing::warn!("the ops server could not accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(options.shutdown_timeout, drained).await;
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// Serves one connection until it ends, its time is up, or the server stops.
async fn connection(
    stream: TcpStream,
    router: Router,
    options: ServeOptions,
    mut stopped: watch::Receiver<()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(conn);
    tokio::select! {
        biased;
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!("an ops connection ended: {e}");
            }
            return;
        }
        _ = stopped.changed() => {}
        () = tokio::time::sleep(options.connection_timeout) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(options.shutdown_timeout, conn).await;
}
