//! colloquy-ops' `/metrics` and `/healthz` beside what a command serves (`node` and `serve`
//! with `--metrics-addr`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use colloquy::ops::{Health, Metrics, OpsServer, router, serve};

use crate::command::CommandError;

/// The metrics and the server that shows them.
pub(crate) struct Ops {
    pub(crate) metrics: Metrics,
    pub(crate) addr: SocketAddr,
    pub(crate) server: OpsServer,
}

impl Ops {
    /// Serves `/metrics` (of `metrics`) and `/healthz` (what `health` says) on `addr`.
    pub(crate) async fn serve(
        addr: SocketAddr,
        metrics: Metrics,
        health: &Arc<Mutex<Health>>,
    ) -> Result<Self, CommandError> {
        let health = Arc::clone(health);
        let routes = router(metrics.clone(), move || {
            health.lock().unwrap_or_else(PoisonError::into_inner).clone()
        });
        match serve(addr, routes).await {
            Ok((addr, server)) => Ok(Self { metrics, addr, server }),
            Err(e) => Err(CommandError::Failed(format!("cannot serve metrics on {addr}: {e}"))),
        }
    }
}

/// What `/healthz` says from now on.
pub(crate) fn set(health: &Mutex<Health>, now: Health) {
    *health.lock().unwrap_or_else(PoisonError::into_inner) = now;
}
