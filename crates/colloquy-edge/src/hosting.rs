//! What every host that serves agents by name shares — `colloquy serve`'s local backend and a
//! cluster node: the registry of its agents and how it starts their sessions ([`Agents`]),
//! what a session's hooks learn of its start, the hooks' types, and the bound on the requests
//! run at once.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use colloquy_actors::{EventStream, SessionBuilder, SessionError, SessionHandle};
use colloquy_llm::Llm;
use colloquy_model::{Agent, ChatItem, EventFilter};
use colloquy_protocol::{ErrorKind, ProtocolError};

/// What a client asked for when it started a session, as a host's session hooks see it
/// (`LocalBackend::session` in the server, `NodeBuilder::session` on a node).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionStart {
    /// The agent asked for.
    pub agent: String,
    /// What the client passed as `options.metadata` (`null` when nothing).
    pub metadata: serde_json::Value,
}

impl SessionStart {
    /// A start of `agent` with `metadata`.
    pub fn new(agent: impl Into<String>, metadata: serde_json::Value) -> Self {
        Self { agent: agent.into(), metadata }
    }
}

/// Makes the agent a session starts with.
pub type AgentFactory = Arc<dyn Fn() -> Agent + Send + Sync>;

/// Configures each session's builder, knowing what the client asked for.
pub type SessionHook = Arc<dyn Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync>;

/// Hears of each session once it has started.
pub type StartedHook = Arc<dyn Fn(&SessionHandle, &SessionStart) + Send + Sync>;

/// The agents a host starts sessions of by name, and how it starts them: a factory per name
/// (the first registered is the default; a name registered again replaces its factory), the
/// model every session talks to, a hook that configures each session's builder, and one that
/// hears of each session once it has started.
///
/// One registry for every host of agents by name — a server's `LocalBackend`, a cluster node,
/// and any host that starts sessions for clients — so a session starts the same way whichever
/// of them starts it ([`start`](Self::start)):
///
/// 1. the model ([`llm`](Self::llm)), if set;
/// 2. the session hook ([`session`](Self::session)), which may set anything else a
///    `SessionBuilder` takes, another model included;
/// 3. the history the client sent, if any;
/// 4. the start, with a fresh agent from the name's factory;
/// 5. the started hook ([`on_session`](Self::on_session)), before the caller answers its
///    client, so nothing the client does precedes it.
#[derive(Clone, Default)]
pub struct Agents {
    /// In registration order: the first is the default.
    factories: Vec<(String, AgentFactory)>,
    llm: Option<Arc<dyn Llm>>,
    hook: Option<SessionHook>,
    started: Option<StartedHook>,
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.names().collect();
        f.debug_struct("Agents").field("names", &names).finish_non_exhaustive()
    }
}

/// Why [`Agents::start`] started no session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No agent is registered under the name asked for.
    #[error("no agent `{0}`")]
    UnknownAgent(String),
    /// The session did not start (its first agent's tools are invalid, say).
    #[error(transparent)]
    Failed(#[from] SessionError),
}

/// A session [`Agents::start`] started, and its events.
#[non_exhaustive]
pub struct Hosted {
    /// The session.
    pub session: SessionHandle,
    /// Its events from its first, as the filter passed to `start` lets them through.
    pub events: EventStream,
}

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted").field("session", &self.session.id()).finish_non_exhaustive()
    }
}

