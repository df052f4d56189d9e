//! The Toolset's messages.

use std::collections::BTreeMap;

use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::support::speech_control::SpeechControl;
use crate::types::error::{ApprovalError, CancelError};
use colloquy_model::{
    Agent, FunctionCall, FunctionTool, PostedUpdate, Timestamp, ToolError, ToolOutput,
};
use ractor::{ActorId, RpcReplyPort};
use serde_json::{Map, Value};

/// A call to run.
pub(crate) struct ExecuteCall {
    /// The tool, as dispatch resolved it from the current agent's catalog.
    pub tool: FunctionTool,
    /// The function-call item (canonical arguments, stamped at execution start).
    pub call: FunctionCall,
    /// Parsed arguments.
    pub arguments: Map<String, Value>,
    /// The dispatching speech.
    pub speech_id: String,
    /// Fires once the text of the step that made the call has finished playing.
    pub playout_done: CancellationToken,
    /// The dispatching speech's interruption switch.
    pub speech: SpeechControl,
    /// The call's `tracing` span (a child of the speech's); the tool's body runs in it.
    pub span: tracing::Span,
    /// A call run again after a resume (docs/durability.md#on-interrupted): the model was
    /// answered already, and this many of its updates are in the context.
    pub resumed: Option<u32>,
}

/// What dispatch receives for a call: the output the model will see.
#[derive(Clone, Debug)]
pub(crate) struct CallOutcome {
    pub output: String,
    pub is_error: bool,
    pub reply_required: bool,
    pub finished_at: Timestamp,
    /// The output is the call's first update: the call goes on in the background.
    pub provisional: bool,
    /// The tool returned an agent to hand off to.
    pub handoff: Option<Arc<Agent>>,
}

/// Everything a Toolset actor handles.
pub(crate) enum ToolsetMsg {
    /// Register and start a call; `reply` answers with its output.
    Execute(Box<ExecuteCall>, RpcReplyPort<CallOutcome>),
    /// Replace the mocked tool bodies (tool name → mock), for calls that start from now on.
    SetMocks(Arc<BTreeMap<String, FunctionTool>>),
    /// Cancel a running call (decision 20): accepted at once, the call ends `cancelled`.
    /// `drain` (handoff, close) cancels even when the speech disallows interruptions.
    Cancel { call_id: String, reply: Option<RpcReplyPort<Result<(), CancelError>>>, drain: bool },
    /// Let a call waiting for approval run.
    Approve { call_id: String, reply: Option<RpcReplyPort<Result<(), ApprovalError>>> },
    /// End a call waiting for approval `rejected` with `reason`. `drain` (handoff, close):
    /// a call approved meanwhile is cancelled instead if it can be, else left to finish.
    Reject {
        call_id: String,
        reason: String,
        reply: Option<RpcReplyPort<Result<(), ApprovalError>>>,
        drain: bool,
    },
    /// The approval timer of a waiting call fired (from its ToolCall `from`).
    ApprovalTimeout { call_id: String, from: ActorId },
    /// A drain timed out (decision 7): abort the call, which ends `error` "drain timeout".
    Abort { call_id: String },
    /// A drain timed out: abort every running call, and answer every call that arrives from
    /// now on with `error` "drain timeout" instead of running it.
    Expire,
    /// The agent the toolset's results now go to (a session-scoped toolset after a handoff).
    SetOwner { agent_id: std::sync::Arc<str> },
    /// A ToolCall's body posted its `index`-th update (0 = the first). `from` is the ToolCall
    /// actor: a report from a body whose call already ended (or whose id was reused since) is
    /// dropped.
    Updated { call_id: Arc<str>, from: ActorId, index: u32, update: PostedUpdate },
    /// An attempt of a call marked safe to retry failed; `attempt` runs after the backoff.
    Retrying { call_id: Arc<str>, from: ActorId, attempt: u32, reason: String },
    /// The before-call hook let a call that may wait go on (from its ToolCall `from`): ask
    /// for approval if it `needs_approval` (showing the `rewritten` arguments, if any), else
    /// find it a place.
    Screened { call_id: Arc<str>, from: ActorId, needs_approval: bool, rewritten: Option<String> },
    /// The interrupted speech that waits for the calls of step `step_id` stops waiting:
    /// answer now those not answered yet, and let them go on in the background.
    Release { step_id: String },
    /// Places under a cap may have freed: start the waiting calls that fit.
    GrantPlaces,
    /// The call's start is on disk: its body may run once it is let through
    /// (docs/durability.md#write-ahead).
    Journaled { call_id: String, let_through: bool },
    /// The timer of a call with a deadline or heartbeat fired (from its ToolCall `from`).
    Watch { call_id: String, from: ActorId },
    /// A ToolCall's body ended (a panic arrives here as an internal error).
    Finished { call_id: Arc<str>, from: ActorId, result: Result<ToolOutput, ToolError> },
    /// Panic (failure-isolation tests).
    #[cfg(feature = "test-hooks")]
    InjectFailure,
    /// Make the ToolCall of this running call panic (failure-isolation tests, chaos runs).
    #[cfg(feature = "test-hooks")]
    InjectCallFailure(String),
    /// Describe this toolset and its calls (`SessionHandle::inspect`).
    Inspect(RpcReplyPort<crate::types::snapshot::ActorNode>),
}

/// The mark a call's item gets once it has posted its first update (§7 step 6): part of what
/// the Activity and the Toolset agree on about an item, so it lives with their messages.
pub(crate) const NON_BLOCKING: &str = "__livekit_agents_tool_non_blocking";

/// Marks a call's item non-blocking. A call's `extra` is usually empty: it then gets room for
/// this one entry only (a map's first insert reserves for several; the item stays in history).
pub(crate) fn mark_non_blocking(extra: &mut Map<String, Value>) {
    if extra.is_empty() {
        *extra = Map::with_capacity(1);
    }
    extra.insert(NON_BLOCKING.into(), Value::Bool(true));
}
