//! Where sessions run: the seam between the server and the sessions it serves. The server
//! needs three things of a backend — the agents it offers, a way to start a session (its
//! lossless event stream from its first event included), and a way to run a protocol request
//! on a session — so a backend over a cluster places sessions on nodes and runs requests there,
//! while [`LocalBackend`] runs them in this process.

use std::collections::BTreeSet;
use std::sync::Arc;

use colloquy_actors::{Session, SessionBuilder, SessionHandle};
use colloquy_edge::execute;
use colloquy_edge::hosting::{Hosted, StartError};
use colloquy_llm::Llm;
use colloquy_model::{Agent, EventFilter, SessionEvent};
use colloquy_ops::Metrics;
use colloquy_protocol::{AgentList, ErrorCode, Reply, Request, ServerError, StartOptions};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};

/// Starts sessions and lists the agents it can start.
pub trait Backend: Send + Sync + 'static {
    /// The agents a client may start, and the default one.
    fn agents(&self) -> BoxFuture<'static, Result<AgentList, ServerError>>;

    /// Starts a session of `agent` (a name from [`agents`](Self::agents)); an unknown name is
    /// [`ErrorCode::UnknownAgent`], a failed start [`ErrorCode::StartFailed`].
    fn start(
        &self,
        agent: String,
        options: StartOptions,
    ) -> BoxFuture<'static, Result<StartedSession, ServerError>>;

    /// The agents a start's history may hand off to (the names [`agents`](Self::agents)
    /// lists, and their agents' own ids, which a history's handoffs carry); `None`, the
    /// default, where the backend cannot tell: handoffs in a history are then not checked.
    fn known_agents(&self) -> Option<BTreeSet<String>> {
        None
    }
}

/// A session a backend started.
pub struct StartedSession {
    /// Its id (unique among the server's live sessions).
    pub session_id: String,
    /// The agent it started with.
    pub agent: String,
    /// The cluster node that runs it, if any.
    pub node: Option<String>,
    /// How to run requests on it.
    pub driver: Arc<dyn SessionDriver>,
    /// Every event of the session from its first, in order (the agent's text included), and
    /// where some were lost on the way, how many; it ends after `session_closed`.
    pub events: BoxStream<'static, StreamItem>,
}

/// One item of a session's event stream, as a backend hands it to the server.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamItem {
    /// The session's next event.
    Event(SessionEvent),
    /// The next `count` events were lost on the way (a cluster stream's retention dropped
    /// them): their numbers are skipped, and clients get a `gap` error frame for them.
    Lost {
        /// How many.
        count: u64,
    },
}

impl std::fmt::Debug for StartedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartedSession")
            .field("session_id", &self.session_id)
            .field("agent", &self.agent)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Runs protocol requests on one session, where it lives.
pub trait SessionDriver: Send + Sync + 'static {
    /// Runs `request` and answers it, as `colloquy_edge::execute` does; a transport's own
    /// failure is an error reply.
    fn execute(&self, request: Request) -> BoxFuture<'static, Reply>;

    /// Whether every event the session emitted before answering a request is already waiting
    /// in its event stream when [`execute`](Self::execute)'s answer resolves: then the server
    /// sends each reply after those events (docs/protocol.md#ordering). `false` (the default)
    /// where events travel apart from replies, as a cluster's do: clients match by `seq`.
    fn events_precede_replies(&self) -> bool {
        false
    }
}

impl SessionDriver for SessionHandle {
    fn execute(&self, request: Request) -> BoxFuture<'static, Reply> {
        let session = self.clone();
        async move { execute(&session, request).await }.boxed()
    }

    /// The session's actor emits its events into the subscriber's channel before it answers.
    fn events_precede_replies(&self) -> bool {
        true
    }
}

pub use colloquy_edge::{Agents, SessionStart};

/// Sessions in this process: the agents of an [`Agents`] registry, by name, on its model.
#[derive(Clone, Debug, Default)]
pub struct LocalBackend {
    agents: Agents,
    /// Counts each session from its start (`ServerBuilder::metrics`).
    metrics: Option<Metrics>,
}

impl From<Agents> for LocalBackend {
    fn from(agents: Agents) -> Self {
        Self { agents, metrics: None }
    }
}

impl LocalBackend {
    /// No agents and no model yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers `factory`'s agent under `name` (the first registered is the default; a name
    /// registered again replaces the earlier factory): [`Agents::agent`].
    #[must_use]
    pub fn agent(
        mut self,
        name: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        self.agents = self.agents.agent(name, factory);
        self
    }

    /// The model every session talks to: [`Agents::llm`].
    #[must_use]
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.agents = self.agents.llm(llm);
        self
    }

    /// Configures each session's builder (options, speech sink, userdata, the before-call
    /// hook, another model), knowing which agent and `metadata` the client asked for. It runs
    /// after the model is set and before the client's history is: [`Agents::session`].
    #[must_use]
    pub fn session(
        mut self,
        hook: impl Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync + 'static,
    ) -> Self {
        self.agents = self.agents.session(hook);
        self
    }

    /// Hears of each session once it has started, before its client does: where a host counts
    /// it (`colloquy_ops::Metrics::watch`) or logs it, as a cluster node's `on_session` does
    /// ([`Agents::on_session`]).
    #[must_use]
    pub fn on_session(
        mut self,
        started: impl Fn(&SessionHandle, &SessionStart) + Send + Sync + 'static,
    ) -> Self {
        self.agents = self.agents.on_session(started);
        self
    }

    /// Counts each session into `metrics` from its start (right after the started hook),
    /// before its client hears of it.
    pub(crate) fn watched_by(mut self, metrics: Option<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

impl Backend for LocalBackend {
    /// Each name and the id of the agent its factory makes.
    fn known_agents(&self) -> Option<BTreeSet<String>> {
        Some(self.agents.known())
    }

    fn agents(&self) -> BoxFuture<'static, Result<AgentList, ServerError>> {
        let agents: Vec<String> = self.agents.names().map(str::to_owned).collect();
        let list = AgentList { default: agents.first().cloned(), agents };
        std::future::ready(Ok(list)).boxed()
    }

    fn start(
        &self,
        agent: String,
        options: StartOptions,
    ) -> BoxFuture<'static, Result<StartedSession, ServerError>> {
        let start = SessionStart::new(agent.clone(), options.metadata);
        // Every event: the replay buffer holds the session's from its first.
        let starting =
            self.agents.start(Session::builder(), start, options.history, EventFilter::ALL);
        let metrics = self.metrics.clone();
        async move {
            let Hosted { session, events, .. } = starting.await.map_err(|e| match e {
                StartError::UnknownAgent(_) => {
                    ServerError::new(ErrorCode::UnknownAgent, e.to_string())
                }
                _ => ServerError::new(ErrorCode::StartFailed, e.to_string()),
            })?;
            if let Some(metrics) = metrics {
                metrics.watch(&session);
            }
            Ok(StartedSession {
                session_id: session.id().to_owned(),
                agent,
                node: None,
                driver: Arc::new(session),
                events: events.map(StreamItem::Event).boxed(),
            })
        }
        .boxed()
    }
}
