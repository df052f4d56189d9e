//! The ToolCall's messages.

use colloquy_core::{PostedUpdate, ToolError, ToolOutput};

/// Everything a ToolCall actor handles.
pub(crate) enum ToolCallMsg {
    /// The body called `ctx.update()`.
    Update(PostedUpdate),
    /// The body's task ended (a panic arrives here as an internal error).
    Finished(Result<ToolOutput, ToolError>),
}
