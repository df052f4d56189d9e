//! The host's entry point: [`Session::builder`] configures a session and starts its actors.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use colloquy_llm::Llm;
use colloquy_llm::context::ContextPolicy;
use colloquy_model::{Agent, ChatItem, EventFilter, FunctionTool, Templates, Toolset};
use colloquy_store::{Acquire, Journal, LEASE_TTL, LeaseHolder, SessionStore};
use ractor::Actor;
use tokio::sync::mpsc;

use crate::api::host::Host;
use crate::catalog::ToolCatalog;
use crate::messages::handle::{EventStream, SessionHandle};
use crate::messages::{CloseCallback, Plugins, Subscriber};
use crate::session::{Durable, Resume, SessionActor, SessionArgs};
use crate::support::lifecycle_sink::LifecycleSink;
use crate::types::error::SessionError;
use crate::types::lifecycle::LifecycleEvent;
use crate::types::options::SessionOptions;
use crate::types::speech_sink::SpeechSink;

/// Entry point: `Session::builder()`.
pub struct Session;

impl Session {
    /// A builder with default options.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }
}

/// Configures and starts a session.
///
/// ```
/// use colloquy_actors::Session;
/// use colloquy_model::Agent;
/// use colloquy_llm::{ScriptedLlm, ScriptedResponse};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), colloquy_actors::SessionError> {
/// let mut builder = Session::builder().llm(ScriptedLlm::new([ScriptedResponse::text("Hi!")]));
/// let mut events = builder.subscribe(); // sees the session's very first events too
/// let session = builder.start(Agent::new("greeter", "Greet the user.")).await?;
/// session.user_turn("hello").await?;
/// session.wait_for_idle().await?;
/// assert_eq!(session.history().await?.len(), 3); // handoff, user, assistant
/// session.close().await?;
/// # let _ = events.recv().await;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct SessionBuilder {
    llm: Option<Arc<dyn Llm>>,
    sink: Option<Arc<dyn SpeechSink>>,
    options: SessionOptions,
    memory: Memory,
    tools: Vec<FunctionTool>,
    toolsets: Vec<Toolset>,
    userdata: Option<Arc<dyn Any + Send + Sync>>,
    subscribers: Vec<Subscriber>,
    lifecycle: Option<mpsc::Sender<LifecycleEvent>>,
    host: Option<Host>,
    on_close: Option<CloseCallback>,
    before_call: Option<colloquy_model::BeforeToolCall>,
}

/// Where a session's conversation comes from and where it is kept.
#[derive(Default)]
struct Memory {
    /// A stored history to start from.
    history: Vec<ChatItem>,
    /// Where the journal goes (docs/durability.md).
    store: Option<Arc<dyn SessionStore>>,
    /// Whether a resume takes the lease over from a live holder.
    take_over: bool,
    /// The lease's ttl, if not the default.
    lease_ttl: Option<Duration>,
}

impl Memory {
    /// The lease of session `id` in the store, if there is one, taken off the async task.
    async fn lease(&self, id: &str) -> Result<Option<Durable>, String> {
        let Some(store) = self.store.clone() else { return Ok(None) };
        let (session, ttl) = (id.to_owned(), self.lease_ttl.unwrap_or(LEASE_TTL));
        let mode = if self.take_over { Acquire::TakeOver } else { Acquire::IfFree };
        let held = Arc::clone(&store);
        let lease = tokio::task::spawn_blocking(move || {
            held.acquire(&session, &LeaseHolder::this_process(), ttl, mode)
        })
        .await
        .map_err(|e| format!("the store's lease request failed: {e}"))?
        .map_err(|e| e.to_string())?;
        Ok(Some(Durable { store, lease }))
    }
}

