//! The Session's messages. Hosts never build these: `SessionHandle` wraps them.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_llm::ToolChoice;
use colloquy_model::{
    Agent, AgentState, ChatContext, ChatItem, EventFilter, FunctionCall, FunctionTool, RunResult,
    SessionEvent, UserState,
};
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::{broadcast, mpsc};

use super::activity::ActivityMsg;
use super::coalescer::{CoalescerMsg, PendingReply};
use super::toolset::ToolsetMsg;
use crate::types::error::{CancelError, SessionError};

/// What a session held when it closed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClosedSession {
    /// Why it closed.
    pub reason: String,
    /// The final session history (its items shared with the closed session's contexts, not
    /// copied: closing a long conversation copies pointers).
    pub history: ChatContext,
    /// Every agent's final chat context, by agent id.
    pub contexts: std::collections::BTreeMap<String, ChatContext>,
}

/// A call running now (`SessionHandle::running_tool_calls`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningToolCall {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Canonical argument text.
    pub arguments: String,
    /// Whether it can be cancelled.
    pub cancellable: bool,
    /// Whether it waits for the host's approval (`SessionHandle::approve`): its body has not
    /// started.
    pub awaiting_approval: bool,
}

/// Which calls a set of mocks applies to (the testing API, §17.3).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MockScope {
    /// Calls made while this agent is current; these override session mocks of the same name.
    Agent(String),
    /// Calls of every agent.
    Session,
}

/// The Session's answer.
pub(crate) struct SessionPart {
    pub at_ms: u64,
    pub session_id: String,
    pub agent: String,
    pub agent_state: AgentState,
    pub user_state: UserState,
    pub closing: bool,
    pub activity: ActorRef<ActivityMsg>,
    pub coalescer: Option<ActorRef<CoalescerMsg>>,
    /// The toolsets the Session supervises now (session-scoped ones, and agent-scoped ones
    /// between two agents during a handoff).
    pub toolsets: Vec<ActorRef<ToolsetMsg>>,
}

/// The host's close callback: called once with the close reason, after `session_closed`.
pub(crate) type CloseCallback = Arc<dyn Fn(&str) + Send + Sync>;

/// A lossless event subscriber: the events its filter passes go to `tx`.
pub(crate) struct Subscriber {
    pub filter: EventFilter,
    pub tx: mpsc::Sender<SessionEvent>,
}

/// Everything a Session actor handles, grouped by who sends it.
pub(crate) enum SessionMsg {
    /// From a `SessionHandle`: the conversation, driven by the host app.
    Host(HostMsg),
    /// From a `SessionHandle` a tool holds (`ctx.session()`), or the host on its behalf.
    Tool(ToolMsg),
    /// From a `SessionHandle`: questions and subscriptions that change nothing.
    Observe(ObserveMsg),
    /// From the session's own actors: its Activity, toolsets and ReplyCoalescer.
    Child(ChildMsg),
    /// From the session's own timers.
    Timer(TimerMsg),
    /// From a `SessionHandle` with a command id: a host or tool message run once per id
    /// (docs/durability.md#commands).
    Once { id: Arc<str>, message: Box<SessionMsg> },
    /// Make the actor with this inspection id panic (failure-isolation tests).
    #[cfg(feature = "test-hooks")]
    InjectFailure(String),
}

