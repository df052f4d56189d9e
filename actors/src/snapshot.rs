//! Snapshots of a running session for hosts: which actors exist, what each is doing, which
//! calls run and for how long, which replies wait ([`SessionHandle::inspect`]). Plain data,
//! below every actor: the actors' messages carry these types, and `inspect.rs` assembles
//! them.
//!
//! A snapshot is assembled from the actors' own answers: the Session names its children, the
//! Activity its speeches and toolsets, each Toolset its running calls, the coalescer what it
//! holds. Each actor answers from its own state inside its handler, so every part is
//! consistent in itself; the parts are asked one after another, so a snapshot taken while
//! things move may show a call in one part and not in the next. Once the session is quiet the
//! tree is exactly ractor's supervision tree under the session (a test compares both).
//!
//! [`SessionHandle::inspect`]: crate::SessionHandle::inspect

use colloquy_core::{AgentState, UserState};
use ractor::{ActorCell, ActorId};
use serde::Serialize;

use crate::lifecycle::ActorKind;

/// A session at one instant.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpeechSnapshot {
    /// `s1`, `s2`… as in events.
    pub speech_id: String,
    /// Where it is.
    pub status: SpeechStatus,
}

/// Where a speech is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CoalescerSnapshot {
    /// Update ids waiting for a deferred reply, in enqueue order.
    pub pending: Vec<String>,
    /// An offer of those pairs awaits the Session's answer.
    pub offered: bool,
}

/// What an actor is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
}

/// Whether a toolset lives with the session or with the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolsetScope {
    /// A child of the Session; survives handoffs.
    Session,
    /// A child of the Activity.
    Agent,
}

/// One actor and its children. Kind-specific fields are `None` (and not serialized) on the
/// other kinds.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
    /// The ractor actor id (to match a node with ractor's own tree; not serialized: it is not
    /// stable from run to run).
    #[serde(skip)]
    pub actor_id: ActorId,
}

impl ActorNode {
    pub(crate) fn new(kind: ActorKind, id: String, status: NodeStatus, actor: &ActorCell) -> Self {
        Self {
            kind,
            id,
            status,
            agent: None,
            scope: None,
            tools: None,
            call_id: None,
            name: None,
            arguments: None,
            elapsed_ms: None,
            updates: None,
            cancellable: None,
            children: Vec::new(),
            actor_id: actor.get_id(),
        }
    }

    /// Sorts children by kind name then id, recursively.
    pub(crate) fn sort(&mut self) {
        for child in &mut self.children {
            child.sort();
        }
        self.children.sort_by(|a, b| (a.kind.name(), &a.id).cmp(&(b.kind.name(), &b.id)));
    }

    /// This node and every descendant, depth first.
    pub fn walk(&self) -> Vec<&ActorNode> {
        let mut out = vec![self];
        for child in &self.children {
            out.extend(child.walk());
        }
        out
    }

    /// The node with this stable id, if any.
    pub fn find(&self, id: &str) -> Option<&ActorNode> {
        self.walk().into_iter().find(|n| n.id == id)
    }
}
