//! The ToolCall's messages.

/// Everything a ToolCall actor handles. A body's updates and result go straight to the
/// Toolset; this actor only hears about its body when the call was cancelled.
pub(crate) enum ToolCallMsg {
    /// The call was ended early (cancelled, timed out, aborted; its Toolset already ended
    /// it): stop now, or after `grace` if the body is cooperative. `why` is the stop reason
    /// the lifecycle records.
    Cancel { grace: std::time::Duration, why: &'static str },
    /// A cooperative body's grace period is over.
    GraceOver,
    /// The body of a cancelled call ended (within its grace period).
    BodyDone,
    /// Panic (failure-isolation tests, chaos runs).
    #[cfg(feature = "test-hooks")]
    InjectFailure,
}
