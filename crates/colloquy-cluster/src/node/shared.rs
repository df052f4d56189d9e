//! What a node's tasks share: its identity and connection, its configuration, its sessions
//! (from their start until their last event is stored), the draining flag, and the tasks to
//! end when it stops.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use colloquy_actors::{Host, SessionHandle};
use colloquy_model::EventFilter;
use futures_util::StreamExt;
use tokio::sync::{Notify, OnceCell, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::ClusterError;
use crate::nats::Backend;
use crate::wire::{CLUSTER_VERSION, NodeInfo};

/// How often a node refreshes its entry at most: it writes six times per `max_age` of the
/// nodes bucket if that is more often (every half second with the default 3 s), and also at
/// once when its sessions change or its connection to NATS comes back.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

pub use colloquy_edge::{Agents, SessionStart};
/// A node's load from its sessions.
pub(crate) type LoadFn = Arc<dyn Fn(&NodeLoad) -> f64 + Send + Sync>;

/// The most commands of one session a node runs at once by default
/// ([`NodeBuilder::max_in_flight`](crate::NodeBuilder::max_in_flight)).
pub const MAX_IN_FLIGHT: usize = 32;

/// How long a node keeps trying to store one event of a session by default
/// ([`NodeBuilder::event_timeout`](crate::NodeBuilder::event_timeout)).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The reason a session closes with when its events cannot be stored
/// (docs/cluster.md#failure).
pub const EVENTS_UNSTORED: &str = colloquy_model::CloseReason::EventsUnstored.name();

/// What a load function reads.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct NodeLoad {
    /// Live sessions on the node.
    pub sessions: usize,
    /// [`NodeBuilder::max_sessions`](crate::NodeBuilder::max_sessions).
    pub max_sessions: usize,
}

/// What a drain did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Sessions that ended by themselves while the node drained.
    pub ended: usize,
    /// Sessions still running at the drain timeout, closed with reason `node_draining`.
    pub closed: usize,
    /// Sessions handed over to another node ([`OnDrain::Move`]).
    pub moved: usize,
}

/// What a draining node does with its sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnDrain {
    /// Hands each to another durable node that serves its agent, once it is quiet (no reply
    /// under way, no call running) or at the drain timeout (its running calls then in doubt,
    /// settled by their tools' policies), so a rolling deploy closes no conversation
    /// (docs/cluster.md#drain-moves). The default; a node without journals, or a session no
    /// other node can take, falls back to [`Close`](Self::Close).
    #[default]
    Move,
    /// Waits up to the drain timeout for each session to end by itself, then closes it with
    /// reason `node_draining`.
    Close,
}

/// How the node runs its sessions, as its builder set it.
pub(crate) struct NodeConfig {
    /// The agents by name, their model and the hooks around each start.
    pub(crate) agents: Agents,
    /// The events each session publishes (`session_closed` always among them).
    pub(crate) events: EventFilter,
    /// The most commands of one session the node runs at once.
    pub(crate) max_in_flight: usize,
    /// How long one event may take to be stored before the session is given up.
    pub(crate) event_timeout: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) load_threshold: f64,
    pub(crate) load_fn: Option<LoadFn>,
    pub(crate) drain_timeout: Duration,
    /// Asked for; the nodes bucket's `max_age` is what counts (`Backend::lost_after`).
    pub(crate) lost_after: Duration,
    /// How long a session outlives the last beat of every host that holds it.
    pub(crate) host_lost_after: Duration,
    /// Where its sessions' journals go, if anywhere (docs/cluster.md#journals): resolved by
    /// `NodeBuilder::start` from `journals`.
    pub(crate) store: Option<Arc<dyn colloquy_store::SessionStore>>,
    /// What the builder was asked for.
    pub(crate) journals: Journals,
    /// What a drain does with the sessions.
    pub(crate) on_drain: OnDrain,
}

/// Where a node keeps its sessions' journals.
#[derive(Clone)]
pub(crate) enum Journals {
    /// On the cluster's NATS server (a `JetStreamStore` the node opens), each deleted once its
    /// session has closed for good: the default.
    OnServer,
    /// In the host's own store, kept as that store keeps them.
    Store(Arc<dyn colloquy_store::SessionStore>),
    /// Nowhere: the node's sessions are lost with it.
    Off,
}

