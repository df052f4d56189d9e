//! Actor lifecycle records for hosts and tests: every actor of a session reports when it has
//! started and when it has stopped gracefully. An actor that was killed (its parent ended
//! first, or it panicked) never reports `Stopped`, so a recorder shows it.

use serde::Serialize;
use tokio::sync::mpsc;

/// Which kind of actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
#[non_exhaustive]
pub enum Lifecycle {
    /// It finished starting.
    Started,
    /// It stopped: gracefully (its `post_stop` ran), with `reason` saying why when the actor
    /// knows, or killed with its parent (reason `killed`).
    Stopped,
    /// It panicked or its handler failed: its supervisor reports it, with the panic message
    /// in `reason`. It never reports `Stopped`.
    Failed,
    /// Not an actor's: the last record of a lifecycle stream whose reader left
    /// [`MAX_UNREAD_LIFECYCLE`] records unread. The stream ends here; the sessions go on.
    Overflowed,
}

/// How many records a lifecycle subscriber may leave unread before its stream is closed with
/// an [`Lifecycle::Overflowed`] record (a Host's stream hears every session it holds).
pub const MAX_UNREAD_LIFECYCLE: usize = 100_000;

/// A lifecycle channel: its bound only lets the sender count the unread.
pub(crate) fn lifecycle_channel() -> (mpsc::Sender<LifecycleEvent>, mpsc::Receiver<LifecycleEvent>)
{
    mpsc::channel(1 << 30)
}

/// One lifecycle record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LifecycleEvent {
    /// The session the actor belongs to.
    pub session_id: String,
    /// The actor's kind.
    pub kind: ActorKind,
    /// A stable id: `session`, `coalescer`, `activity:<agent>`, `toolset:<id>`,
    /// `tool_call:<call id>`.
    pub id: String,
    /// What happened.
    pub what: Lifecycle,
    /// Why it stopped (`close`, `handoff`, `cancelled`, `finished`…) or the failure's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
