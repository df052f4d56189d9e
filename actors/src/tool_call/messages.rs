//! The ToolCall's messages.

use colloquy_core::{PostedUpdate, ToolError, ToolOutput};

/// Everything a ToolCall actor handles.
pub(crate) enum ToolCallMsg {
    /// The body called `ctx.update()`.
    Update(PostedUpdate),
    /// The body's task ended (a panic arrives here as an internal error).
    Finished(Result<ToolOutput, ToolError>),
    /// The call was cancelled (its Toolset already ended it): stop now, or after `grace` if
    /// the body is cooperative.
    Cancel { grace: std::time::Duration },
    /// A cooperative body's grace period is over.
    GraceOver,
}
