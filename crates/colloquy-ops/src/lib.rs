//! Health and Prometheus metrics for a process that runs colloquy sessions: a cluster node,
//! `colloquy serve`, or any host.
//!
//! - [`Metrics`] holds the figures (sessions live, started and closed; tool calls by status
//!   and their durations; LLM responses, errors and tokens; errors by source) in a
//!   `prometheus-client` registry. [`Metrics::watch`] follows one session's events in a task
//!   until it closes; [`Metrics::render`] writes the OpenMetrics text.
//! - [`router`] serves `GET /metrics` and `GET /healthz` (a [`Health`] the host computes);
//!   [`metrics_router`] and [`health_router`] are each alone, to mount beside a host's own
//!   routes (colloquy-server's).
//! - [`serve`] binds an address ([`DEFAULT_ADDR`] is `127.0.0.1:9464`) with every wait
//!   bounded ([`ServeOptions`]) and returns an [`OpsServer`] to stop; [`Listener`] binds first
//!   and serves later. It is the one HTTP serve loop of colloquy's hosts: colloquy-server
//!   serves its API and WebSockets with it too.
//!
//! The metric names, labels and what each counts: docs/operations.md.
//!
//! ```no_run
//! # async fn host() -> std::io::Result<()> {
//! use colloquy_ops::{DEFAULT_ADDR, Health, Metrics, router, serve};
//!
//! let metrics = Metrics::new();
//! let (addr, server) = serve(DEFAULT_ADDR, router(metrics.clone(), || Health::Ready)).await?;
//! println!("metrics on http://{addr}/metrics");
//! // For each session the host starts: `metrics.watch(&session);`
//! server.stop().await;
//! # Ok(()) }
//! ```

mod figures;
mod http;
mod labels;
mod metrics;
mod serve;
mod tally;

pub use figures::DURATION_BUCKETS;
pub use http::{
    DEFAULT_ADDR, Health, OPENMETRICS_CONTENT_TYPE, health_router, metrics_router, router,
};
pub use labels::OTHER_LABEL;
pub use metrics::{
    DEFAULT_MAX_CLOSE_REASONS, DEFAULT_MAX_TOOL_NAMES, Metrics, MetricsBuilder, PREFIX,
};
pub use serve::{Listener, OpsServer, ServeOptions, serve, serve_with};
