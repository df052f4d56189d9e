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
//! They serialize for hosts (`colloquy chat`'s `/inspect --json`, scenario traces); the session
//! protocol has counterparts of its own, which the edge (`colloquy-edge`) converts these to.
//!
//! [`SessionHandle::inspect`]: crate::SessionHandle::inspect

use std::fmt;

use colloquy_model::{AgentState, UserState};
use ractor::{ActorCell, ActorId};
use serde::Serialize;

use crate::types::lifecycle::ActorKind;

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
    /// A tool call waiting for the host's approval: its body has not started.
    AwaitingApproval,
    /// A tool call waiting for a place under a concurrency cap (`max_concurrent`): started,
    /// its body not running yet; its node carries its toolset's actor id.
    Queued,
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
    /// stable from run to run). A snapshot taken elsewhere (a remote session's) has
    /// `ActorId::Local(0)` everywhere: ids are local to the process that took it. So has an
    /// agent's own toolset before its first call, whose actor starts then (decision 81).
    #[serde(skip)]
    pub actor_id: ActorId,
}

impl ActorNode {
    pub(crate) fn new(kind: ActorKind, id: String, status: NodeStatus, actor: &ActorCell) -> Self {
        Self::with_actor_id(kind, id, status, actor.get_id())
    }

    /// A node whose actor is `actor_id` (`ActorId::Local(0)`: none runs yet).
    pub(crate) fn with_actor_id(
        kind: ActorKind,
        id: String,
        status: NodeStatus,
        actor_id: ActorId,
    ) -> Self {
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
            actor_id,
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

/// A unit enum's serialized name (`running`, `speaking`…).
fn word(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(word)) => word,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// A heading with the agent and the states, then the actor tree, one actor a line:
///
/// ```text
/// session 3f2a… · agent travel (listening) · user listening
///   session · session · running
///     activity:travel · activity · running · agent travel
///       toolset:agent:travel · toolset · running · agent scope · tools: book_flight
///         tool_call:c1 · tool_call · running · book_flight · 1.2 s · 1 update · cancellable
/// ```
///
/// Names are written as the tools and agents give them: a host printing to a terminal should
/// escape control characters (as `colloquy chat` does).
impl fmt::Display for SessionSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "session {} · agent {} ({}) · user {}",
            self.session_id,
            self.agent,
            word(&self.agent_state),
            word(&self.user_state)
        )?;
        self.tree.write_indented(f, 1)
    }
}

/// This actor and its descendants, one a line, each indented two spaces under its parent:
/// its id, kind and status, then what its kind adds (an Activity's agent, a Toolset's scope
/// and tools, a ToolCall's tool, time, updates and whether it can be cancelled).
impl fmt::Display for ActorNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_indented(f, 0)
    }
}

impl ActorNode {
    fn write_indented(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        write!(
            f,
            "{}{} · {} · {}",
            "  ".repeat(depth),
            self.id,
            self.kind.name(),
            word(&self.status)
        )?;
        if let Some(agent) = &self.agent {
            write!(f, " · agent {agent}")?;
        }
        if let Some(scope) = &self.scope {
            write!(f, " · {} scope", word(scope))?;
        }
        if let Some(tools) = &self.tools {
            write!(f, " · tools: {}", tools.join(", "))?;
        }
        if let Some(name) = &self.name {
            write!(f, " · {name}")?;
        }
        if let Some(ms) = self.elapsed_ms {
            write!(f, " · {:.1} s", ms as f64 / 1000.0)?;
        }
        match self.updates {
            Some(1) => write!(f, " · 1 update")?,
            Some(updates) => write!(f, " · {updates} updates")?,
            None => {}
        }
        if self.cancellable == Some(true) {
            write!(f, " · cancellable")?;
        }
        writeln!(f)?;
        for child in &self.children {
            child.write_indented(f, depth + 1)?;
        }
        Ok(())
    }
}