impl NodeConfig {
    /// Whether the journal of a session that closed for good is deleted: only from the store
    /// the node opened itself (a host's own store keeps what it keeps).
    pub(crate) fn forgets_closed(&self) -> bool {
        matches!(self.journals, Journals::OnServer)
    }
}

/// What a node's tasks share.
pub(crate) struct NodeShared {
    pub(crate) name: String,
    pub(crate) boot_id: String,
    pub(crate) backend: Backend,
    pub(crate) config: NodeConfig,
    pub(crate) host: Host,
    /// Sessions from their start until their last event is published.
    pub(crate) sessions: Mutex<BTreeMap<String, LiveSession>>,
    pub(crate) draining: AtomicBool,
    /// Wakes the announcer: the sessions or the draining flag changed.
    pub(crate) changed: Notify,
    /// The number of sessions, for a drain to wait on.
    pub(crate) count: watch::Sender<usize>,
    pub(crate) drain_requested: Notify,
    pub(crate) drained: OnceCell<DrainReport>,
    /// The node's own tasks (announcer, servers), ended by a drain or the last handle.
    pub(crate) tasks: Mutex<Vec<AbortHandle>>,
    /// The revision of the entry the node registered with (docs/cluster.md#failure).
    pub(crate) lease: AtomicU64,
    /// Set when the node gives its lease up (its sessions closed with `node_lost`), cleared
    /// by the next entry it writes: meanwhile it takes no session.
    pub(crate) fenced: AtomicBool,
    /// When the node sent the last write of its entry that was stored: the entry lives at
    /// least until then plus the bucket's `max_age`.
    pub(crate) renewed: watch::Sender<Instant>,
    /// Heartbeats stopped by `NodeHandle::pause_heartbeats`.
    pub(crate) paused: AtomicBool,
    /// When each host that holds a session here was last heard from (`hosts.rs`).
    pub(crate) hosts: Mutex<HashMap<String, Instant>>,
}

/// A session of the node and the tasks that serve it.
pub(crate) struct LiveSession {
    pub(crate) handle: SessionHandle,
    pub(crate) tasks: Vec<AbortHandle>,
    /// The node's lease when the session started, as its record says.
    pub(crate) lease: u64,
    /// The hosts that started or commanded it: it is closed once all are silent.
    pub(crate) holders: BTreeSet<String>,
    /// Its agent, as its record names it.
    pub(crate) agent: String,
    /// Set when a drain hands it to another node: its publisher then keeps its record and
    /// journal and leaves its suspend unpublished (`handoff.rs`).
    pub(crate) moving: Arc<AtomicBool>,
    /// Becomes true once its publisher has stored its last event.
    pub(crate) published: watch::Receiver<bool>,
}

/// A session's serving tasks and what they share with the node's record of it.
pub(crate) struct Served {
    /// Its command server, then its publisher.
    pub(crate) tasks: Vec<AbortHandle>,
    /// The node's lease when the session started.
    pub(crate) lease: u64,
    pub(crate) agent: String,
    pub(crate) moving: Arc<AtomicBool>,
    pub(crate) published: watch::Receiver<bool>,
}

impl NodeShared {
    pub(crate) fn lock_sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, LiveSession>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock_hosts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<AbortHandle>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    pub(crate) fn lease(&self) -> u64 {
        self.lease.load(Ordering::Acquire)
    }

    /// Whether the node may still act for its sessions: not fenced, and its last stored write
    /// recent enough that its entry cannot have expired. Checked before each event published
    /// and each command run, so a node resuming from a stall stops there even if its fence's
    /// timer has not run yet (docs/cluster.md#fencing).
    pub(crate) fn holds_lease(&self) -> bool {
        !self.is_fenced() && Instant::now() < *self.renewed.borrow() + self.fence_after()
    }

    /// How often the node writes its entry: six times per `max_age`, at most every second.
    /// An outage that starts just before a beat costs the lease this much sooner, so it is
    /// kept short against the fence's margin (docs/cluster.md#failure).
    pub(crate) fn heartbeat(&self) -> Duration {
        HEARTBEAT.min(self.backend.lost_after / 6)
    }

