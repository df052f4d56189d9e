//! Actor lifecycle records for hosts and tests: every actor of a session reports when it has
//! started and when it has stopped gracefully. An actor that was killed (its parent ended
//! first, or it panicked) never reports `Stopped`, so a recorder shows it.

use std::sync::Arc;

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
    /// It stopped gracefully (its `post_stop` ran); `reason` says why when the actor knows.
    Stopped,
    /// It panicked or its handler failed: its supervisor reports it, with the panic message
    /// in `reason`. It never reports `Stopped`.
    Failed,
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

/// Lifecycle subscribers shared by every session of a [`Host`](crate::Host): one added later
/// hears from sessions already running.
#[derive(Debug, Default)]
pub(crate) struct LifecycleHub(std::sync::Mutex<Vec<mpsc::UnboundedSender<LifecycleEvent>>>);

impl LifecycleHub {
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<LifecycleEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.lock().expect("lifecycle hub").push(tx);
        rx
    }

    pub fn send(&self, event: &LifecycleEvent) {
        self.0.lock().expect("lifecycle hub").retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// Where a session's actors report (cheap to clone; nothing when no one listens).
#[derive(Clone, Debug, Default)]
pub(crate) struct LifecycleSink(Option<Arc<SinkTargets>>);

#[derive(Debug)]
pub(crate) struct SinkTargets {
    session_id: String,
    own: Option<mpsc::UnboundedSender<LifecycleEvent>>,
    hub: Option<Arc<LifecycleHub>>,
}

impl LifecycleSink {
    pub fn new(
        session_id: &str,
        own: Option<mpsc::UnboundedSender<LifecycleEvent>>,
        hub: Option<Arc<LifecycleHub>>,
    ) -> Self {
        if own.is_none() && hub.is_none() {
            return Self(None);
        }
        Self(Some(Arc::new(SinkTargets { session_id: session_id.to_string(), own, hub })))
    }

    pub fn report(&self, kind: ActorKind, id: impl Into<String>, what: Lifecycle) {
        self.report_why(kind, id, what, None);
    }

    pub fn report_why(
        &self,
        kind: ActorKind,
        id: impl Into<String>,
        what: Lifecycle,
        reason: Option<String>,
    ) {
        let Some(targets) = &self.0 else { return };
        let session_id = targets.session_id.clone();
        let event = LifecycleEvent { session_id, kind, id: id.into(), what, reason };
        if let Some(hub) = &targets.hub {
            hub.send(&event);
        }
        if let Some(tx) = &targets.own {
            let _ = tx.send(event);
        }
    }

    /// A child `id` of `kind` failed (reported by its supervisor: `post_stop` does not run).
    pub fn failed(&self, kind: ActorKind, id: impl Into<String>, error: &dyn std::fmt::Display) {
        self.report_why(kind, id, Lifecycle::Failed, Some(error.to_string()));
    }
}
