//! Errors a host sees from the session API.

/// Why a session call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The session is closing or closed.
    #[error("session is closed")]
    Closed,
    /// The session could not be built (bad configuration).
    #[error("invalid session configuration: {0}")]
    Config(String),
    /// An actor could not be started.
    #[error("could not start the session: {0}")]
    Spawn(String),
}
