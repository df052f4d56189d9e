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
use colloquy_protocol::{
    AgentList, ErrorCode, Reply, Request, ServerError, StartOptions, StoredSession,
};
use colloquy_store::SessionStore;
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

    /// The sessions kept in the backend's store, most recently active first (each `live`
    /// false: the server knows which run); `None`, the default, without a store.
    fn stored(&self) -> BoxFuture<'static, Result<Option<Vec<StoredSession>>, ServerError>> {
        std::future::ready(Ok(None)).boxed()
    }

    /// Resumes stored session `id`, which does not run in this server now, with its event
    /// stream from the resume on; `None`, the default, without a store. The server asks only
    /// where it keeps the sessions' event numbers (`ServerBuilder::store`), so that a resumed
    /// session's numbers go on from its last. A session the store
    /// does not hold, or that closed, is [`ErrorCode::UnknownSession`] (nothing changed); a
    /// failed resume [`ErrorCode::StartFailed`].
    fn resume(
        &self,
        id: String,
    ) -> BoxFuture<'static, Result<Option<StartedSession>, ServerError>> {
        let _ = id;
        std::future::ready(Ok(None)).boxed()
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

/// Sessions in this process: the agents of an [`Agents`] registry, by name, on its model;
/// with a [`store`](Self::store), kept in it and resumed from it.
#[derive(Clone, Default)]
pub struct LocalBackend {
    agents: Agents,
    /// Counts each session from its start (`ServerBuilder::metrics`).
    metrics: Option<Metrics>,
    store: Option<Arc<dyn SessionStore>>,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("agents", &self.agents)
            .field("metrics", &self.metrics)
            .field("store", &self.store.is_some())
            .finish()
    }
}

impl From<Agents> for LocalBackend {
    fn from(agents: Agents) -> Self {
        Self { agents, metrics: None, store: None }
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

    /// Keeps every session it starts in `store` (`SessionBuilder::store`), and resumes a
    /// stored one ([`Backend::resume`]) on the agent its journal names, made by the factory
    /// whose agent has that id.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Whether its sessions are kept in a store.
    pub(crate) fn is_stored(&self) -> bool {
        self.store.is_some()
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
        let mut builder = Session::builder();
        if let Some(store) = &self.store {
            builder = builder.store(Arc::clone(store));
        }
        // Every event: the replay buffer holds the session's from its first.
        let starting = self.agents.start(builder, start, options.history, EventFilter::ALL);
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
            Ok(in_process(session, agent, events))
        }
        .boxed()
    }

    fn stored(&self) -> BoxFuture<'static, Result<Option<Vec<StoredSession>>, ServerError>> {
        let Some(store) = self.store.clone() else { return std::future::ready(Ok(None)).boxed() };
        async move {
            let listed = tokio::task::spawn_blocking(move || store.list()).await;
            let failed = |e: String| {
                ServerError::new(ErrorCode::Unavailable, format!("the store failed: {e}"))
            };
            let listed =
                listed.map_err(|e| failed(e.to_string()))?.map_err(|e| failed(e.to_string()))?;
            let stored = listed.into_iter().map(|s| {
                StoredSession::new(s.id, s.agent, s.updated_ms, s.closed, s.calls_in_doubt)
            });
            Ok(Some(stored.collect()))
        }
        .boxed()
    }

    fn resume(
        &self,
        id: String,
    ) -> BoxFuture<'static, Result<Option<StartedSession>, ServerError>> {
        let Some(store) = self.store.clone() else { return std::future::ready(Ok(None)).boxed() };
        let (agents, metrics) = (self.agents.clone(), self.metrics.clone());
        async move {
            let summary = Self::summary(Arc::clone(&store), id.clone()).await?;
            let Some(name) = agents.name_of(&summary.agent).map(str::to_owned) else {
                let message = format!(
                    "session `{id}` was on agent `{}`, which this server does not offer",
                    summary.agent
                );
                return Err(ServerError::new(ErrorCode::StartFailed, message));
            };
            let builder = Session::builder().store(store);
            let start = SessionStart::new(name.clone(), serde_json::Value::Null);
            let resuming = agents.resume(builder, id, start, EventFilter::ALL);
            let Hosted { session, events, .. } = resuming
                .await
                .map_err(|e| ServerError::new(ErrorCode::StartFailed, e.to_string()))?;
            if let Some(metrics) = metrics {
                metrics.watch(&session);
            }
            Ok(Some(in_process(session, name, events)))
        }
        .boxed()
    }
}

impl LocalBackend {
    /// The summary of stored session `id`, read from the store's listing (no journal is
    /// loaded): an unknown id or a closed session is [`ErrorCode::UnknownSession`].
    async fn summary(
        store: Arc<dyn SessionStore>,
        id: String,
    ) -> Result<colloquy_store::SessionSummary, ServerError> {
        let listed = tokio::task::spawn_blocking(move || store.list()).await;
        let listed = listed
            .map_err(|e| {
                ServerError::new(ErrorCode::StartFailed, format!("the store's reader failed: {e}"))
            })?
            .map_err(|e| ServerError::new(ErrorCode::StartFailed, e.to_string()))?;
        let Some(summary) = listed.into_iter().find(|summary| summary.id == id) else {
            let message = format!("no session `{id}`, live or stored");
            return Err(ServerError::new(ErrorCode::UnknownSession, message));
        };
        if let Some(reason) = &summary.closed {
            let message = format!(
                "session `{id}` closed ({reason}): a closed session does not resume; start a new \
                 one from its history"
            );
            return Err(ServerError::new(ErrorCode::UnknownSession, message));
        }
        Ok(summary)
    }
}

/// A session that runs in this process, as the server takes it.
fn in_process(
    session: SessionHandle,
    agent: String,
    events: colloquy_actors::EventStream,
) -> StartedSession {
    StartedSession {
        session_id: session.id().to_owned(),
        agent,
        node: None,
        driver: Arc::new(session),
        events: events.map(StreamItem::Event).boxed(),
    }
}
