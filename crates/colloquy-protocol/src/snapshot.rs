//! A session's snapshot and its running calls as they travel: the protocol's own counterparts
//! of the runtime's, field for field, so a change to the runtime's types does not change the
//! protocol (the edge, `colloquy-edge`, converts). Their doc comments are the runtime's, since
//! they are the schemas' descriptions.

use colloquy_model::{AgentState, UserState};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A session at one instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionSnapshot {
    /// Virtual milliseconds since the session started (as events' `at_ms`).
    pub at_ms: u64,
    /// The session's id.
    pub session_id: String,
    /// The current agent.
    pub agent: String,
    /// The agent state.
    pub agent_state: AgentState,
    /// The user state.
    pub user_state: UserState,
    /// The current Activity's speeches: the one speaking, those waiting for their blocking
    /// tools, then the queue in order.
    pub speeches: Vec<SpeechSnapshot>,
    /// What the ReplyCoalescer holds (`None` until the first deferred reply spawns it).
    pub replies: Option<CoalescerSnapshot>,
    /// The actor tree, rooted at the Session.
    pub tree: ActorNode,
}

/// One speech of the current Activity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SpeechSnapshot {
    /// `s1`, `s2`… as in events.
    pub speech_id: String,
    /// Where it is.
    pub status: SpeechStatus,
}

/// Where a speech is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SpeechStatus {
    /// It holds the floor: asking the LLM or playing.
    Speaking,
    /// It released the floor to wait for its blocking tools.
    WaitingForTools,
    /// Queued behind the current one.
    Queued,
}

/// The ReplyCoalescer's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CoalescerSnapshot {
    /// Update ids waiting for a deferred reply, in enqueue order.
    pub pending: Vec<String>,
    /// An offer of those pairs awaits the Session's answer.
    pub offered: bool,
}

/// What an actor is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeStatus {
    /// Working normally.
    Running,
    /// An Activity letting its speeches finish before a handoff.
    Draining,
    /// Closing (the Session or its Activity).
    Closing,
    /// A tool call whose call has ended (cancelled or aborted) while its body winds down.
    Stopping,
    /// A tool call waiting for the host's approval: its body has not started.
    AwaitingApproval,
    /// A tool call waiting for a place under a concurrency cap (`max_concurrent`): started,
    /// its body not running yet; its node carries its toolset's actor id.
    Queued,
}

/// Whether a toolset lives with the session or with the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolsetScope {
    /// A child of the Session; survives handoffs.
    Session,
    /// A child of the Activity.
    Agent,
}

/// Which kind of actor.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActorKind {
    /// The Session.
    Session,
    /// The ReplyCoalescer.
    Coalescer,
    /// An Activity.
    Activity,
    /// A Toolset.
    Toolset,
    /// A ToolCall.
    ToolCall,
}

/// One actor and its children. Kind-specific fields are `None` (and not serialized) on the
/// other kinds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActorNode {
    /// The actor's kind.
    pub kind: ActorKind,
    /// A stable id: `session`, `coalescer`, `activity:<agent>`, `toolset:<id>`,
    /// `tool_call:<call id>`.
    pub id: String,
    /// What it is doing.
    pub status: NodeStatus,
    /// An Activity's agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A Toolset's scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<ToolsetScope>,
    /// The tools a Toolset runs, in the order the model sees them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// A ToolCall's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// A ToolCall's tool name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A ToolCall's arguments (canonical text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// How long a ToolCall has run, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// How many updates a ToolCall has posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updates: Option<u32>,
    /// Whether the call can be cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancellable: Option<bool>,
    /// Children, sorted by kind name then id.
    pub children: Vec<ActorNode>,
}

/// A call running now (`SessionHandle::running_tool_calls`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunningToolCall {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Canonical argument text.
    pub arguments: String,
    /// Whether it can be cancelled.
    pub cancellable: bool,
    /// Whether it waits for the host's approval (`SessionHandle::approve`): its body has not
    /// started.
    pub awaiting_approval: bool,
}
