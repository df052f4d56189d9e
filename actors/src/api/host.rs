//! The [`Host`]: a supervisor the host app creates and owns for its sessions.
//!
//! It is a ractor actor at the root of its sessions' trees (docs/ractor-notes.md §2.1 "HostRoot"), one
//! per `Host` value rather than one per process, so two hosts in one process (or one per test)
//! never see each other. A session started with [`SessionBuilder::host`] is spawned under it:
//! the host lists it while it runs, hears when it ends or fails, and streams the lifecycle
//! records of every actor of every one of its sessions. A session works the same without a
//! host.
//!
//! [`SessionBuilder::host`]: crate::SessionBuilder::host

use std::sync::Arc;

use dashmap::DashMap;
use ractor::ActorId;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::mpsc;

use crate::messages::handle::SessionHandle;
use crate::support::lifecycle_sink::{LifecycleHub, LifecycleSink};
use crate::types::error::SessionError;
use crate::types::lifecycle::{ActorKind, LifecycleEvent, MAX_UNREAD_LIFECYCLE};

/// Supervises sessions for the host app. Cheap to clone; the sessions are closed when the last
/// clone is dropped (or at [`Host::close_all`]).
///
/// ```
/// use colloquy_actors::{Host, Lifecycle, Session};
/// use colloquy_model::Agent;
/// use colloquy_llm::ScriptedLlm;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), colloquy_actors::SessionError> {
/// let host = Host::new().await?;
/// let mut lifecycle = host.lifecycle_events();
/// let session = Session::builder()
///     .host(&host)
///     .llm(ScriptedLlm::new([]))
///     .start(Agent::new("greeter", "Greet the user."))
///     .await?;
/// assert_eq!(host.sessions().len(), 1);
/// session.close().await?;
/// # tokio::task::yield_now().await;
/// assert!(host.sessions().is_empty());
/// // Children start before their parents: the agent's Activity comes first (its toolset
/// // starts at the agent's first tool call).
/// let first = lifecycle.recv().await.unwrap();
/// assert_eq!((first.id.as_str(), first.what), ("activity:greeter", Lifecycle::Started));
/// assert_eq!(first.session_id, session.id());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

struct HostInner {
    actor: ActorRef<HostMsg>,
    shared: Arc<HostShared>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        // Its post_stop ends the sessions still running (those with a store suspend).
        self.actor.stop(Some("host dropped".into()));
    }
}

#[derive(Default)]
pub(crate) struct HostShared {
    /// The registry, by session id: read from many tasks (the host app's, every session's
    /// end), so a concurrent map; listings sort it, since its order is not the registry's.
    sessions: DashMap<String, SessionHandle>,
    /// Session ids by their actor's id: a session's end finds its entry without a scan.
    ids: DashMap<ActorId, String>,
    /// The sessions with a store: a host that stops suspends them (docs/durability.md#suspend).
    kept: dashmap::DashSet<String>,
    pub hub: Arc<LifecycleHub>,
}

impl HostShared {
    fn remove(&self, id: &str) {
        self.kept.remove(id);
        if let Some((_, session)) = self.sessions.remove(id) {
            self.ids.remove(&session.actor_cell().get_id());
        }
    }

    /// The sessions, ordered by id.
    fn listed(&self) -> Vec<SessionHandle> {
        let mut sessions: Vec<SessionHandle> =
            self.sessions.iter().map(|entry| entry.value().clone()).collect();
        sessions.sort_by(|a, b| a.id().cmp(b.id()));
        sessions
    }
}

/// The host actor takes no messages: it only supervises.
pub(crate) enum HostMsg {}

struct HostActor;