    /// How long after its last stored write the node gives its lease up by itself: a sixth
    /// of `max_age` before the entry can expire, so it stops before any host declares it lost.
    pub(crate) fn fence_after(&self) -> Duration {
        let lost_after = self.backend.lost_after;
        lost_after - lost_after / 6
    }

    /// The load now, from the load function.
    pub(crate) fn load(&self, sessions: usize) -> f64 {
        let load = NodeLoad { sessions, max_sessions: self.config.max_sessions };
        match &self.config.load_fn {
            Some(f) => f(&load),
            None => sessions as f64 / self.config.max_sessions as f64,
        }
    }

    pub(crate) fn info(&self) -> NodeInfo {
        let sessions = self.lock_sessions().len();
        NodeInfo {
            name: self.name.clone(),
            boot_id: self.boot_id.clone(),
            lease: self.lease(),
            // In name order, as hosts list them, whatever order the node registered them in.
            agents: self
                .config
                .agents
                .names()
                .map(str::to_owned)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            sessions,
            max_sessions: self.config.max_sessions,
            load: self.load(sessions),
            load_threshold: self.config.load_threshold,
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: CLUSTER_VERSION,
            draining: self.is_draining(),
            durable: self.config.store.is_some(),
        }
    }

    /// The live sessions' handles.
    pub(crate) fn session_handles(&self) -> Vec<SessionHandle> {
        self.lock_sessions().values().map(|s| s.handle.clone()).collect()
    }

    /// Registers a session that just started, with the tasks serving it.
    pub(crate) fn add_session(&self, handle: SessionHandle, served: Served) {
        let mut sessions = self.lock_sessions();
        let Served { tasks, lease, agent, moving, published } = served;
        let holders = BTreeSet::new();
        let live = LiveSession { handle, tasks, lease, holders, agent, moving, published };
        sessions.insert(live.handle.id().to_owned(), live);
        self.count.send_replace(sessions.len());
        drop(sessions);
        self.changed.notify_one();
    }

    /// Forgets a session whose last event is published (its command server ends by itself);
    /// returns it if it was still there.
    pub(crate) fn remove_session(&self, id: &str) -> Option<LiveSession> {
        let mut sessions = self.lock_sessions();
        let live = sessions.remove(id);
        self.count.send_replace(sessions.len());
        drop(sessions);
        self.changed.notify_one();
        live
    }

    /// Forgets every session (a fence stops them).
    pub(crate) fn take_sessions(&self) -> Vec<LiveSession> {
        let mut sessions = self.lock_sessions();
        let taken = std::mem::take(&mut *sessions);
        self.count.send_replace(0);
        drop(sessions);
        self.changed.notify_one();
        taken.into_values().collect()
    }

    /// Subscribes to `subject` and hands each message to `handle`, one at a time, in a task
    /// the node ends when it stops.
    pub(crate) async fn serve<F, Fut>(
        self: &Arc<Self>,
        subject: String,
        handle: F,
    ) -> Result<AbortHandle, ClusterError>
    where
        F: Fn(Arc<Self>, async_nats::Message) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let client = &self.backend.client;
        let mut messages = client.subscribe(subject).await.map_err(ClusterError::nats)?;
        let shared = Arc::clone(self);
        let task = tokio::spawn(async move {
            while let Some(message) = messages.next().await {
                handle(Arc::clone(&shared), message).await;
            }
        });
        Ok(task.abort_handle())
    }

    /// Answers a request (nothing if it asked for no answer).
    pub(crate) async fn answer(&self, to: Option<async_nats::Subject>, body: Vec<u8>) {
        let Some(to) = to else { return };
        if let Err(e) = self.backend.client.publish(to, body.into()).await {
            tracing::warn!(node = %self.name, error = %e, "cannot answer a request");
        }
    }

    /// Ends the node's own tasks and every session's.
    pub(crate) fn stop_tasks(&self) {
        for task in self.lock_tasks().drain(..) {
            task.abort();
        }
        for live in self.lock_sessions().values() {
            for task in &live.tasks {
                task.abort();
            }
        }
    }
}
