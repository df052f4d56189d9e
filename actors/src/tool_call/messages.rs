//! The ToolCall's messages.

use colloquy_core::{ToolError, ToolOutput};

/// Everything a ToolCall actor handles.
pub(crate) enum ToolCallMsg {
    /// The body's task ended (a panic arrives here as an internal error).
    Finished(Result<ToolOutput, ToolError>),
}
