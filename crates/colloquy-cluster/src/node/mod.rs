//! A node: a process that runs sessions for hosts elsewhere. It registers agents by name,
//! announces itself every second, answers placement requests for itself, serves each of its
//! sessions' commands and publishes their events, and drains on request or SIGTERM
//! (docs/cluster.md#nodes).

mod announce;
mod drain;
mod fence;
mod handoff;
mod hosts;
mod place;
mod serve;
mod shared;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy_actors::{Host, SessionBuilder, SessionHandle};
use colloquy_llm::Llm;
use colloquy_model::{Agent, EventFilter, EventType};
use tokio::sync::{Notify, OnceCell, watch};

pub use drain::NODE_DRAINING;
pub use fence::NODE_LOST;
pub use hosts::HOST_LOST;
pub use shared::{
    Agents, DrainReport, EVENT_TIMEOUT, EVENTS_UNSTORED, HEARTBEAT, MAX_IN_FLIGHT, NodeLoad,
    OnDrain, SessionStart,
};

use crate::error::ClusterError;
use crate::journal_store::JetStreamStore;
use crate::names;
use crate::nats::{Backend, NatsConfig};
use crate::wire::NodeInfo;
use shared::{Journals, NodeConfig, NodeShared};

/// Entry point: [`Node::builder`].
pub struct Node;

impl Node {
    /// A node with no agent yet, 100 sessions at most, a load threshold of 0.7, a drain
    /// timeout of 30 minutes, lost 3 s after its last heartbeat, closing a session 10 s after
    /// its hosts went silent, publishing every event but
    /// the agent's text deltas, running 32 commands of a session at once at most, giving a
    /// session up when one of its events cannot be stored in 30 s.
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            server: NatsConfig::new("nats://127.0.0.1:4222"),
            name: None,
            config: NodeConfig {
                agents: Agents::new(),
                events: EventFilter::DEFAULT,
                max_in_flight: MAX_IN_FLIGHT,
                event_timeout: EVENT_TIMEOUT,
                max_sessions: 100,
                load_threshold: 0.7,
                load_fn: None,
                drain_timeout: Duration::from_secs(30 * 60),
                lost_after: names::NODE_TTL,
                host_lost_after: names::HOST_LOST_AFTER,
                store: None,
                journals: Journals::OnServer,
                on_drain: OnDrain::Move,
            },
        }
    }
}

/// Configures and starts a node.
///
/// Each session a host places here is built with [`Session::builder`](colloquy_actors::Session::builder)
/// under the node's own [`Host`]: first [`llm`](Self::llm)'s model, then the
/// [`session`](Self::session) hook (which may set anything else a `SessionBuilder` takes,
/// the model included), then the history the host sent, then started with a fresh agent from
/// the factory registered under the name the host asked for: the order of every host of
/// agents by name ([`Agents::start`]).
#[must_use]
pub struct NodeBuilder {
    server: NatsConfig,
    name: Option<String>,
    config: NodeConfig,
}

impl NodeBuilder {
    /// The NATS server (default `nats://127.0.0.1:4222`): a URL, or a [`NatsConfig`] with
    /// credentials and TLS. A [`token`](Self::token) set before is kept only with a URL.
    pub fn nats(mut self, nats: impl Into<NatsConfig>) -> Self {
        self.server = self.server.replaced_by(nats.into());
        self
    }