impl Actor for HostActor {
    type Msg = HostMsg;
    type State = Arc<HostShared>;
    type Arguments = Arc<HostShared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        shared: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(shared)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        shared: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        stop_all(shared).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        shared: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The default would stop the host when one session ends.
        let (cell, failure) = match &event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            SupervisionEvent::ActorTerminated(cell, ..) => (cell, None),
            _ => return Ok(()),
        };
        let id = shared.ids.remove(&cell.get_id()).map(|(_, id)| id);
        if let Some(id) = id {
            shared.sessions.remove(&id);
            if let Some(message) = failure {
                tracing::error!(session = %id, "session failed: {message}");
                let sink = LifecycleSink::new(&id, None, Some(Arc::clone(&shared.hub)));
                sink.failed(ActorKind::Session, "session", &message);
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _shared: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {}
    }
}

async fn close_all(shared: &HostShared, reason: &str) {
    for session in shared.listed() {
        let _ = session.close_with_reason(reason).await;
        shared.remove(session.id());
    }
}

/// A host stopping: its sessions with a store suspend, so that they resume later (a process
/// that shuts down, as `colloquy serve --store` does, docs/decisions.md#serve-store); the
/// others close (`host stopped`).
async fn stop_all(shared: &HostShared) {
    for session in shared.listed() {
        let _ = match shared.kept.contains(session.id()) {
            true => session.suspend().await,
            false => session.close_with_reason("host stopped").await,
        };
        shared.remove(session.id());
    }
}

impl Host {
    /// Starts a host (its supervising actor).
    pub async fn new() -> Result<Self, SessionError> {
        let shared = Arc::new(HostShared::default());
        let (actor, _) = Actor::spawn(None, HostActor, Arc::clone(&shared))
            .await
            .map_err(|e| SessionError::Spawn(e.to_string()))?;
        Ok(Self { inner: Arc::new(HostInner { actor, shared }) })
    }

    /// The sessions running under this host, by id.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        let mut sessions = self.inner.shared.listed();
        sessions.retain(SessionHandle::is_running);
        sessions
    }

    /// The session with this id, if it runs under this host.
    pub fn session(&self, id: &str) -> Option<SessionHandle> {
        let session = self.inner.shared.sessions.get(id)?.value().clone();
        session.is_running().then_some(session)
    }

    /// Lifecycle records of every actor of every session of this host, from now on: started,
    /// stopped (with the reason when the actor knows it) and failed (with the panic message).
    /// Lossless while read; each call gives a new receiver. A receiver left with
    /// [`MAX_UNREAD_LIFECYCLE`] records unread gets a last [`Lifecycle::Overflowed`] record and
    /// ends (its memory would grow with every session of the host).
    ///
    /// [`Lifecycle::Overflowed`]: crate::Lifecycle::Overflowed
    pub fn lifecycle_events(&self) -> mpsc::Receiver<LifecycleEvent> {
        self.lifecycle_events_with_limit(MAX_UNREAD_LIFECYCLE)
    }

    /// [`lifecycle_events`](Self::lifecycle_events) that ends past `limit` unread records.
    pub fn lifecycle_events_with_limit(&self, limit: usize) -> mpsc::Receiver<LifecycleEvent> {
        self.inner.shared.hub.subscribe(limit)
    }

    /// Closes every session of this host with `reason` and waits for each to close.
    pub async fn close_all(&self, reason: &str) {
        close_all(&self.inner.shared, reason).await;
    }

    pub(crate) fn actor_cell(&self) -> ractor::ActorCell {
        self.inner.actor.get_cell()
    }

    pub(crate) fn hub(&self) -> Arc<LifecycleHub> {
        Arc::clone(&self.inner.shared.hub)
    }

    pub(crate) fn register(&self, session: &SessionHandle, kept: bool) {
        let shared = &self.inner.shared;
        if kept {
            shared.kept.insert(session.id().to_string());
        }
        shared.ids.insert(session.actor_cell().get_id(), session.id().to_string());
        shared.sessions.insert(session.id().to_string(), session.clone());
        // It may have ended (and its supervision event been handled) before this insert.
        if !session.is_running() {
            shared.remove(session.id());
        }
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("sessions", &self.inner.shared.sessions.len()).finish()
    }
}
