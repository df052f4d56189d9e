//! [`SessionHandle`], the host's grip on a running session: every method is one message to
//! the Session actor (hosts never build actor messages), so a tool may hold one too.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use colloquy_llm::ToolChoice;
use colloquy_model::{
    Agent, AgentState, ChatItem, EventFilter, FunctionTool, RunResult, SessionEvent, UserState,
};
use futures_core::Stream;
use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::{broadcast, mpsc};

use crate::messages::{
    ClosedSession, HostMsg, MockScope, ObserveMsg, RunningToolCall, SessionLink, SessionMsg,
    Subscriber, ToolMsg,
};
use crate::types::error::{ApprovalError, CancelError, SessionError};
use crate::types::snapshot::SessionSnapshot;

/// Capacity of each [`SessionHandle::events`] channel before a slow receiver lags.
pub const BROADCAST_CAPACITY: usize = 1024;

/// A running session. Cheap to clone; every method talks to the Session actor.
///
/// A session started without a [`Host`](crate::Host) closes (reason `handles_dropped`) once the host app
/// has dropped every handle `start` gave it (clones included); the handles the runtime lends
/// out (`ctx.session()` in a tool, `Host::session`) do not keep it. A session started with a
/// `Host` lives until it is closed or its `Host` is dropped.
#[derive(Clone)]
pub struct SessionHandle {
    id: String,
    actor: ActorRef<SessionMsg>,
    closed: Arc<std::sync::OnceLock<ClosedSession>>,
    /// Held for its `Drop` only.
    _owner: Option<Arc<Owner>>,
    /// The id its commands carry ([`with_command_id`](Self::with_command_id)).
    command: Option<Arc<str>>,
}

/// Shared by the host app's handles of a host-less session; the last one dropped closes it.
struct Owner(ActorRef<SessionMsg>);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.0.cast(HostMsg::Released.into());
    }
}

impl SessionHandle {
    /// How the session closed — its reason, final history and contexts — once it has, however
    /// it closed (`close`, an end-call tool, a host); `None` while it runs.
    pub fn closed_session(&self) -> Option<ClosedSession> {
        self.closed.get().cloned()
    }

    /// The handle `SessionBuilder::start` returns; `owning`: the host app's handles keep the
    /// session (it has no `Host`).
    pub(crate) fn started(
        id: String,
        actor: ActorRef<SessionMsg>,
        closed: Arc<std::sync::OnceLock<ClosedSession>>,
        owning: bool,
    ) -> Self {
        let owner = owning.then(|| Arc::new(Owner(actor.clone())));
        Self { id, actor, closed, _owner: owner, command: None }
    }

    /// A handle the runtime lends out: it does not keep the session.
    pub(crate) fn from_link(link: &SessionLink) -> Self {
        Self {
            id: link.id.to_string(),
            actor: link.actor.clone(),
            closed: Arc::clone(&link.closed),
            _owner: None,
            command: None,
        }
    }

    /// This handle, its commands sent with `id`: the session runs a command once per id, so a
    /// host that did not hear back (a timeout, a lost connection, a node lost) can send it
    /// again, and one the session took is answered `Ok` without running twice — after a
    /// resume too, with a store: the id is journaled with what the command did
    /// (docs/durability.md#commands). Carried by the commands that change the conversation:
    /// [`user_turn`](Self::user_turn), [`user_input`](Self::user_input),
    /// [`generate_reply`](Self::generate_reply) (and `_with`), [`say`](Self::say),
    /// [`cancel_tool_call`](Self::cancel_tool_call), [`approve`](Self::approve),
    /// [`reject`](Self::reject). A command that was refused did nothing and is not taken: a
    /// resend runs it. Use each id for one command; the session keeps its newest 1,024.
    ///
    /// ```
    /// use colloquy_actors::Session;
    /// use colloquy_model::Agent;
    /// use colloquy_llm::{ScriptedLlm, ScriptedResponse};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), colloquy_actors::SessionError> {
    /// let session = Session::builder()
    ///     .llm(ScriptedLlm::new([ScriptedResponse::text("Hello!")]))
    ///     .start(Agent::new("greeter", "Greet."))
    ///     .await?;
    /// let once = session.with_command_id("turn-1");
    /// once.user_turn("hi").await?;
    /// once.user_turn("hi").await?; // the answer was lost: sent again, not run again
    /// session.wait_for_idle().await?;
    /// let history = session.history().await?;
    /// let said = history.iter().filter(|i| i.as_message().is_some_and(|m| m.text == "hi"));
    /// assert_eq!(said.count(), 1);
    /// # session.close().await }
    /// ```
    #[must_use]
    pub fn with_command_id(&self, id: impl Into<String>) -> Self {
        Self { command: Some(Arc::from(id.into())), ..self.clone() }
    }