    /// The token the NATS server asks for.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.server = self.server.token(token);
        self
    }

    /// The node's name (required): unique among live nodes; letters, digits, `-` and `_`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Registers an agent: `factory` builds one for each session a host starts with `name`
    /// (a name registered again replaces the earlier factory): [`Agents::agent`].
    pub fn agent(
        mut self,
        name: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        self.config.agents = self.config.agents.agent(name, factory);
        self
    }

    /// The model every session of this node talks to: [`Agents::llm`].
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.config.agents = self.config.agents.llm(llm);
        self
    }

    /// Configures each session's builder (options, speech sink, userdata, the before-call
    /// hook, a model per session), knowing which agent and metadata the host asked for:
    /// [`Agents::session`].
    pub fn session(
        mut self,
        hook: impl Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync + 'static,
    ) -> Self {
        self.config.agents = self.config.agents.session(hook);
        self
    }

    /// Called with each session the node starts, once it has started and before the host
    /// that asked for it is answered, so nothing the host does precedes it: to watch the
    /// session (metrics, logs) from its first event. Keep it quick: placements wait on it
    /// ([`Agents::on_session`]).
    pub fn on_session(
        mut self,
        observer: impl Fn(&SessionHandle, &SessionStart) + Send + Sync + 'static,
    ) -> Self {
        self.config.agents = self.config.agents.on_session(observer);
        self
    }

    /// The agents, their model and both hooks at once: replaces what
    /// [`agent`](Self::agent), [`llm`](Self::llm), [`session`](Self::session) and
    /// [`on_session`](Self::on_session) set before.
    pub fn agents(mut self, agents: Agents) -> Self {
        self.config.agents = agents;
        self
    }

    /// The events each session publishes to the events stream (default
    /// [`EventFilter::DEFAULT`]: all but the agent's text as it streams, `x_agent_text`).
    /// `EventFilter::ALL` lets a host show the reply as it streams, at the cost of an event
    /// stored per text delta. `session_closed` is always published: a session's stream ends
    /// with it.
    pub fn events(mut self, filter: EventFilter) -> Self {
        self.config.events = filter.with(EventType::SessionClosed);
        self
    }

    /// The most commands of one session the node runs at once (default [`MAX_IN_FLIGHT`],
    /// at least 1): each runs in a task of its own, and a host in a loop could otherwise
    /// start thousands. A command beyond it is answered at once with
    /// [`ErrorKind::Busy`](crate::ErrorKind::Busy).
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.config.max_in_flight = max.max(1);
        self
    }

    /// How long the node keeps trying to store one event of a session (default
    /// [`EVENT_TIMEOUT`], 30 s) while NATS is away or refuses it. Past it the node closes the
    /// session with reason [`EVENTS_UNSTORED`] and drops its remaining events: its hosts stop
    /// hearing from it either way, and a session nobody can follow should not run on.
    pub fn event_timeout(mut self, timeout: Duration) -> Self {
        self.config.event_timeout = timeout;
        self
    }

    /// The most sessions the node holds at once (default 100).
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.config.max_sessions = max.max(1);
        self
    }

    /// At or above this load the node takes no new session (default 0.7, as LiveKit
    /// Agents' `load_threshold`).
    pub fn load_threshold(mut self, threshold: f64) -> Self {
        self.config.load_threshold = threshold;
        self
    }

    /// How the node measures its load, 0.0 idle to 1.0 full (default: live sessions over
    /// [`max_sessions`](Self::max_sessions), as LiveKit Agents' `load_fnc`). Called on every
    /// announcement and placement request: keep it cheap.
    pub fn load_fn(mut self, load: impl Fn(&NodeLoad) -> f64 + Send + Sync + 'static) -> Self {
        self.config.load_fn = Some(Arc::new(load));
        self
    }

    /// How long a drain waits: for each session to be quiet before it is handed to another
    /// node ([`OnDrain::Move`]; past it, its running calls are in doubt), or to end by itself
    /// before it is closed with reason `node_draining` ([`OnDrain::Close`]). Default 30
    /// minutes, as LiveKit Agents'.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// What a drain does with the node's sessions (default [`OnDrain::Move`]: each is handed
    /// to another durable node, so a rolling deploy closes no conversation;
    /// docs/cluster.md#drain-moves).
    pub fn on_drain(mut self, on_drain: OnDrain) -> Self {
        self.config.on_drain = on_drain;
        self
    }

    /// How long after its last heartbeat the node is lost (default 3 s, at least 1 s): the
    /// `max_age` of the nodes bucket if this node creates it. An existing bucket keeps its own,
    /// and that is what counts, here too: the node heartbeats six times per `max_age` (at
    /// most every second) and stops its sessions by itself if none is stored for five sixths
    /// of it (docs/cluster.md#fencing). A NATS outage of up to about two thirds of it, less a
    /// fifth of a second, costs no session (docs/cluster.md#outage).
    pub fn lost_after(mut self, lost_after: Duration) -> Self {
        self.config.lost_after = lost_after;
        self
    }

    /// How long the node keeps a session once every host that holds it (the host that started
    /// it, and any that sent it a command) has gone silent: default [`HOST_LOST_AFTER`]
    /// (10 s), at least [`MIN_HOST_LOST_AFTER`] (3 s). Hosts beat every second; past this the
    /// node closes the session with reason [`HOST_LOST`], so a host that dies does not leave
    /// its sessions holding the node's room for ever (docs/cluster.md#host-lease).
    ///
    /// [`HOST_LOST_AFTER`]: crate::HOST_LOST_AFTER
    /// [`MIN_HOST_LOST_AFTER`]: crate::MIN_HOST_LOST_AFTER
    pub fn host_lost_after(mut self, after: Duration) -> Self {
        self.config.host_lost_after = after;
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
        if let Some(bad) = self.config.agents.names().find(|a| !names::is_valid_name(a)) {
            return Err(ClusterError::InvalidName(bad.to_owned()));
        }
        if self.config.host_lost_after < names::MIN_HOST_LOST_AFTER {
            return Err(ClusterError::Config(format!(
                "host_lost_after is {:?}: it must be at least {:?}",
                self.config.host_lost_after,
                names::MIN_HOST_LOST_AFTER
            )));
        }
        if self.config.agents.is_empty() {
            return Err(ClusterError::Config(format!(
                "node `{name}` registers no agent: call NodeBuilder::agent"
            )));
        }
        let client = format!("colloquy-node-{name}");
        let backend = Backend::open(&self.server, &client, self.config.lost_after).await?;
        let mut config = self.config;
        config.store = match &config.journals {
            Journals::OnServer => {
                let server = self.server.clone();
                let opened = tokio::task::spawn_blocking(move || JetStreamStore::connect(server));
                let store = opened.await.map_err(|e| ClusterError::Config(e.to_string()))??;
                Some(Arc::new(store) as Arc<dyn colloquy_store::SessionStore>)
            }
            Journals::Store(store) => Some(Arc::clone(store)),
            Journals::Off => None,
        };
        let host = Host::new().await.map_err(|e| ClusterError::Config(e.to_string()))?;
        let (count, _) = watch::channel(0);
        let shared = Arc::new(NodeShared {
            name,
            boot_id: uuid::Uuid::new_v4().to_string(),
            backend,
            config,
            host,
            sessions: Mutex::new(BTreeMap::new()),
            draining: AtomicBool::new(false),
            changed: Notify::new(),
            count,
            drain_requested: Notify::new(),
            drained: OnceCell::new(),
            tasks: Mutex::new(Vec::new()),
            lease: AtomicU64::new(0),
            fenced: AtomicBool::new(false),
            renewed: watch::channel(tokio::time::Instant::now()).0,
            paused: AtomicBool::new(false),
            hosts: Mutex::new(HashMap::new()),
        });
        let revision = announce::register(&shared).await?;
        let tasks = [
            tokio::spawn(announce::run(Arc::clone(&shared), revision)).abort_handle(),
            tokio::spawn(fence::watch(Arc::clone(&shared))).abort_handle(),
            place::serve(&shared).await?,
            drain::serve(&shared).await?,
            hosts::watch(&shared).await?,
        ];
        shared.lock_tasks().extend(tasks);
        Ok(NodeHandle { shared: Arc::new(Stopper(shared)) })
    }

    /// Keeps every session's journal in `store` rather than on the cluster's NATS server: a
    /// store every node of the cluster reaches, so that another node can resume a session of
    /// this one when it is lost (docs/cluster.md#moves). Journals in a store of the host's own
    /// are kept as that store keeps them (the node deletes none).
    pub fn store(mut self, store: Arc<dyn colloquy_store::SessionStore>) -> Self {
        self.config.journals = Journals::Store(store);
        self
    }

    /// Whether the node journals its sessions (default `true`): each session's journal on the
    /// cluster's NATS server (a [`JetStreamStore`](crate::JetStreamStore) the node opens at
    /// start, on the same connection settings), so that when the node is lost its sessions
    /// move to another durable node (docs/cluster.md#moves); a session's journal is deleted
    /// once it has closed for good. `false` keeps no journal: the node's sessions are lost
    /// with it, and it cannot resume others' (it announces itself not `durable`).
    pub fn durable(mut self, durable: bool) -> Self {
        self.config.journals = match durable {
            true => Journals::OnServer,
            false => Journals::Off,
        };
        self
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
        self.shared().session_handles()
    }

    /// Stops (`true`) or resumes the node's heartbeats, as a node cut off from NATS would
    /// stop them: for tests of node loss. Its entry expires, it stops its sessions by itself
    /// (docs/cluster.md#fencing), and once resumed it registers again under a new lease.
    #[doc(hidden)]
    pub fn pause_heartbeats(&self, paused: bool) {
        self.shared().paused.store(paused, Ordering::Release);
        self.shared().changed.notify_one();
    }

    /// Drains the node: it takes no new session, waits up to its drain timeout for its
    /// sessions to end, closes the rest with reason `node_draining`, publishes their last
    /// events, leaves the nodes bucket and stops. Every caller gets the same report.
    pub async fn drain(&self) -> DrainReport {
        drain::drain(self.shared()).await
    }

    /// Resolves once a host has asked the node to drain
    /// ([`Cluster::drain_node`](crate::Cluster::drain_node)); the node has begun draining by
    /// itself then. For one waiter at a time (not with [`NodeBuilder::run`], which waits on
    /// the same request).
    pub async fn drain_requested(&self) {
        self.shared().drain_requested.notified().await;
    }

    /// Waits for SIGTERM, SIGINT or a drain request, then drains.
    async fn drained_on_signal(&self) -> Result<DrainReport, ClusterError> {
        drain::on_signal(self.shared()).await?;
        Ok(self.drain().await)
    }
}
