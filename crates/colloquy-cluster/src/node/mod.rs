//! A node: a process that runs sessions for hosts elsewhere. It registers agents by name,
//! announces itself every second, answers placement requests for itself, serves each of its
//! sessions' commands and publishes their events, and drains on request or SIGTERM
//! (docs/cluster.md#nodes).

mod announce;
mod drain;
mod place;
mod serve;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use colloquy_actors::{Host, SessionBuilder, SessionHandle};
use colloquy_core::Agent;
use colloquy_llm::Llm;
use tokio::sync::{Notify, OnceCell, watch};
use tokio::task::AbortHandle;

pub use drain::{DrainReport, NODE_DRAINING};

use crate::error::ClusterError;
use crate::names;
use crate::nats::{Backend, Server};
use crate::wire::{CLUSTER_VERSION, NodeInfo};

/// How often a node refreshes its entry (it also writes at once when its sessions change).
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Builds an agent for each new session.
type AgentFactory = Arc<dyn Fn() -> Agent + Send + Sync>;
/// The node's hook on each session's builder.
type SessionHook = Arc<dyn Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync>;
/// A node's load from its sessions.
type LoadFn = Arc<dyn Fn(&NodeLoad) -> f64 + Send + Sync>;

/// What a node's session hook learns of the session it configures.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionStart {
    /// The agent asked for.
    pub agent: String,
    /// What the host passed in [`StartOptions::metadata`](crate::StartOptions::metadata).
    pub metadata: serde_json::Value,
}

/// What a load function reads.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct NodeLoad {
    /// Live sessions on the node.
    pub sessions: usize,
    /// [`NodeBuilder::max_sessions`].
    pub max_sessions: usize,
}

/// Entry point: [`Node::builder`].
pub struct Node;

impl Node {
    /// A node with no agent yet, 100 sessions at most, a load threshold of 0.7 and a drain
    /// timeout of 30 minutes.
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            server: Server::new("nats://127.0.0.1:4222"),
            name: None,
            agents: BTreeMap::new(),
            llm: None,
            hook: None,
            max_sessions: 100,
            load_threshold: 0.7,
            load_fn: None,
            drain_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// Configures and starts a node.
///
/// Each session a host places here is built with [`Session::builder`](colloquy_actors::Session::builder)
/// under the node's own [`Host`]: first [`llm`](Self::llm)'s model, then the
/// [`session`](Self::session) hook (which may set anything else a `SessionBuilder` takes,
/// the model included), then the history the host sent, then started with a fresh agent from
/// the factory registered under the name the host asked for.
#[must_use]
pub struct NodeBuilder {
    server: Server,
    name: Option<String>,
    agents: BTreeMap<String, AgentFactory>,
    llm: Option<Arc<dyn Llm>>,
    hook: Option<SessionHook>,
    max_sessions: usize,
    load_threshold: f64,
    load_fn: Option<LoadFn>,
    drain_timeout: Duration,
}

impl NodeBuilder {
    /// The NATS server (default `nats://127.0.0.1:4222`).
    pub fn nats(mut self, url: impl Into<String>) -> Self {
        self.server.url = url.into();
        self
    }

    /// The token the NATS server asks for.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.server.token = Some(token.into());
        self
    }

    /// The node's name (required): unique among live nodes; letters, digits, `-` and `_`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Registers an agent: `factory` builds one for each session a host starts with `name`.
    pub fn agent(
        mut self,
        name: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        self.agents.insert(name.into(), Arc::new(factory));
        self
    }