impl SessionBuilder {
    /// The model (required): `ScriptedLlm` for offline runs and tests, or a real adapter.
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.llm = Some(Arc::new(llm));
        self
    }

    /// Where speech goes; without one, speech plays out at once.
    pub fn speech_sink(mut self, sink: impl SpeechSink) -> Self {
        self.sink = Some(Arc::new(sink));
        self
    }

    /// All options at once.
    pub fn options(mut self, options: SessionOptions) -> Self {
        self.options = options;
        self
    }

    /// How many tool-reply steps may still call tools (default 3).
    pub fn max_tool_steps(mut self, steps: u32) -> Self {
        self.options.max_tool_steps = steps;
        self
    }

    /// Whether speeches may be interrupted (default true; an agent may override it).
    pub fn allow_interruptions(mut self, allow: bool) -> Self {
        self.options.allow_interruptions = allow;
        self
    }

    /// How long a cooperative call may clean up after a cancel (default 2 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.options.cancel_grace = grace;
        self
    }

    /// How many events a lossless subscriber may leave unread before its stream is closed
    /// with an `x_stream_overflowed` item (default 100,000; see
    /// [`SessionOptions::max_unread_events`]).
    pub fn max_unread_events(mut self, limit: usize) -> Self {
        self.options.max_unread_events = limit.max(1);
        self
    }

    /// How long a handoff or a close may take, from when it is asked, before the calls it
    /// waits for are aborted, blocking ones included (default 30 s; `None` waits as long as
    /// non-cancellable calls run; see [`SessionOptions::drain_timeout`]).
    pub fn drain_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.drain_timeout = timeout;
        self
    }

    /// How many tool calls one user turn may make, its deferred replies included (default
    /// 20; see [`SessionOptions::max_tool_calls_per_turn`]).
    pub fn max_tool_calls_per_turn(mut self, limit: u32) -> Self {
        self.options.max_tool_calls_per_turn = limit;
        self
    }

    /// The deadline of calls whose tool and toolsets set none (default none; see
    /// [`FunctionTool::deadline`](colloquy_model::FunctionTool::deadline)).
    pub fn tool_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.options.tool_deadline = deadline;
        self
    }

    /// How long a call waits for `approve` or `reject` before it is rejected (default 5
    /// minutes; `None` waits until answered; see [`SessionOptions::approval_timeout`]).
    pub fn approval_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.approval_timeout = timeout;
        self
    }

    /// How long an interrupted speech still waits for its blocking calls (default 5 s; `None`
    /// waits for them; see [`SessionOptions::interrupt_timeout`]).
    pub fn interrupt_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.interrupt_timeout = timeout;
        self
    }

    /// The heartbeat of calls whose tool and toolsets set none (default none; see
    /// [`FunctionTool::heartbeat`](colloquy_model::FunctionTool::heartbeat)).
    pub fn tool_heartbeat(mut self, heartbeat: Option<Duration>) -> Self {
        self.options.tool_heartbeat = heartbeat;
        self
    }

    /// How long an LLM request may go without sending anything before the turn ends with an
    /// `llm` error (default 30 s; `None` waits for ever).
    pub fn llm_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.llm_timeout = timeout;
        self
    }

    /// The model's context size in tokens, its prompt and reply together (llama.cpp's
    /// `--ctx-size`, say): a request estimated over it less a quarter for the reply (at most
    /// 4,096 tokens) is fitted first by the context policy, by default
    /// [`TrimOldest`](colloquy_llm::context::TrimOldest). Without it, a request goes as it is
    /// and one a provider refuses as too long is retried once, trimmed
    /// (docs/providers.md#a-context-that-fits).
    pub fn max_context_tokens(mut self, tokens: u32) -> Self {
        self.options.context = self.options.context.clone().with_max_tokens(tokens);
        self
    }

    /// What makes a request fit the model's context, in place of
    /// [`TrimOldest`](colloquy_llm::context::TrimOldest): summarise the oldest turns, say.
    pub fn context_policy(mut self, policy: impl ContextPolicy) -> Self {
        self.options.context = self.options.context.clone().policy(policy);
        self
    }

    /// The speech-sink watchdog: how long a playout may go without a report or progress
    /// before the runtime stops it (default 60 s; `None` trusts the sink).
    pub fn playout_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.playout_timeout = timeout;
        self
    }

    /// The user-away timeout (default 15 s; `None` disables it).
    pub fn user_away_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.options.user_away_timeout = timeout;
        self
    }

    /// Session-level templates (§8): update wrapping, duplicate answers, deferred-reply
    /// instructions. An agent's own templates replace them as a whole.
    pub fn templates(mut self, templates: Templates) -> Self {
        self.options.templates = Some(templates);
        self
    }

    /// Starts from a stored history (as exported by [`SessionHandle::history`]); its messages
    /// and tool items also seed the first agent's chat context.
    pub fn history(mut self, items: Vec<ChatItem>) -> Self {
        self.memory.history = items;
        self
    }

    /// Keeps the session's journal in `store`, so that it survives its process:
    /// [`resume`](Self::resume) continues it, from this process or another with the same store
    /// (docs/durability.md says what is kept, and when).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use colloquy_actors::Session;
    /// # use colloquy_llm::{ScriptedLlm, ScriptedResponse};
    /// # use colloquy_model::Agent;
    /// # use colloquy_store::MemoryStore;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), colloquy_actors::SessionError> {
    /// let store = Arc::new(MemoryStore::new()); // or SqliteStore::open("sessions.db")
    /// let llm = ScriptedLlm::new([ScriptedResponse::text("Hi!"), ScriptedResponse::text("Again.")]);
    /// let session = Session::builder().llm(llm.clone()).store(store.clone());
    /// let session = session.start(Agent::new("greeter", "Greet the user.")).await?;
    /// session.user_turn("hello").await?;
    /// session.wait_for_idle().await?;
    /// let id = session.id().to_owned();
    /// session.suspend().await?; // … or the process ends; later, with the same store:
    /// let agents = |name: &str| (name == "greeter").then(|| Agent::new("greeter", "Greet."));
    /// let session = Session::builder().llm(llm).store(store).resume(&id, agents).await?;
    /// assert_eq!(session.history().await?.len(), 4); // handoff, user, assistant, handoff
    /// # Ok(()) }
    /// ```
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.memory.store = Some(store);
        self
    }

    /// Whether [`resume`](Self::resume) takes the session's lease over from a process that
    /// still holds it (false by default: refused, naming the holder). For a host that knows
    /// the old process is gone (another machine that died): that process, should it still
    /// run, can no longer write, and its session closes with `lease_lost`
    /// (docs/durability.md#leases).
    pub fn take_over(mut self, take_over: bool) -> Self {
        self.memory.take_over = take_over;
        self
    }

    /// How long the session's lease lasts unless renewed (its writer renews it every third of
    /// that): how long another process waits for it after this one stops on another host.
    /// [`LEASE_TTL`](colloquy_store::LEASE_TTL) (10 s) by default.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.memory.lease_ttl = Some(ttl);
        self
    }

    /// A tool visible to every agent (runs in the current agent's toolset).
    pub fn tool(mut self, tool: FunctionTool) -> Self {
        self.tools.push(tool);
        self
    }

    /// A toolset visible to every agent. A plain toolset's tools run in the current agent's
    /// toolset; an async toolset ([`Toolset::new_async`]) is session-scoped: a child of the
    /// Session whose results reach whichever agent is current (decision 16).
    pub fn toolset(mut self, toolset: Toolset) -> Self {
        self.toolsets.push(toolset);
        self
    }

    /// Data every tool can read through `RunContext::userdata`.
    pub fn userdata<T: Any + Send + Sync>(mut self, data: T) -> Self {
        self.userdata = Some(Arc::new(data));
        self
    }

    /// A lossless subscription that also sees the events emitted while the session starts:
    /// every event but the agent's text deltas ([`EventFilter::DEFAULT`]);
    /// [`subscribe_to`](Self::subscribe_to)`(EventFilter::ALL)` adds them.
    pub fn subscribe(&mut self) -> EventStream {
        self.subscribe_to(EventFilter::DEFAULT)
    }

    /// [`subscribe`](Self::subscribe) to the events `filter` passes only: the session never
    /// copies or sends the others to this stream.
    ///
    /// ```
    /// # use colloquy_actors::Session;
    /// use colloquy_model::EventFilter;
    /// let mut builder = Session::builder();
    /// let tool_events = builder.subscribe_to(EventFilter::tool_execution());
    /// # drop(tool_events);
    /// ```
    pub fn subscribe_to(&mut self, filter: EventFilter) -> EventStream {
        let (tx, stream) = EventStream::channel();
        self.subscribers.push(Subscriber { filter, tx });
        stream
    }

    /// Lifecycle records of every actor of the session (started, stopped gracefully): an actor
    /// that was killed never reports `Stopped`.
    pub fn lifecycle_events(&mut self) -> mpsc::Receiver<LifecycleEvent> {
        let (tx, rx) = crate::types::lifecycle::lifecycle_channel();
        self.lifecycle = Some(tx);
        rx
    }

    /// Called once when the session has closed, with the reason (`close`, `end_call`, …),
    /// right after the `session_closed` event: where the host hangs up the phone line or closes
    /// the socket. A panic in it is logged and does not stop the close.
    pub fn on_close(mut self, callback: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_close = Some(Arc::new(callback));
        self
    }

    /// Runs the session under `host`: the host lists it, supervises it and streams its actors'
    /// lifecycle records (see [`Host`]).
    pub fn host(mut self, host: &Host) -> Self {
        self.host = Some(host.clone());
        self
    }

    /// A hook run before each tool call of the session: it sees the call (name,
    /// validated arguments, call id, agent) and answers [`BeforeCall`]: run it, run it with
    /// rewritten arguments, skip it with an output, or reject it with a reason. Where hosts
    /// put guardrails and audit logging.
    ///
    /// It runs in the call's own task after `tool_call_started` and before the body (once per
    /// call, not per retry), so a slow hook delays only its call. A skipped call ends `done`
    /// with its output; a rejected one ends `error` and the model reads
    /// ``The host rejected `NAME`: REASON``; an `Err` from the hook is the model's error
    /// output (a panic, the internal-error text). Calls answered without starting (unknown
    /// tool, duplicate policy) never reach it.
    ///
    /// ```
    /// use colloquy_actors::Session;
    /// use colloquy_model::{BeforeCall, PendingToolCall, ToolError};
    ///
    /// let builder = Session::builder().before_tool_call(|call: PendingToolCall| async move {
    ///     if call.name == "refund" && call.arguments["amount_cents"].as_u64() > Some(10_000) {
    ///         return Ok(BeforeCall::Reject("refunds over $100 need a person".into()));
    ///     }
    ///     Ok::<_, ToolError>(BeforeCall::Run)
    /// });
    /// # drop(builder);
    /// ```
    ///
    /// [`BeforeCall`]: colloquy_model::BeforeCall
    pub fn before_tool_call<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(colloquy_model::PendingToolCall) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<
                Output = Result<colloquy_model::BeforeCall, colloquy_model::ToolError>,
            > + Send
            + 'static,
    {
        self.before_call = Some(Arc::new(move |call| Box::pin(hook(call))));
        self
    }

    /// Spawns the session's actors with `agent` as the first agent; with a
    /// [`store`](Self::store), under the lease of its new id (docs/durability.md#leases).
    pub async fn start(self, agent: Agent) -> Result<SessionHandle, SessionError> {
        let id = uuid::Uuid::new_v4().to_string();
        let durable = self.memory.lease(&id).await.map_err(SessionError::Spawn)?;
        self.spawn(id, agent, None, durable).await
    }

    /// Continues stored session `id` from the [`store`](Self::store) (required), on the agent
    /// it was on last, which `agents` makes by name (every agent it may be on after handoffs).
    ///
    /// Its history and every agent's context come back as they were stored; the calls that
    /// were running when its process ended are settled by their tools' `on_interrupted`
    /// policy (docs/durability.md#on-interrupted) — by default each ends as an error that says
    /// it may or may not have completed, and nothing runs again; a `rerun` tool's body runs
    /// again with the same idempotency key — and the first event after the agent's entry,
    /// `x_session_resumed`, names them. The agent does
    /// not greet again. An unknown id, a session that closed, an agent `agents` does not make,
    /// or a store that fails is a [`SessionError::Resume`] naming what is wrong; nothing
    /// stored is changed then.
    ///
    /// It takes the session's lease first (docs/durability.md#leases): a session that another
    /// live process holds is refused, naming that process and how long its lease runs, unless
    /// [`take_over`](Self::take_over); a holder on this host that no longer runs (`kill -9`)
    /// leaves it at once.
    pub async fn resume(
        mut self,
        id: &str,
        agents: impl Fn(&str) -> Option<Agent>,
    ) -> Result<SessionHandle, SessionError> {
        let store = self.memory.store.clone().ok_or_else(|| {
            SessionError::Resume("no store to resume from: call SessionBuilder::store".into())
        })?;
        // Taken before the journal is read: nobody else appends to it from here on.
        let durable = self.memory.lease(id).await.map_err(SessionError::Resume)?;
        let (agent, journal) = match read_journal(store, id, agents).await {
            Ok(read) => read,
            Err(e) => {
                if let Some(durable) = durable {
                    durable.release().await;
                }
                return Err(e);
            }
        };
        let owed = journal.owed_replies();
        self.memory.history = journal.history;
        let resume = Resume {
            owed,
            contexts: journal.contexts,
            last_seq: journal.last_seq,
            in_doubt: journal.running,
            remembered: journal.remembered,
            commands: journal.commands,
        };
        self.spawn(id.to_owned(), agent, Some(resume), durable).await
    }

    async fn spawn(
        self,
        id: String,
        agent: Agent,
        resume: Option<Resume>,
        durable: Option<Durable>,
    ) -> Result<SessionHandle, SessionError> {
        // Kept to give the lease back should the session not start.
        let held = durable.clone();
        let spawned = self.spawn_actors(id, agent, resume, durable).await;
        if spawned.is_err()
            && let Some(held) = held
        {
            held.release().await;
        }
        spawned
    }

    async fn spawn_actors(
        self,
        id: String,
        agent: Agent,
        resume: Option<Resume>,
        durable: Option<Durable>,
    ) -> Result<SessionHandle, SessionError> {
        let llm = self
            .llm
            .ok_or_else(|| SessionError::Config("no LLM: call SessionBuilder::llm".into()))?;
        let catalog = ToolCatalog::build(&self.tools, &self.toolsets, &agent)
            .map_err(SessionError::Config)?;
        let closed = Arc::new(std::sync::OnceLock::new());
        let plugins = Plugins {
            llm,
            sink: self.sink,
            userdata: self.userdata,
            before_call: self.before_call,
        };
        let args = SessionArgs {
            id: id.clone(),
            agent,
            catalog: Arc::new(catalog),
            session_tools: self.tools,
            session_toolsets: self.toolsets,
            options: self.options,
            plugins,
            history: self.memory.history,
            subscribers: self.subscribers,
            lifecycle: LifecycleSink::new(&id, self.lifecycle, self.host.as_ref().map(Host::hub)),
            on_close: self.on_close,
            closed: Arc::clone(&closed),
            resume,
            store: durable,
        };
        let kept = args.store.is_some();
        let spawned = match &self.host {
            Some(host) => Actor::spawn_linked(None, SessionActor, args, host.actor_cell()).await,
            None => Actor::spawn(None, SessionActor, args).await,
        };
        let session = match spawned {
            // Without a Host, the host app's handles are what keeps the session.
            Ok((actor, _)) => SessionHandle::started(id, actor, closed, self.host.is_none()),
            Err(e) => return Err(SessionError::Spawn(e.to_string())),
        };
        if let Some(host) = &self.host {
            host.register(&session, kept);
        }
        Ok(session)
    }
}