    /// `message`, carrying this handle's command id if it has one.
    fn once(&self, message: impl Into<SessionMsg>) -> SessionMsg {
        let message = message.into();
        match &self.command {
            Some(id) => SessionMsg::Once { id: Arc::clone(id), message: Box::new(message) },
            None => message,
        }
    }

    /// [`ask`](Self::ask) a command, carrying this handle's command id if it has one.
    async fn ask_once<T: Send + 'static, M: Into<SessionMsg>>(
        &self,
        build: impl FnOnce(RpcReplyPort<T>) -> M,
    ) -> Result<T, SessionError> {
        match self.actor.call(|reply| self.once(build(reply)), None).await {
            Ok(CallResult::Success(value)) => Ok(value),
            _ => Err(SessionError::Closed),
        }
    }

    fn tell(&self, message: impl Into<SessionMsg>) -> Result<(), SessionError> {
        self.actor.cast(message.into()).map_err(|_| SessionError::Closed)
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn ask<T: Send + 'static, M: Into<SessionMsg>>(
        &self,
        build: impl FnOnce(RpcReplyPort<T>) -> M,
    ) -> Result<T, SessionError> {
        match self.actor.call(|reply| build(reply).into(), None).await {
            Ok(CallResult::Success(value)) => Ok(value),
            _ => Err(SessionError::Closed),
        }
    }

    /// Commits a user message and starts a reply; interrupts the current speech if it allows
    /// interruptions. Returns once the turn is accepted, not when the reply is done.
    pub async fn user_turn(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let text = text.into();
        self.ask_once(|reply| HostMsg::UserTurn { text, reply }).await?
    }

    /// Queues a user message behind the current speech instead of interrupting it (LiveKit's
    /// `generate_reply(user_input=…)`), then replies to it like a user turn
    /// (docs/decisions.md#queued-user-input). Returns once the input is accepted and its reply
    /// speech created (`speech_created`), not when the reply is done.
    ///
    /// The message is committed (and stamped) when its reply begins, so that reply is the
    /// first to see it; several inputs are answered one reply each, in order. A reply dropped
    /// before it began (by [`interrupt`](Self::interrupt), the user speaking, a
    /// [`user_turn`](Self::user_turn) or a close) still commits the message, unanswered. An
    /// input accepted during a handoff is answered by the new agent. Fails with
    /// `session closed` once the session is closing.
    pub async fn user_input(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let text = text.into();
        self.ask_once(|reply| HostMsg::UserInput { text, reply }).await?
    }

    /// The testing API: a user turn whose reply is watched to its end (with every speech created
    /// while it runs), returning what those speeches committed. Fails with
    /// `nested runs are not supported` while another run is going, with the LLM's error if a
    /// request fails, and with `session closed` if the session closes first.
    ///
    /// ```
    /// use colloquy_actors::Session;
    /// use colloquy_model::{Agent, Role};
    /// use colloquy_llm::{ScriptedLlm, ScriptedResponse};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), colloquy_actors::SessionError> {
    /// let session = Session::builder()
    ///     .llm(ScriptedLlm::new([ScriptedResponse::text("Hello!")]))
    ///     .start(Agent::new("greeter", "Greet."))
    ///     .await?;
    /// let result = session.run("hi").await?;
    /// result.expect().next_event().is_message(Role::Assistant).with_text("Hello!");
    /// # session.close().await }
    /// ```
    pub async fn run(&self, user_input: impl Into<String>) -> Result<RunResult, SessionError> {
        let text = user_input.into();
        self.ask(|reply| HostMsg::Run { text, reply }).await?
    }

    /// The testing API: replaces tool bodies for calls made from now on (decision 6). Each mock
    /// is a `FunctionTool` with the real tool's name and a body over the same argument type;
    /// the model still sees the real schema, and arguments are validated against it. Agent
    /// mocks override session mocks of the same name; an empty list removes a scope's mocks.
    pub async fn mock_tools(
        &self,
        scope: MockScope,
        mocks: impl IntoIterator<Item = FunctionTool>,
    ) -> Result<(), SessionError> {
        let mocks: Vec<FunctionTool> = mocks.into_iter().collect();
        self.ask(|reply| HostMsg::MockTools { scope, mocks, reply }).await?
    }

    /// Starts a reply with extra instructions for its first LLM step (queued after the
    /// current speech).
    pub async fn generate_reply(
        &self,
        instructions: impl Into<String>,
    ) -> Result<(), SessionError> {
        let instructions = Some(instructions.into());
        let tool_choice = None;
        self.ask_once(|reply| HostMsg::GenerateReply { instructions, tool_choice, reply }).await?
    }

    /// [`generate_reply`](Self::generate_reply) whose first LLM step is sent with this
    /// `tool_choice` (LiveKit's `generate_reply(tool_choice=…)`): `Required` to make the model
    /// call a tool, `Named` for one tool, `None` to forbid calls.
    pub async fn generate_reply_with(
        &self,
        instructions: impl Into<String>,
        tool_choice: ToolChoice,
    ) -> Result<(), SessionError> {
        let instructions = Some(instructions.into());
        let tool_choice = Some(tool_choice);
        self.ask_once(|reply| HostMsg::GenerateReply { instructions, tool_choice, reply }).await?
    }

    /// Speaks a fixed text (queued after the current speech).
    pub async fn say(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let text = text.into();
        self.ask_once(|reply| HostMsg::Say { text, reply }).await?
    }

    /// Interrupts the current speech and queued ones that allow it. Returns once the current
    /// speech is done: an interruption never cancels a tool body, so a speech waiting for a
    /// blocking tool ends when the tool does (its result is kept, no tool reply follows).
    pub async fn interrupt(&self) -> Result<(), SessionError> {
        self.ask(|reply| HostMsg::Interrupt { reply }).await
    }

    /// Reports the user speaking (interrupts the current speech if allowed) or quiet.
    pub fn set_user_speaking(&self, speaking: bool) -> Result<(), SessionError> {
        self.tell(HostMsg::SetUserSpeaking(speaking))
    }

    /// A lossless event stream (an unbounded channel) from now on: every event but the agent's
    /// text deltas ([`EventFilter::DEFAULT`]); [`subscribe_to`](Self::subscribe_to)
    /// `(EventFilter::ALL)` adds them.
    pub fn subscribe(&self) -> EventStream {
        self.subscribe_to(EventFilter::DEFAULT)
    }

    /// [`subscribe`](Self::subscribe) to the events `filter` passes only (for instance
    /// [`EventFilter::tool_execution`]): the session never copies or sends the others to this
    /// stream, which still ends when the session closes.
    pub fn subscribe_to(&self, filter: EventFilter) -> EventStream {
        let (tx, stream) = EventStream::channel();
        let _ = self.tell(ObserveMsg::Subscribe(Subscriber { filter, tx }));
        stream
    }

    /// A bounded broadcast of events from now on ([`EventFilter::DEFAULT`]: never the agent's
    /// text deltas, which only a lossless subscriber may ask for): a receiver that falls more than
    /// [`BROADCAST_CAPACITY`] (1,024) behind gets `RecvError::Lagged(n)` telling it how many it missed.
    pub fn events(&self) -> broadcast::Receiver<SessionEvent> {
        let (tx, rx) = broadcast::channel(BROADCAST_CAPACITY);
        let _ = self.tell(ObserveMsg::AddBroadcast(tx));
        rx
    }

    /// The session history (it starts with the first agent handoff).
    pub async fn history(&self) -> Result<Vec<ChatItem>, SessionError> {
        self.ask(ObserveMsg::History).await
    }

    /// One agent's chat context, if that agent has run in this session.
    pub async fn chat_context(
        &self,
        agent: impl Into<String>,
    ) -> Result<Option<Vec<ChatItem>>, SessionError> {
        let agent = agent.into();
        let ctx = self.ask(|reply| ObserveMsg::Context { agent, reply }).await?;
        Ok(ctx.map(|c| c.to_items()))
    }

    /// A snapshot of the session: its actor tree (each actor's kind, stable id, status and
    /// children; per toolset its tools and scope; per running call its name, arguments,
    /// elapsed time, updates and whether it can be cancelled), the current agent, agent and
    /// user state, the Activity's speeches, and what the ReplyCoalescer holds. Built from the
    /// actors' own answers (see [`SessionSnapshot`]).
    ///
    /// ```
    /// use colloquy_actors::Session;
    /// use colloquy_model::Agent;
    /// use colloquy_llm::ScriptedLlm;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), colloquy_actors::SessionError> {
    /// let session = Session::builder()
    ///     .llm(ScriptedLlm::new([]))
    ///     .start(Agent::new("travel", "You are a travel agent."))
    ///     .await?;
    /// let snapshot = session.inspect().await?;
    /// assert_eq!(snapshot.agent, "travel");
    /// assert!(snapshot.tree.find("activity:travel").is_some());
    /// println!("{}", serde_json::to_string_pretty(&snapshot).unwrap());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<SessionSnapshot, SessionError> {
        let part = self.ask(ObserveMsg::Inspect).await?;
        Ok(crate::messages::inspect::assemble(&self.actor.get_cell(), part).await)
    }

    /// Makes the actor with inspection id `target` (`session`, `activity:<agent>`,
    /// `toolset:<id>`, `tool_call:<call id>`) panic, to test failure isolation. Only with the
    /// `test-hooks` feature, which colloquy's own tests and the bench's chaos mode turn on.
    #[cfg(feature = "test-hooks")]
    pub fn inject_failure(&self, target: &str) {
        let _ = self.actor.cast(SessionMsg::InjectFailure(target.to_string()));
    }

    /// Ends the session gracefully with `reason` once speech `speech_id` is done (played out,
    /// interrupted or dropped), or after `watchdog` if it never is — what an end-call tool
    /// does with the speech that says goodbye.
    pub fn end_after_speech(
        &self,
        speech_id: impl Into<String>,
        reason: impl Into<String>,
        watchdog: Option<Duration>,
    ) -> Result<(), SessionError> {
        let (speech_id, reason) = (speech_id.into(), reason.into());
        self.tell(ToolMsg::EndAfterSpeech { speech_id, reason, watchdog })
    }

    /// True while the session runs (until it has closed or failed).
    pub fn is_running(&self) -> bool {
        use ractor::ActorStatus;
        matches!(
            self.actor.get_status(),
            ActorStatus::Unstarted | ActorStatus::Starting | ActorStatus::Running
        )
    }

    /// The Session actor's ractor cell: the root of the session's supervision tree, for hosts
    /// that walk ractor's tree themselves (`get_children`, `get_status`).
    pub fn actor_cell(&self) -> ractor::ActorCell {
        self.actor.get_cell()
    }

    /// The current agent and user state.
    pub async fn states(&self) -> Result<(AgentState, UserState), SessionError> {
        self.ask(ObserveMsg::States).await
    }

    /// Waits until the session is idle (decision 8): no speech is queued, playing or waiting
    /// for blocking tools, the user is not speaking, and no deferred reply is pending or being
    /// spoken. Background tools may still run (see [`SessionHandle::wait_for_quiet`]). Fails
    /// if the session closes first.
    pub async fn wait_for_idle(&self) -> Result<(), SessionError> {
        self.ask(|reply| ObserveMsg::WaitForIdle { quiet: false, reply }).await?
    }

    /// Holds the floor (for `RunContextExt::foreground`): waits until the session is idle with
    /// no deferred reply pending and no other hold, then keeps deferred replies and other
    /// holds out until [`SessionHandle::release_floor`].
    pub(crate) async fn hold_floor(&self) -> Result<u64, SessionError> {
        self.ask(ToolMsg::HoldFloor).await?
    }

    /// Ends a hold.
    pub(crate) fn release_floor(&self, hold: u64) {
        let _ = self.tell(ToolMsg::ReleaseFloor(hold));
    }

    /// Hands the conversation to `agent` (§11.3): the current agent finishes its speeches, its
    /// cancellable calls are cancelled and the others awaited, then `agent` takes over (its
    /// `on_enter` reply first). Turns that arrive meanwhile go to the new agent.
    pub async fn update_agent(&self, agent: Agent) -> Result<(), SessionError> {
        self.tell(HostMsg::Handoff { agent: Arc::new(agent) })
    }

    /// Cancels a running call (decision 20). Accepted at once: the call ends `cancelled`; a
    /// body that awaited `ctx.cancelled()` gets the grace period to clean up, any other is
    /// aborted. Fails for an unknown or finished call and for a tool that is not cancellable.
    pub async fn cancel_tool_call(&self, call_id: impl Into<String>) -> Result<(), CancelError> {
        let call_id = call_id.into();
        match self.actor.call(|reply| self.once(ToolMsg::CancelCall { call_id, reply }), None).await
        {
            Ok(CallResult::Success(result)) => result,
            _ => Err(CancelError::Closed),
        }
    }

    /// Lets a call waiting for approval run (a tool with `requires_approval`): its body starts
    /// now, and its deadline and heartbeat count from now. Fails for an unknown or finished
    /// call and for one that does not wait.
    pub async fn approve(&self, call_id: impl Into<String>) -> Result<(), ApprovalError> {
        self.answer_approval(call_id.into(), None).await
    }

    /// Rejects a call waiting for approval: it ends `rejected`, its body never runs, and the
    /// model reads the `approval_rejected` template (``` `NAME` was not approved: REASON ```)
    /// as a deferred reply. Fails as [`approve`](Self::approve) does.
    pub async fn reject(
        &self,
        call_id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Result<(), ApprovalError> {
        self.answer_approval(call_id.into(), Some(reason.into())).await
    }

    async fn answer_approval(
        &self,
        call_id: String,
        reason: Option<String>,
    ) -> Result<(), ApprovalError> {
        let message = |reply| self.once(ToolMsg::AnswerApproval { call_id, reason, reply });
        match self.actor.call(message, None).await {
            Ok(CallResult::Success(result)) => result,
            _ => Err(ApprovalError::Closed),
        }
    }

    /// The calls running now (blocking and background), in call-id order.
    pub async fn running_tool_calls(&self) -> Result<Vec<RunningToolCall>, SessionError> {
        self.ask(ObserveMsg::RunningCalls).await
    }

    /// Waits until the session is idle and no tool call runs, background calls included.
    pub async fn wait_for_quiet(&self) -> Result<(), SessionError> {
        self.ask(|reply| ObserveMsg::WaitForIdle { quiet: true, reply }).await?
    }

    /// Closes the session: interrupts every speech, drops the deferred replies still
    /// pending, cancels the cancellable calls and awaits the others (bounded by
    /// [`SessionOptions::drain_timeout`](crate::SessionOptions::drain_timeout), 30 s unless
    /// set otherwise), stops every actor and emits
    /// `session_closed`. Returns once the session actor has stopped. Closing a closed session
    /// is a no-op.
    pub async fn close(&self) -> Result<(), SessionError> {
        match self.close_with_reason(colloquy_model::CloseReason::Close.name()).await {
            Ok(_) | Err(SessionError::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Closes the session with `reason` (carried by `session_closed`) and returns what it held
    /// at the end: the final history and every agent's context, including items that tools
    /// still committed while it closed. Fails with [`SessionError::Closed`] if it was already
    /// closed.
    pub async fn close_with_reason(
        &self,
        reason: impl Into<String>,
    ) -> Result<ClosedSession, SessionError> {
        let reason = reason.into();
        let closed = self.ask(|reply| HostMsg::Close { reason, reply }).await;
        let _ = self.actor.wait(None).await;
        closed
    }

    /// Stops the session in this process but keeps it open in its store, so that
    /// [`SessionBuilder::resume`](crate::SessionBuilder::resume) continues it later (a deploy,
    /// a terminal chat that quits): it winds down as a close does — its calls drained
    /// (cancellable ones cancelled, the others awaited within `drain_timeout`), every record
    /// written — and ends with `session_closed` `suspended`, but its journal records no
    /// close, and leaves the calls whose bodies had not begun (waiting for approval or a
    /// place) waiting, for the resume (docs/durability.md#suspend). Without a store it is a
    /// close with reason `suspended`.
    pub async fn suspend(&self) -> Result<ClosedSession, SessionError> {
        self.close_with_reason(colloquy_model::CloseReason::Suspended.name()).await
    }
}

/// A lossless stream of session events; ends when the session closes, or after an
/// [`EventKind::StreamOverflowed`] item if its reader falls
/// [`SessionOptions::max_unread_events`](crate::SessionOptions::max_unread_events) behind.
///
/// [`EventKind::StreamOverflowed`]: colloquy_model::EventKind::StreamOverflowed
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<SessionEvent>,
}

impl EventStream {
    /// A new stream and the sender the Session fans events into. Its bound is only there so
    /// the Session can count what the reader left unread (`max_capacity - capacity`); the
    /// limit it enforces is [`crate::SessionOptions::max_unread_events`]. tokio allocates a channel's
    /// slots as they fill.
    pub(crate) fn channel() -> (mpsc::Sender<SessionEvent>, Self) {
        let (tx, rx) = mpsc::channel(1 << 30);
        (tx, Self { rx })
    }

    /// The next event; `None` once the session has closed and every event was read.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        self.rx.recv().await
    }

    /// The next event if one is ready.
    pub fn try_recv(&mut self) -> Option<SessionEvent> {
        self.rx.try_recv().ok()
    }
}

impl Stream for EventStream {
    type Item = SessionEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        self.rx.poll_recv(cx)
    }
}
