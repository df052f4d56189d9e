//! What every host that serves agents by name shares — `colloquy serve`'s local backend and a
//! cluster node: what a session's hooks learn of its start, the hooks' types, and the bound on
//! the requests run at once.

use std::sync::Arc;

use colloquy_actors::{SessionBuilder, SessionHandle};
use colloquy_model::Agent;
use colloquy_protocol::{ErrorKind, ProtocolError};

/// What a client asked for when it started a session, as a host's session hooks see it
/// (`LocalBackend::session` in the server, `NodeBuilder::session` on a node).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionStart {
    /// The agent asked for.
    pub agent: String,
    /// What the client passed as `options.metadata` (`null` when nothing).
    pub metadata: serde_json::Value,
}

impl SessionStart {
    /// A start of `agent` with `metadata`.
    pub fn new(agent: impl Into<String>, metadata: serde_json::Value) -> Self {
        Self { agent: agent.into(), metadata }
    }
}

/// Makes the agent a session starts with.
pub type AgentFactory = Arc<dyn Fn() -> Agent + Send + Sync>;

/// Configures each session's builder, knowing what the client asked for.
pub type SessionHook = Arc<dyn Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync>;

/// Hears of each session once it has started.
pub type StartedHook = Arc<dyn Fn(&SessionHandle, &SessionStart) + Send + Sync>;

/// A bound on the requests run at once for one client or one session: past it a request is
/// answered `busy` at once rather than queued, so a client that floods a session learns so and
/// a slow session holds no queue (the server's `Limits::max_in_flight`, a node's
/// `NodeBuilder::max_in_flight`).
#[derive(Clone, Debug)]
pub struct InFlight {
    places: Arc<tokio::sync::Semaphore>,
    max: usize,
    whose: &'static str,
}

impl InFlight {
    /// At most `max` requests at once (at least one) of `whose` (`"this connection"`, `"this
    /// session"`: what the `busy` answer names).
    pub fn new(max: usize, whose: &'static str) -> Self {
        let max = max.max(1);
        Self { places: Arc::new(tokio::sync::Semaphore::new(max)), max, whose }
    }

    /// A place for one more request, held until it is dropped; or the `busy` error to answer
    /// with.
    pub fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ProtocolError> {
        Arc::clone(&self.places).try_acquire_owned().map_err(|_| {
            let why = format!(
                "{} requests of {} are running: send this one again once one is answered",
                self.max, self.whose
            );
            ProtocolError::new(ErrorKind::Busy, why)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_bound_a_request_is_busy_until_a_place_frees() {
        let bound = InFlight::new(1, "this session");
        let held = bound.admit().expect("a place");
        let busy = bound.admit().expect_err("busy");
        assert_eq!(busy.kind, ErrorKind::Busy);
        assert!(busy.message.contains("1 requests of this session"), "{}", busy.message);
        drop(held);
        assert!(bound.admit().is_ok());
    }
}