/// The conversation, as the host app drives it.
pub(crate) enum HostMsg {
    /// The session resumed from its store: settle the calls that were running when its
    /// process ended (sent by the Session to itself as it starts).
    Resumed { in_doubt: Vec<colloquy_store::CallInDoubt>, owed: Vec<colloquy_store::OwedReply> },
    /// Commit a user message and start a reply to it.
    UserTurn { text: String, reply: RpcReplyPort<Result<(), SessionError>> },
    /// Queue a user message behind the current speech and reply to it when its turn comes
    /// (docs/decisions.md#queued-user-input).
    UserInput { text: String, reply: RpcReplyPort<Result<(), SessionError>> },
    /// A user turn whose reply is watched to its end (the testing API).
    Run { text: String, reply: RpcReplyPort<Result<RunResult, SessionError>> },
    /// Start a reply with extra instructions.
    GenerateReply {
        instructions: Option<String>,
        tool_choice: Option<ToolChoice>,
        reply: RpcReplyPort<Result<(), SessionError>>,
    },
    /// Speak a fixed text.
    Say { text: String, reply: RpcReplyPort<Result<(), SessionError>> },
    /// Interrupt the current speech (and queued ones that allow it); replies when done.
    Interrupt { reply: RpcReplyPort<()> },
    /// The user started or stopped speaking.
    SetUserSpeaking(bool),
    /// Replace the mocked tool bodies of one scope.
    MockTools {
        scope: MockScope,
        mocks: Vec<FunctionTool>,
        reply: RpcReplyPort<Result<(), SessionError>>,
    },
    /// Hand the conversation to another agent.
    Handoff { agent: Arc<Agent> },
    /// Close the session; replies once it has closed, with its final history and contexts.
    Close { reason: String, reply: RpcReplyPort<ClosedSession> },
    /// The host app dropped every handle of a session it started without a `Host`: close it
    /// (reason `handles_dropped`).
    Released,
}

/// What a tool asks of its session.
pub(crate) enum ToolMsg {
    /// Hold the floor (a tool's `foreground`); answers with the hold's id once granted.
    HoldFloor(RpcReplyPort<Result<u64, SessionError>>),
    /// End a hold.
    ReleaseFloor(u64),
    /// End the session once this speech is done, or after the watchdog (end-call tools).
    EndAfterSpeech { speech_id: String, reason: String, watchdog: Option<std::time::Duration> },
    /// Cancel a running call (the cancel companion tool, and the host API).
    CancelCall { call_id: String, reply: RpcReplyPort<Result<(), CancelError>> },
    /// Approve (`reason` `None`) or reject a call waiting for approval (the host API).
    AnswerApproval {
        call_id: String,
        reason: Option<String>,
        reply: RpcReplyPort<Result<(), crate::types::error::ApprovalError>>,
    },
}

/// Questions and subscriptions: none changes the conversation.
pub(crate) enum ObserveMsg {
    /// Add a lossless event subscriber.
    Subscribe(Subscriber),
    /// Add a lagging (broadcast) event subscriber.
    AddBroadcast(broadcast::Sender<SessionEvent>),
    /// The session history.
    History(RpcReplyPort<Vec<ChatItem>>),
    /// One agent's chat context.
    Context { agent: String, reply: RpcReplyPort<Option<Arc<ChatContext>>> },
    /// The Session's part of a snapshot; the handle asks the children.
    Inspect(RpcReplyPort<SessionPart>),
    /// The current agent and user state.
    States(RpcReplyPort<(AgentState, UserState)>),
    /// The calls running now.
    RunningCalls(RpcReplyPort<Vec<RunningToolCall>>),
    /// Replies once the session is idle; with `quiet`, once no tool call runs either.
    WaitForIdle { quiet: bool, reply: RpcReplyPort<Result<(), SessionError>> },
}