    /// The model every session of this node talks to.
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.llm = Some(Arc::new(llm));
        self
    }

    /// Configures each session's builder (options, speech sink, userdata, the before-call
    /// hook, a model per session), knowing which agent and metadata the host asked for.
    pub fn session(
        mut self,
        hook: impl Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The most sessions the node holds at once (default 100).
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max.max(1);
        self
    }

    /// At or above this load the node takes no new session (default 0.7, as LiveKit
    /// Agents' `load_threshold`).
    pub fn load_threshold(mut self, threshold: f64) -> Self {
        self.load_threshold = threshold;
        self
    }

    /// How the node measures its load, 0.0 idle to 1.0 full (default: live sessions over
    /// [`max_sessions`](Self::max_sessions), as LiveKit Agents' `load_fnc`). Called on every
    /// announcement and placement request: keep it cheap.
    pub fn load_fn(mut self, load: impl Fn(&NodeLoad) -> f64 + Send + Sync + 'static) -> Self {
        self.load_fn = Some(Arc::new(load));
        self
    }

    /// How long a drain waits for the sessions to end by themselves before it closes them
    /// with reason `node_draining` (default 30 minutes, as LiveKit Agents').
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Connects, announces the node and starts serving; returns once hosts can place
    /// sessions here. Fails if the name is invalid or held by another live node, if no agent is
    /// registered, or if NATS cannot be reached or set up.
    pub async fn start(self) -> Result<NodeHandle, ClusterError> {
        let name = self.name.clone().unwrap_or_default();
        if !names::is_valid_name(&name) {
            return Err(ClusterError::InvalidName(name));
        }
        if let Some(bad) = self.agents.keys().find(|a| !names::is_valid_name(a)) {
            return Err(ClusterError::InvalidName(bad.clone()));
        }
        if self.agents.is_empty() {
            return Err(ClusterError::Config(format!(
                "node `{name}` registers no agent: call NodeBuilder::agent"
            )));
        }
        let backend = Backend::open(&self.server, &format!("colloquy-node-{name}")).await?;
        let host = Host::new().await.map_err(|e| ClusterError::Config(e.to_string()))?;
        let (count, _) = watch::channel(0);
        let shared = Arc::new(NodeShared {
            name,
            boot_id: uuid::Uuid::new_v4().to_string(),
            backend,
            config: self,
            host,
            sessions: Mutex::new(BTreeMap::new()),
            draining: AtomicBool::new(false),
            changed: Notify::new(),
            count,
            drain_requested: Notify::new(),
            drained: OnceCell::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let revision = announce::register(&shared).await?;
        let tasks = [
            tokio::spawn(announce::run(Arc::clone(&shared), revision)).abort_handle(),
            place::serve(&shared).await?,
            drain::serve(&shared).await?,
        ];
        shared.lock_tasks().extend(tasks);
        Ok(NodeHandle { shared: Arc::new(Stopper(shared)) })
    }

    /// [`start`](Self::start)s the node and runs it until it has drained: after SIGTERM or
    /// SIGINT, or a drain request from a host ([`Cluster::drain_node`](crate::Cluster::drain_node)).
    pub async fn run(self) -> Result<DrainReport, ClusterError> {
        let node = self.start().await?;
        node.drained_on_signal().await
    }
}

/// A running node. Cheap to clone; the node stops (its tasks end, its sessions close, its
/// entry expires within 3 s) when the last clone is dropped without a drain.
#[derive(Clone)]
pub struct NodeHandle {
    shared: Arc<Stopper>,
}

/// Stops the node's tasks when the last handle goes.
struct Stopper(Arc<NodeShared>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.stop_tasks();
    }
}

impl NodeHandle {
    fn shared(&self) -> &Arc<NodeShared> {
        &self.shared.0
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// The node's announcement as it stands now.
    pub fn info(&self) -> NodeInfo {
        self.shared().info()
    }

    /// The node's live sessions, by id: the local handles.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        self.shared().lock_sessions().values().map(|s| s.handle.clone()).collect()
    }

    /// Drains the node: it takes no new session, waits up to its drain timeout for its
    /// sessions to end, closes the rest with reason `node_draining`, publishes their last
    /// events, leaves the nodes bucket and stops. Every caller gets the same report.
    pub async fn drain(&self) -> DrainReport {
        drain::drain(self.shared()).await
    }

    /// Waits for SIGTERM, SIGINT or a drain request, then drains.
    async fn drained_on_signal(&self) -> Result<DrainReport, ClusterError> {
        drain::on_signal(self.shared()).await?;
        Ok(self.drain().await)
    }
}

/// What a node's tasks share.
pub(crate) struct NodeShared {
    pub(crate) name: String,
    pub(crate) boot_id: String,
    pub(crate) backend: Backend,
    pub(crate) config: NodeBuilder,
    pub(crate) host: Host,
    /// Sessions from their start until their last event is published.
    sessions: Mutex<BTreeMap<String, LiveSession>>,
    pub(crate) draining: AtomicBool,
    /// Wakes the announcer: the sessions or the draining flag changed.
    pub(crate) changed: Notify,
    /// The number of sessions, for a drain to wait on.
    pub(crate) count: watch::Sender<usize>,
    pub(crate) drain_requested: Notify,
    pub(crate) drained: OnceCell<DrainReport>,
    /// The node's own tasks (announcer, servers), ended by a drain or the last handle.
    tasks: Mutex<Vec<AbortHandle>>,
}

/// A session of the node and the tasks that serve it.
pub(crate) struct LiveSession {
    pub(crate) handle: SessionHandle,
    pub(crate) tasks: Vec<AbortHandle>,
}

impl NodeShared {
    pub(crate) fn lock_sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, LiveSession>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<AbortHandle>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
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
            agents: self.config.agents.keys().cloned().collect(),
            sessions,
            max_sessions: self.config.max_sessions,
            load: self.load(sessions),
            load_threshold: self.config.load_threshold,
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: CLUSTER_VERSION,
            draining: self.is_draining(),
        }
    }

    /// Registers a session that just started, with the tasks serving it.
    pub(crate) fn add_session(&self, handle: SessionHandle, tasks: Vec<AbortHandle>) {
        let mut sessions = self.lock_sessions();
        sessions.insert(handle.id().to_owned(), LiveSession { handle, tasks });
        self.count.send_replace(sessions.len());
        drop(sessions);
        self.changed.notify_one();
    }

    /// Forgets a session whose last event is published (its command server ends by itself).
    pub(crate) fn remove_session(&self, id: &str) {
        let mut sessions = self.lock_sessions();
        sessions.remove(id);
        self.count.send_replace(sessions.len());
        drop(sessions);
        self.changed.notify_one();
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