impl Agents {
    /// No agent, no model and no hook yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers `factory`'s agent under `name`: the first registered is the default, and a name
    /// registered again replaces the earlier factory (in its place).
    #[must_use]
    pub fn agent(
        mut self,
        name: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        let factory: AgentFactory = Arc::new(factory);
        match self.factories.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = factory,
            None => self.factories.push((name, factory)),
        }
        self
    }

    /// The model every session talks to, unless the session hook sets another.
    #[must_use]
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.llm = Some(Arc::new(llm));
        self
    }

    /// Configures each session's builder (options, speech sink, userdata, the before-call
    /// hook, another model), knowing which agent and metadata the client asked for. It runs
    /// after the model is set and before the client's history is; a later call replaces it.
    #[must_use]
    pub fn session(
        mut self,
        hook: impl Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Hears of each session once it has started, before the client that asked for it is
    /// answered: where a host counts it (`colloquy_ops::Metrics::watch`) or logs it. Keep it
    /// quick: the start waits on it. A later call replaces it.
    #[must_use]
    pub fn on_session(
        mut self,
        started: impl Fn(&SessionHandle, &SessionStart) + Send + Sync + 'static,
    ) -> Self {
        self.started = Some(Arc::new(started));
        self
    }

    /// The names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.iter().map(|(name, _)| name.as_str())
    }

    /// The default agent: the first registered.
    pub fn default_agent(&self) -> Option<&str> {
        self.names().next()
    }

    /// Whether an agent is registered under `name`.
    pub fn offers(&self, name: &str) -> bool {
        self.factory(name).is_some()
    }

    /// Whether no agent is registered.
    pub fn is_empty(&self) -> bool {
        self.factories.is_empty()
    }

    /// What a start's history may hand off to: every name, and the id of the agent each
    /// factory makes (a history's handoffs carry ids). Calls every factory once.
    pub fn known(&self) -> BTreeSet<String> {
        self.factories
            .iter()
            .flat_map(|(name, factory)| [name.clone(), factory().id().to_owned()])
            .collect()
    }

    /// Starts a session of `start.agent` on `builder` (`Session::builder()`, with a `Host` if
    /// the host supervises its sessions) in the order the type's comment gives, with `history`
    /// (which the caller has checked: [`history::check`](crate::history::check)) and a
    /// lossless subscription to the events `events` passes, taken before the start so that it
    /// holds the session's first events. The future holds no borrow of the registry.
    ///
    /// # Errors
    /// [`StartError::UnknownAgent`] if no agent is registered under `start.agent`;
    /// [`StartError::Failed`] if the session does not start.
    pub fn start(
        &self,
        builder: SessionBuilder,
        start: SessionStart,
        history: Vec<ChatItem>,
        events: EventFilter,
    ) -> impl Future<Output = Result<Hosted, StartError>> + Send + 'static {
        let factory = self.factory(&start.agent).cloned();
        let (llm, hook, started) = (self.llm.clone(), self.hook.clone(), self.started.clone());
        async move {
            let Some(factory) = factory else {
                return Err(StartError::UnknownAgent(start.agent));
            };
            let mut builder = builder;
            if let Some(llm) = llm {
                builder = builder.llm(llm);
            }
            if let Some(hook) = hook {
                builder = hook(builder, &start);
            }
            if !history.is_empty() {
                builder = builder.history(history);
            }
            let events = builder.subscribe_to(events);
            let session = builder.start(factory()).await?;
            if let Some(started) = started {
                started(&session, &start);
            }
            Ok(Hosted { session, events })
        }
    }

    /// The first name whose factory makes an agent of id `agent` (calls the factories in
    /// turn): what a stored session, whose journal names the agent's id, is served under.
    pub fn name_of(&self, agent: &str) -> Option<&str> {
        self.factories.iter().find(|(_, factory)| factory().id() == agent).map(|(n, _)| n.as_str())
    }

    /// Resumes stored session `id` on `builder`, which has the store, as
    /// [`start`](Self::start) starts one: the model, the session hook (seeing `start`, whose
    /// `agent` is the name the session is served under and whose metadata is `null`: a
    /// journal keeps none), a lossless subscription to the events `events` passes, the resume
    /// (every agent it may be on made by the factory whose agent has that id), then the
    /// started hook. The future holds no borrow of the registry.
    ///
    /// # Errors
    /// [`StartError::Failed`] with `SessionError::Resume` when the session cannot resume (an
    /// unknown id, a closed session, an agent no factory makes, a failing store).
    pub fn resume(
        &self,
        builder: SessionBuilder,
        id: String,
        start: SessionStart,
        events: EventFilter,
    ) -> impl Future<Output = Result<Hosted, StartError>> + Send + 'static {
        let factories: Vec<AgentFactory> = self.factories.iter().map(|(_, f)| f.clone()).collect();
        let (llm, hook, started) = (self.llm.clone(), self.hook.clone(), self.started.clone());
        async move {
            let mut builder = builder;
            if let Some(llm) = llm {
                builder = builder.llm(llm);
            }
            if let Some(hook) = hook {
                builder = hook(builder, &start);
            }
            let events = builder.subscribe_to(events);
            let agents = |agent: &str| factories.iter().map(|f| f()).find(|a| a.id() == agent);
            let session = builder.resume(&id, agents).await?;
            if let Some(started) = started {
                started(&session, &start);
            }
            Ok(Hosted { session, events })
        }
    }

    fn factory(&self, name: &str) -> Option<&AgentFactory> {
        self.factories.iter().find(|(n, _)| n == name).map(|(_, factory)| factory)
    }
}

/// A bound on the requests run at once for one client or one session: past it a request is
/// answered `busy` at once rather than queued, so a client that floods a session learns so and
/// a slow session holds no queue (the server's `Limits::max_in_flight`, a node's
/// `NodeBuilder::max_in_flight`).
#[derive(Clone, Debug)]
pub struct InFlight {
    places: Arc<tokio::sync::Semaphore>,
    max: usize,
    whose: &'static str,
}

impl InFlight {
    /// At most `max` requests at once (at least one) of `whose` (`"this connection"`, `"this
    /// session"`: what the `busy` answer names).
    pub fn new(max: usize, whose: &'static str) -> Self {
        let max = max.max(1);
        Self { places: Arc::new(tokio::sync::Semaphore::new(max)), max, whose }
    }

    /// A place for one more request, held until it is dropped; or the `busy` error to answer
    /// with.
    pub fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ProtocolError> {
        Arc::clone(&self.places).try_acquire_owned().map_err(|_| {
            let why = format!(
                "{} requests of {} are running: send this one again once one is answered",
                self.max, self.whose
            );
            ProtocolError::new(ErrorKind::Busy, why)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_bound_a_request_is_busy_until_a_place_frees() {
        let bound = InFlight::new(1, "this session");
        let held = bound.admit().expect("a place");
        let busy = bound.admit().expect_err("busy");
        assert_eq!(busy.kind, ErrorKind::Busy);
        assert!(busy.message.contains("1 requests of this session"), "{}", busy.message);
        drop(held);
        assert!(bound.admit().is_ok());
    }
}
