//! The host's hook before each tool call (`SessionBuilder::before_tool_call`, decisions 59 and
//! 70): what it sees of a call and what it may answer. Where hosts put guardrails and audit
//! logging: it sees every call that starts, before anyone is asked to approve it and before it
//! waits for a place, remembered results included. The runtime runs it in the call's own task,
//! so a slow hook never blocks an actor's mailbox.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::tool_error::ToolError;

/// A call about to run, as the hook sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingToolCall {
    /// The call id (its `tool_call_started` event has been sent).
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The validated arguments (defaults filled, values coerced), as the body would get them.
    pub arguments: Map<String, Value>,
    /// The agent whose toolset runs the call.
    pub agent_id: String,
    /// The session the call belongs to (one hook may serve every session of a `Host`).
    pub session_id: String,
    /// The call will be put to the approver if the hook lets it run (decided over these
    /// arguments: a `Rewrite` is decided again).
    pub needs_approval: bool,
    /// The tool is `idempotent` and a result for these arguments is remembered: if the hook
    /// lets it run, the call is answered from memory and its body does not run.
    pub remembered: bool,
}

impl PendingToolCall {
    /// A pending call in no session, needing no approval, not remembered (the runtime builds
    /// these and sets the rest; tests of a hook may too).
    pub fn new(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: Map<String, Value>,
        agent_id: impl Into<String>,
    ) -> Self {
        PendingToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments,
            agent_id: agent_id.into(),
            session_id: String::new(),
            needs_approval: false,
            remembered: false,
        }
    }
}

/// What the hook decides for a call.
#[derive(Clone, Debug, PartialEq)]
pub enum BeforeCall {
    /// Run the body with the arguments as they are.
    Run,
    /// Run the body with these arguments instead (validated again; the history keeps the
    /// model's).
    Rewrite(Map<String, Value>),
    /// Do not run the body: the call ends `done` and the model reads this output.
    Skip(String),
    /// Do not run the body: the call ends `error` and the model reads
    /// ``The host rejected `NAME`: REASON``.
    Reject(String),
}

/// The future a hook returns; an `Err` is the error output the model reads.
pub type BeforeCallFuture = Pin<Box<dyn Future<Output = Result<BeforeCall, ToolError>> + Send>>;

/// A hook run before each tool call of a session.
pub type BeforeToolCall = Arc<dyn Fn(PendingToolCall) -> BeforeCallFuture + Send + Sync>;