/// The journal of stored session `id`, read and checked for a resume, and its agent, made by
/// `agents`: a [`SessionError::Resume`] naming what is wrong otherwise.
async fn read_journal(
    store: Arc<dyn SessionStore>,
    id: &str,
    agents: impl Fn(&str) -> Option<Agent>,
) -> Result<(Agent, Journal), SessionError> {
    let session = id.to_owned();
    let entries = tokio::task::spawn_blocking(move || store.load(&session))
        .await
        .map_err(|e| SessionError::Resume(format!("the store's reader failed: {e}")))?
        .map_err(|e| SessionError::Resume(e.to_string()))?;
    let journal = Journal::fold(&entries);
    if let Some(reason) = &journal.closed {
        let why = format!("session `{id}` closed ({reason}): start a new one from its history");
        return Err(SessionError::Resume(why));
    }
    let name = journal.agent.clone().ok_or_else(|| {
        SessionError::Resume(format!("session `{id}` has no agent in its journal"))
    })?;
    let agent = agents(&name).ok_or_else(|| {
        SessionError::Resume(format!(
            "session `{id}` was on agent `{name}`, which is not registered"
        ))
    })?;
    if agent.id() != name {
        let why = format!("`{name}` made an agent with id `{}`: it must be the same", agent.id());
        return Err(SessionError::Resume(why));
    }
    Ok((agent, journal))
}
