//! Actor lifecycle records for hosts and tests: every actor of a session reports when it has
//! started and when it has stopped gracefully. An actor that was killed (its parent ended
//! first, or it panicked) never reports `Stopped`, so a recorder shows it.

use serde::Serialize;
use tokio::sync::mpsc;

/// Which kind of actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
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

impl ActorKind {
    /// The kind's name as serialized (`session`, `coalescer`, `activity`, `toolset`,
    /// `tool_call`).
    pub fn name(self) -> &'static str {
        match self {
            ActorKind::Session => "session",
            ActorKind::Coalescer => "coalescer",
            ActorKind::Activity => "activity",
            ActorKind::Toolset => "toolset",
            ActorKind::ToolCall => "tool_call",
        }
    }
}

/// What happened to an actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// It finished starting.
    Started,
    /// It stopped gracefully (its `post_stop` ran).
    Stopped,
}

/// One lifecycle record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LifecycleEvent {
    /// The actor's kind.
    pub kind: ActorKind,
    /// A stable id: `session`, `coalescer`, `activity:<agent>`, `toolset:<id>`,
    /// `tool_call:<call id>`.
    pub id: String,
    /// What happened.
    pub what: Lifecycle,
}

/// Where a session's actors report (cheap to clone; nothing when no one listens).
#[derive(Clone, Debug, Default)]
pub(crate) struct LifecycleSink(Option<mpsc::UnboundedSender<LifecycleEvent>>);

impl LifecycleSink {
    pub fn new(tx: Option<mpsc::UnboundedSender<LifecycleEvent>>) -> Self {
        Self(tx)
    }

    pub fn report(&self, kind: ActorKind, id: impl Into<String>, what: Lifecycle) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(LifecycleEvent { kind, id: id.into(), what });
        }
    }
}