/// What the session's own actors tell it.
pub(crate) enum ChildMsg {
    /// An event or a commit (see [`Report`]).
    Report(Report),
    /// Several reports that happened together, applied in order: one mailbox message instead
    /// of one each (a toolset's update emits its event and commits its pair at once).
    Reports(Vec<Report>),
    /// A speech starts an LLM step: `reports` of its previous step not sent yet are applied
    /// first, in order; the agent state becomes `thinking` and the answer is the agent's context
    /// for the request (with running-call placeholders). `resumed`: speech `speech_id` just
    /// took the floor back after waiting for its blocking tools (what
    /// `SpeechWaiting { waiting: false }` says, in the same message).
    BeginLlmStep {
        agent: Arc<str>,
        speech_id: String,
        resumed: bool,
        reports: Vec<Report>,
        reply: RpcReplyPort<Option<Arc<ChatContext>>>,
    },
    /// A speech released the floor to wait for its blocking tools (`true`: the agent is
    /// thinking meanwhile), or took it back.
    SpeechWaiting { speech_id: String, waiting: bool },
    /// A tool returned an agent to hand off to.
    Handoff { agent: Arc<Agent> },
    /// The Activity finished its speeches after `Drain`; `kept` are the toolsets it handed
    /// over (now linked to the Session).
    ActivityDrained { kept: BTreeMap<String, ActorRef<ToolsetMsg>> },
    /// The activity finished its speeches after a close request.
    ActivityClosed,
    /// A toolset registered and started a call (emits `tool_call_started`).
    CallRegistered {
        /// Shared with the Session's running-call index (and boxed so: the largest field of
        /// any message, it would size every Session message).
        call: Arc<FunctionCall>,
        toolset: ActorRef<ToolsetMsg>,
        cancellable: bool,
        agent_scoped: bool,
        /// Run again after a resume: its start is in the journal already.
        resumed: bool,
    },
    /// In a durable session: an `idempotent` tool's result was remembered for `window`
    /// under `key` (journaled, so a resume remembers it too).
    ResultRemembered { key: String, result: Box<colloquy_store::RememberedResult> },
    /// In a durable session: a registered call waits for approval or a place before its body.
    CallWaiting { call_id: String },
    /// In a durable session: a call that waited is let through; its body starts once that is
    /// on disk (the toolset hears `Journaled`).
    CallLetThrough { call_id: String },
    /// A toolset's pair waits for a deferred reply and the coalescer does not run yet: spawn it
    /// and forward the pair (see `SessionLink::enqueue_reply`).
    Enqueue(PendingReply),
    /// The ReplyCoalescer offers pending pairs; the Session answers `Admitted` or `Busy`.
    AdmitReply { batch: Vec<Arc<PendingReply>>, coalescer: ActorRef<CoalescerMsg> },
}

/// The session's own timers firing.
pub(crate) enum TimerMsg {
    /// The end-after-speech watchdog fired before its speech was done.
    EndNow,
    /// A drain (handoff or close) ran out of time.
    DrainTimeout,
    /// The user-away timer of this generation fired.
    AwayTimeout(u64),
    /// The store failed to keep the journal (why).
    StoreFailed(String),
    /// Another process took the session's lease over: this one may no longer write (why).
    LeaseLost(String),
    /// The journal is on disk through this record (sent after a batch that started calls).
    Stored(u64),
}

impl From<HostMsg> for SessionMsg {
    fn from(message: HostMsg) -> Self {
        Self::Host(message)
    }
}

impl From<ToolMsg> for SessionMsg {
    fn from(message: ToolMsg) -> Self {
        Self::Tool(message)
    }
}

impl From<ObserveMsg> for SessionMsg {
    fn from(message: ObserveMsg) -> Self {
        Self::Observe(message)
    }
}

impl From<ChildMsg> for SessionMsg {
    fn from(message: ChildMsg) -> Self {
        Self::Child(message)
    }
}

impl From<TimerMsg> for SessionMsg {
    fn from(message: TimerMsg) -> Self {
        Self::Timer(message)
    }
}

/// What a session's own actors and tasks report to it, in the order it happened.
pub(crate) enum Report {
    /// Fan an event out to subscribers (and track running calls).
    Emit(SessionEvent),
    /// Insert items into an agent's context and the history, by timestamp. `speech_id` names
    /// the speech that produced them; `awaits_reply` the update id of a synthetic pair that
    /// waits for a deferred reply.
    Commit {
        agent: Arc<str>,
        speech_id: Option<String>,
        items: Vec<ChatItem>,
        awaits_reply: Option<String>,
    },
    /// A speech finished (its task ended, or it was dropped from the queue).
    SpeechDone { speech_id: String, interrupted: bool },
    /// A speech changed the agent state (it started speaking).
    AgentState(AgentState),
}
