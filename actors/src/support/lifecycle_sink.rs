//! Where a session's actors report their lifecycle ([`LifecycleEvent`]s): the sink every actor
//! holds, the guard in each actor's state that reports `Started`, `Stopped` and a kill, and a
//! Host's hub that fans records out to its subscribers.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::types::lifecycle::{
    ActorKind, Lifecycle, LifecycleEvent, MAX_UNREAD_LIFECYCLE, lifecycle_channel,
};

/// The reason an actor reports when it was killed: its parent exited without stopping it, so
/// its `post_stop` never ran (its state's drop guard reports it).
pub(crate) const KILLED: &str = "killed";

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
    pub(crate) fn new(sink: LifecycleSink, kind: ActorKind, id: impl FnOnce() -> String) -> Self {
        let id = if sink.0.is_some() { id() } else { String::new() };
        Self { sink, kind, id, started: false, stopped: false, busy: false }
    }

    pub(crate) fn started(&mut self) {
        self.started = true;
        self.sink.report(self.kind, self.id.as_str(), Lifecycle::Started);
    }

    pub(crate) fn stopped(&mut self, reason: Option<String>) {
        if self.started && !self.stopped {
            self.sink.report_why(self.kind, self.id.as_str(), Lifecycle::Stopped, reason);
        }
        self.stopped = true;
    }

    /// A handler starts (`true`) or has returned (`false`).
    pub(crate) fn busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    /// The handler that was running when the state dropped panicked.
    pub(crate) fn failed_in_handler(&self) -> bool {
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
    pub(crate) fn subscribe(&self, limit: usize) -> mpsc::Receiver<LifecycleEvent> {
        let (tx, rx) = lifecycle_channel();
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((tx, limit.max(1)));
        rx
    }

    pub(crate) fn send(&self, event: &LifecycleEvent) {
        let mut subscribers = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
    pub(crate) fn new(
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

    pub(crate) fn report(&self, kind: ActorKind, id: impl Into<String>, what: Lifecycle) {
        self.report_why(kind, id, what, None);
    }

    pub(crate) fn report_why(
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
        let mut own = targets.own.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = own.as_ref()
            && !deliver(tx, event, MAX_UNREAD_LIFECYCLE)
        {
            *own = None;
        }
    }

    /// A child `id` of `kind` failed (reported by its supervisor: `post_stop` does not run).
    pub(crate) fn failed(
        &self,
        kind: ActorKind,
        id: impl Into<String>,
        error: &dyn std::fmt::Display,
    ) {
        self.report_why(kind, id, Lifecycle::Failed, Some(error.to_string()));
    }
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
