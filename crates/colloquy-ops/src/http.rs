//! The routes on axum: `GET /metrics` and `GET /healthz`, alone or beside a host's own
//! (colloquy-server mounts them on its router); `serve.rs` serves them.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

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

/// The routes: `GET /metrics` ([`metrics_router`]) and `GET /healthz` ([`health_router`]).
/// Any other path is a `404`.
pub fn router(metrics: Metrics, health: impl Fn() -> Health + Send + Sync + 'static) -> Router {
    metrics_router(metrics).merge(health_router(health))
}

/// `GET /metrics`: the exposition of `metrics`. Of any state, to sit beside a host's own
/// routes (colloquy-server's).
pub fn metrics_router<S>(metrics: Metrics) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new().route(
        "/metrics",
        get(move || {
            let text = metrics.render();
            async move { ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text) }
        }),
    )
}

/// `GET /healthz`: `200 ok` or `503` and the reason, as `health` says, asked on each request
/// (keep it quick, it runs on the request's task). Of any state, to sit beside a host's own
/// routes: every host of colloquy answers its health the same way.
pub fn health_router<S>(health: impl Fn() -> Health + Send + Sync + 'static) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let health = Arc::new(health);
    Router::new().route(
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
