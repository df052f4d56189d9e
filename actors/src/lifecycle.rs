//! Actor lifecycle records for hosts and tests: every actor of a session reports when it has
//! started and when it has stopped gracefully. An actor that was killed (its parent ended
//! first, or it panicked) never reports `Stopped`, so a recorder shows it.

use std::sync::Arc;

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

/// Sends `event`, or past `limit` unread the overflow record; false once the stream has ended.
fn deliver(tx: &mpsc::Sender<LifecycleEvent>, event: LifecycleEvent, limit: usize) -> bool {
    if tx.max_capacity() - tx.capacity() < limit {
        return tx.try_send(event).is_ok();
    }
    tracing::warn!(session = %event.session_id, "a lifecycle subscriber stopped reading: its stream is closed");
    let reason = Some(format!("{limit} records unread: this stream ends"));
    let _ = tx.try_send(LifecycleEvent { what: Lifecycle::Overflowed, reason, ..event });
    false
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

/// The reason an actor reports when it was killed: its parent exited without stopping it, so
/// its `post_stop` never ran (its state's drop guard reports it).
pub const KILLED: &str = "killed";

/// Reports an actor's lifecycle from its state: `Started` from `post_start`, `Stopped` from
/// `post_stop`, and — when the state is dropped without `post_stop` because the actor was
/// killed with its parent — `Stopped` with reason [`KILLED`]. An actor that failed itself
/// (its handler panicked: `busy` is still set) stays silent: its supervisor reports `Failed`.
pub(crate) struct LifecycleGuard {
    sink: LifecycleSink,
    kind: ActorKind,
    id: String,
    started: bool,
    stopped: bool,
    busy: bool,
}

impl LifecycleGuard {
    /// `id` is only built when someone listens (a ToolCall guard is made for every call).
    pub fn new(sink: LifecycleSink, kind: ActorKind, id: impl FnOnce() -> String) -> Self {
        let id = if sink.0.is_some() { id() } else { String::new() };
        Self { sink, kind, id, started: false, stopped: false, busy: false }
    }

    pub fn started(&mut self) {
        self.started = true;
        self.sink.report(self.kind, self.id.as_str(), Lifecycle::Started);
    }

    pub fn stopped(&mut self, reason: Option<String>) {
        if self.started && !self.stopped {
            self.sink.report_why(self.kind, self.id.as_str(), Lifecycle::Stopped, reason);
        }
        self.stopped = true;
    }

    /// A handler starts (`true`) or has returned (`false`).
    pub fn busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    /// The handler that was running when the state dropped panicked.
    pub fn failed_in_handler(&self) -> bool {
        self.busy && !self.stopped
    }
}

impl Drop for LifecycleGuard {
    fn drop(&mut self) {
        if self.started && !self.stopped && !self.busy {
            let (kind, id) = (self.kind, std::mem::take(&mut self.id));
            self.sink.report_why(kind, id, Lifecycle::Stopped, Some(KILLED.into()));
        }
    }
}

/// Lifecycle subscribers shared by every session of a [`Host`](crate::Host): one added later
/// hears from sessions already running.
#[derive(Debug, Default)]
pub(crate) struct LifecycleHub(std::sync::Mutex<Vec<(mpsc::Sender<LifecycleEvent>, usize)>>);

impl LifecycleHub {
    /// A subscriber that may leave `limit` records unread.
    pub fn subscribe(&self, limit: usize) -> mpsc::Receiver<LifecycleEvent> {
        let (tx, rx) = lifecycle_channel();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push((tx, limit.max(1)));
        rx
    }

    pub fn send(&self, event: &LifecycleEvent) {
        let mut subscribers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.retain(|(tx, limit)| deliver(tx, event.clone(), *limit));
    }
}

/// Where a session's actors report (cheap to clone; nothing when no one listens).
#[derive(Clone, Debug, Default)]
pub(crate) struct LifecycleSink(Option<Arc<SinkTargets>>);

#[derive(Debug)]
pub(crate) struct SinkTargets {
    session_id: String,
    /// The session's own subscriber; taken once its stream has ended.
    own: std::sync::Mutex<Option<mpsc::Sender<LifecycleEvent>>>,
    hub: Option<Arc<LifecycleHub>>,
}

impl LifecycleSink {
    pub fn new(
        session_id: &str,
        own: Option<mpsc::Sender<LifecycleEvent>>,
        hub: Option<Arc<LifecycleHub>>,
    ) -> Self {
        if own.is_none() && hub.is_none() {
            return Self(None);
        }
        let own = std::sync::Mutex::new(own);
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
        let mut own = targets.own.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = own.as_ref()
            && !deliver(tx, event, MAX_UNREAD_LIFECYCLE)
        {
            *own = None;
        }
    }

    /// A child `id` of `kind` failed (reported by its supervisor: `post_stop` does not run).
    pub fn failed(&self, kind: ActorKind, id: impl Into<String>, error: &dyn std::fmt::Display) {
        self.report_why(kind, id, Lifecycle::Failed, Some(error.to_string()));
    }
}
