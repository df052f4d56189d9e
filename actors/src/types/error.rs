//! Errors a host sees from the session API.

/// Why a session call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session is closing or closed.
    #[error("session closed")]
    Closed,
    /// `run` was called while another run was still going.
    #[error("nested runs are not supported")]
    NestedRun,
    /// A speech of the run failed (e.g. the LLM request).
    #[error("run failed: {0}")]
    RunFailed(String),
    /// The session could not be built (bad configuration).
    #[error("invalid session configuration: {0}")]
    Config(String),
    /// An actor could not be started.
    #[error("could not start the session: {0}")]
    Spawn(String),
    /// A stored session could not be resumed (an unknown id, a closed session, an agent no
    /// longer registered, a store that failed): what is wrong, by name.
    #[error("cannot resume: {0}")]
    Resume(String),
}

/// Why `approve` or `reject` did nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No running call has this id.
    #[error("Tool call {0} not found")]
    NotFound(String),
    /// The call runs, but does not wait for approval (it never did, or was answered).
    #[error("Tool call {0} is not awaiting approval")]
    NotAwaiting(String),
    /// The session is closed.
    #[error("session closed")]
    Closed,
}

/// Why a tool call could not be cancelled (the texts `lk_agents_cancel_task` answers with).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// No running call has this id.
    #[error("Task {0} not found")]
    NotFound(String),
    /// The call's tool is not cancellable.
    #[error("Tool call {0} is not cancellable")]
    NotCancellable(String),
    /// The call's speech disallows interruptions.
    #[error("Tool call {0} is not cancellable because interruptions are disallowed")]
    InterruptionsDisallowed(String),
    /// The session is closed.
    #[error("session closed")]
    Closed,
}
