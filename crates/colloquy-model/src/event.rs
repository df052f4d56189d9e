//! Session events (docs/scenario-format.md "Events", §13), as the host receives them.
//!
//! Every event carries the virtual time it was emitted at; the JSON form is the trace form:
//! `{"at_ms": 10, "type": "tool_call_started", "call_id": "c1", "name": "get_weather"}`.
//! Types colloquy adds beyond the format carry an `x_` prefix.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::chat::ChatItem;
use crate::llm::{FinishReason, LlmErrorKind, Usage};
use crate::resumed::ResumedCall;

/// What the agent is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentState {
    /// The session is starting.
    Initializing,
    /// Waiting for the user.
    Listening,
    /// Waiting for the LLM or for blocking tools.
    Thinking,
    /// Playing out a reply.
    Speaking,
}

/// What the user is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UserState {
    /// Quiet, present.
    Listening,
    /// Talking.
    Speaking,
    /// Silent for longer than the away timeout.
    Away,
}

/// Why a speech exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SpeechSource {
    /// A reply to a user turn.
    UserTurn,
    /// `generate_reply`.
    GenerateReply,
    /// A deferred reply to background tool results.
    DeferredReply,
    /// `say`.
    Say,
    /// An agent's `on_enter`.
    OnEnter,
}

/// Terminal status of a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolCallStatus {
    /// The body finished with a value.
    Done,
    /// The output reports an error (decision 13).
    Error,
    /// The call was cancelled.
    Cancelled,
    /// The call ran past its deadline, or went without an update past its heartbeat; the
    /// model reads an error output saying so.
    TimedOut,
    /// The call waited for the host's approval and was rejected (by the host, the approval
    /// timeout, a handoff or a close); its body never ran, and the model reads
    /// the `approval_rejected` template (``` `NAME` was not approved: REASON ```) as an error
    /// output.
    Rejected,
}

/// Why the duplicate policy answered a call without running it (§6.1): what an
/// [`EventKind::ToolCallRefused`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalReason {
    /// `reject`: an equal call is running; the model read the reject text.
    Rejected,
    /// `confirm` without the confirm flag: the model was asked to confirm.
    ConfirmationNeeded,
    /// `replace`, but a running duplicate could not be cancelled; the model read why.
    NotReplaced,
}

impl RefusalReason {
    /// The reason as events spell it (`rejected`, `confirmation_needed`, `not_replaced`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::ConfirmationNeeded => "confirmation_needed",
            Self::NotReplaced => "not_replaced",
        }
    }
}

/// State of a deferred reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplyStatus {
    /// Admitted: its speech is created.
    Scheduled,
    /// Its speech finished and said something.
    Completed,
    /// Its speech was interrupted (it is not rescheduled).
    Interrupted,
    /// The model had nothing to add.
    Skipped,
}

/// Where an error event comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorSource {
    /// The LLM request or its stream.
    Llm,
    /// A tool or toolset.
    Tool,
    /// The speech sink.
    Sink,
    /// The session runtime itself.
    Session,
}

impl ToolCallStatus {
    /// The status as events spell it (`done`, `error`, `cancelled`, `timed_out`, `rejected`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed_out",
            Self::Rejected => "rejected",
        }
    }
}

impl ErrorSource {
    /// The source as events spell it (`llm`, `tool`, `sink`, `session`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Llm => "llm",
            Self::Tool => "tool",
            Self::Sink => "sink",
            Self::Session => "session",
        }
    }
}

/// One session event with its emission time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SessionEvent {
    /// Virtual milliseconds since the session started.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The agent state changed.
    AgentState {
        /// New state.
        state: AgentState,
    },
    /// The user state changed.
    UserState {
        /// New state.
        state: UserState,
    },
    /// A speech was created.
    SpeechCreated {
        /// `s1`, `s2`, … in creation order.
        speech_id: String,
        /// Why it exists.
        source: SpeechSource,
    },
    /// A speech finished playing or was interrupted.
    SpeechDone {
        /// The speech.
        speech_id: String,
        /// True when it was interrupted.
        interrupted: bool,
    },
    /// Every call of one LLM step has produced its output.
    FunctionToolsExecuted {
        /// Call ids in the order their outputs became available.
        call_ids: Vec<String>,
    },
    /// A tool call was registered and started.
    ToolCallStarted {
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
    },
    /// A tool posted an update (`ctx.update()`).
    ToolCallUpdated {
        /// `<call_id>` for the first update, `<call_id>_update_<n>` for later ones.
        id: String,
        /// The call id.
        call_id: String,
        /// The raw message (a value as compact JSON), before wrapping.
        message: String,
        /// Whether the update asked for no reply.
        silent: bool,
    },
    /// A tool call ended; exactly once per started call.
    ToolCallEnded {
        /// `<call_id>` (or `<call_id>_final` once the call has posted updates).
        id: String,
        /// The call id.
        call_id: String,
        /// Terminal status.
        status: ToolCallStatus,
        /// The result or error text, `null` when there is none.
        message: Option<String>,
        /// The result was remembered from an earlier call (`idempotent` tools) and the body
        /// did not run; left out of the event when false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
    },
    /// A call the model emitted under `tool_choice = none` was dropped (decision 10).
    ToolCallDropped {
        /// The call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The duplicate policy answered a call without running it: no `tool_call_started` or
    /// `tool_call_ended` follows for it, and its output (the reject or confirm text, or the
    /// error) reaches the history as usual (colloquy's addition, decision 47).
    #[serde(rename = "x_tool_call_refused")]
    ToolCallRefused {
        /// The refused call's id.
        call_id: String,
        /// The tool name.
        name: String,
        /// Why.
        reason: RefusalReason,
        /// The call ids of the running calls it duplicates, sorted.
        duplicates: Vec<String>,
    },
    /// An attempt of a tool marked safe to retry failed and the call runs again after its
    /// backoff (colloquy's addition, decision 59). The call keeps its one
    /// `tool_call_started` and ends once.
    #[serde(rename = "x_tool_call_retry")]
    ToolCallRetry {
        /// The call id.
        call_id: String,
        /// The attempt about to run (2 for the first retry).
        attempt: u32,
        /// Why the previous attempt failed (its error, or its timeout).
        reason: String,
    },
    /// A started call waits for the host's approval (`SessionHandle::approve` or `reject`)
    /// before its body runs (colloquy's addition, decision 58).
    #[serde(rename = "x_tool_approval_requested")]
    ToolApprovalRequested {
        /// The waiting call's id.
        call_id: String,
        /// The tool name.
        name: String,
        /// Its canonical argument text.
        arguments: String,
    },
    /// The host approved a waiting call: its body runs now.
    #[serde(rename = "x_tool_call_approved")]
    ToolCallApproved {
        /// The call's id.
        call_id: String,
    },
    /// A deferred reply changed state.
    ToolReplyUpdated {
        /// The call ids of the pairs it delivers, in enqueue order.
        update_ids: Vec<String>,
        /// Its state.
        status: ReplyStatus,
        /// The reply's speech.
        speech_id: String,
        /// True when delivered by another agent than the one that received the eager insert.
        handoff: bool,
    },
    /// The agent changed (the first event of a session has no old agent).
    AgentHandoff {
        /// Previous agent.
        old_agent: Option<String>,
        /// New agent.
        new_agent: String,
    },
    /// An error reached the session; the session lives on.
    Error {
        /// Where it came from.
        source: ErrorSource,
        /// What went wrong.
        message: String,
        /// For an LLM failure, its kind (absent for other sources).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_error: Option<LlmErrorKind>,
    },
    /// An LLM response ended and its provider said why, or how many tokens it took
    /// (colloquy's addition; a model that reports neither, like the scripted one, emits none).
    #[serde(rename = "x_llm_step_ended")]
    LlmStepEnded {
        /// The speech the response belongs to.
        speech_id: String,
        /// Why the model stopped, if it said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<FinishReason>,
        /// Token counts, if reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The current user turn has made its `max_tool_calls_per_turn` tool calls (its deferred
    /// replies included): calls past it are answered with an error and not run, and requests
    /// go out with `tool_choice` none until the next user turn (colloquy's addition).
    #[serde(rename = "x_tool_budget_exhausted")]
    ToolBudgetExhausted {
        /// The limit (`SessionOptions::max_tool_calls_per_turn`).
        limit: u32,
    },
    /// The last item of a lossless event stream whose reader left this many events unread:
    /// the stream ends here (its memory would grow without bound); the session goes on
    /// (colloquy's addition).
    #[serde(rename = "x_stream_overflowed")]
    StreamOverflowed {
        /// The limit it reached (`SessionOptions::max_unread_events`).
        unread: usize,
    },
    /// The session resumed from its store after the process that ran it ended (colloquy's
    /// addition, docs/durability.md): the calls that were running then, and what became of
    /// each. It follows the resumed agent's `agent_handoff`.
    #[serde(rename = "x_session_resumed")]
    SessionResumed {
        /// The calls in doubt, in the order they started.
        in_doubt: Vec<ResumedCall>,
    },
    /// The session moved to another node of a cluster (colloquy's addition,
    /// docs/cluster.md#moves): its node was lost or drained, and node `to` resumed it from its
    /// journal. A cluster's events carry it in place of `x_session_resumed`, with the same
    /// calls in doubt; it follows the resumed agent's `agent_handoff`.
    #[serde(rename = "x_session_moved")]
    SessionMoved {
        /// The node it ran on.
        from: String,
        /// The node it runs on now.
        to: String,
        /// The calls that were running on `from`, and what became of each.
        calls_in_doubt: Vec<ResumedCall>,
    },
    /// The session's store failed to keep its journal (colloquy's addition): the session
    /// closes with reason `store_failed` rather than go on as if it were durable, or with
    /// `lease_lost` when another process took the session over.
    #[serde(rename = "x_store_error")]
    StoreError {
        /// What failed.
        message: String,
    },
    /// The session has closed; the last event of a session.
    SessionClosed {
        /// Why.
        reason: String,
    },
    /// An item was committed to the session history (colloquy's addition, for transcripts).
    #[serde(rename = "x_conversation_item_added")]
    ConversationItemAdded {
        /// The item (shared with the history; derefs to [`ChatItem`]).
        item: Arc<ChatItem>,
    },
    /// The agent's text as it streams (colloquy's addition). Sent only to subscribers that ask
    /// for [`EventType::AgentText`] ([`EventFilter::DEFAULT`] leaves it out): a chat host shows
    /// a reply as it arrives without a speech sink. A speech's deltas come in order, before its
    /// `speech_done`, which ends them; the deltas of one step, concatenated, are the text of
    /// that step's assistant message, unless a sink played less of it before an interruption
    /// (the committed message, `interrupted: true`, then says what was heard). A `say` is one
    /// delta with its whole text.
    #[serde(rename = "x_agent_text")]
    AgentText {
        /// The speech speaking.
        speech_id: String,
        /// The LLM step of the speech (1 = the first; a `say` is step 1): each step with text
        /// is one assistant message, so a new step starts a new paragraph.
        step: u32,
        /// The text that arrived since the previous delta of this step (never empty).
        delta: String,
    },
}

/// The type of an event, without its data: what an [`EventFilter`] selects by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventType {
    /// [`EventKind::AgentState`].
    AgentState,
    /// [`EventKind::UserState`].
    UserState,
    /// [`EventKind::SpeechCreated`].
    SpeechCreated,
    /// [`EventKind::SpeechDone`].
    SpeechDone,
    /// [`EventKind::FunctionToolsExecuted`].
    FunctionToolsExecuted,
    /// [`EventKind::ToolCallStarted`].
    ToolCallStarted,
    /// [`EventKind::ToolCallUpdated`].
    ToolCallUpdated,
    /// [`EventKind::ToolCallEnded`].
    ToolCallEnded,
    /// [`EventKind::ToolCallDropped`].
    ToolCallDropped,
    /// [`EventKind::ToolCallRefused`].
    ToolCallRefused,
    /// [`EventKind::ToolCallRetry`].
    ToolCallRetry,
    /// [`EventKind::ToolApprovalRequested`].
    ToolApprovalRequested,
    /// [`EventKind::ToolCallApproved`].
    ToolCallApproved,
    /// [`EventKind::ToolReplyUpdated`].
    ToolReplyUpdated,
    /// [`EventKind::AgentHandoff`].
    AgentHandoff,
    /// [`EventKind::Error`].
    Error,
    /// [`EventKind::LlmStepEnded`].
    LlmStepEnded,
    /// [`EventKind::StreamOverflowed`].
    StreamOverflowed,
    /// [`EventKind::ToolBudgetExhausted`].
    ToolBudgetExhausted,
    /// [`EventKind::SessionResumed`].
    SessionResumed,
    /// [`EventKind::SessionMoved`].
    SessionMoved,
    /// [`EventKind::StoreError`].
    StoreError,
    /// [`EventKind::SessionClosed`].
    SessionClosed,
    /// [`EventKind::ConversationItemAdded`].
    ConversationItemAdded,
    /// [`EventKind::AgentText`]: off unless a subscriber asks for it.
    AgentText,
}

impl EventKind {
    /// An error event without an LLM error kind.
    pub fn error(source: ErrorSource, message: impl Into<String>) -> Self {
        EventKind::Error { source, message: message.into(), llm_error: None }
    }

    /// This event's type.
    pub fn event_type(&self) -> EventType {
        match self {
            EventKind::AgentState { .. } => EventType::AgentState,
            EventKind::UserState { .. } => EventType::UserState,
            EventKind::SpeechCreated { .. } => EventType::SpeechCreated,
            EventKind::SpeechDone { .. } => EventType::SpeechDone,
            EventKind::FunctionToolsExecuted { .. } => EventType::FunctionToolsExecuted,
            EventKind::ToolCallStarted { .. } => EventType::ToolCallStarted,
            EventKind::ToolCallUpdated { .. } => EventType::ToolCallUpdated,
            EventKind::ToolCallEnded { .. } => EventType::ToolCallEnded,
            EventKind::ToolCallDropped { .. } => EventType::ToolCallDropped,
            EventKind::ToolCallRefused { .. } => EventType::ToolCallRefused,
            EventKind::ToolCallRetry { .. } => EventType::ToolCallRetry,
            EventKind::ToolApprovalRequested { .. } => EventType::ToolApprovalRequested,
            EventKind::ToolCallApproved { .. } => EventType::ToolCallApproved,
            EventKind::ToolReplyUpdated { .. } => EventType::ToolReplyUpdated,
            EventKind::AgentHandoff { .. } => EventType::AgentHandoff,
            EventKind::Error { .. } => EventType::Error,
            EventKind::LlmStepEnded { .. } => EventType::LlmStepEnded,
            EventKind::StreamOverflowed { .. } => EventType::StreamOverflowed,
            EventKind::ToolBudgetExhausted { .. } => EventType::ToolBudgetExhausted,
            EventKind::SessionResumed { .. } => EventType::SessionResumed,
            EventKind::SessionMoved { .. } => EventType::SessionMoved,
            EventKind::StoreError { .. } => EventType::StoreError,
            EventKind::SessionClosed { .. } => EventType::SessionClosed,
            EventKind::ConversationItemAdded { .. } => EventType::ConversationItemAdded,
            EventKind::AgentText { .. } => EventType::AgentText,
        }
    }
}

/// Which event types a subscriber receives. A host that only follows its tools (LiveKit's
/// `session.on("tool_execution_updated", …)`) subscribes to
/// [`EventFilter::tool_execution`]; events of other types are then never copied or sent to it
/// (a turn emits some thirty events, most of them state changes and history items). A filtered
/// stream still ends when the session closes.
///
/// The agent's text as it streams ([`EventType::AgentText`]) is the one type a subscriber gets
/// only by asking: `subscribe()` delivers [`EventFilter::DEFAULT`], every other type; ask with
/// [`EventFilter::ALL`], [`EventFilter::agent_text`] or `.with(EventType::AgentText)`. A
/// session where no subscriber asked sends no message per text delta.
///
/// ```
/// use colloquy_model::{EventFilter, EventType};
/// let tools = EventFilter::tool_execution();
/// assert!(tools.contains(EventType::ToolCallEnded));
/// assert!(!tools.contains(EventType::AgentState));
/// let mine = EventFilter::only([EventType::Error]).with(EventType::SessionClosed);
/// assert!(mine.contains(EventType::SessionClosed));
/// assert!(EventFilter::DEFAULT.contains(EventType::ConversationItemAdded));
/// assert!(!EventFilter::DEFAULT.contains(EventType::AgentText));
/// assert!(EventFilter::ALL.contains(EventType::AgentText));
/// assert_eq!(EventFilter::DEFAULT.with(EventType::AgentText), EventFilter::ALL);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventFilter(u32);

// One bit per event type.
const _: () = assert!((EventType::AgentText as u32) < 32, "keep the last type here");

impl EventFilter {
    /// Every event, the agent's text deltas included.
    pub const ALL: EventFilter = EventFilter(u32::MAX);
    /// Every event but the agent's text deltas: what `subscribe()` and `events()` deliver (and
    /// the scenario traces record). Add the text with `.with(EventType::AgentText)`.
    pub const DEFAULT: EventFilter = EventFilter(!(1 << EventType::AgentText as u32));
    /// No event (add types with [`with`](Self::with)).
    pub const NONE: EventFilter = EventFilter(0);

    /// Exactly these types.
    pub fn only(types: impl IntoIterator<Item = EventType>) -> Self {
        types.into_iter().fold(Self::NONE, Self::with)
    }

    /// The tool lifecycle: calls started, waiting for approval, approved, updated, retried,
    /// ended, dropped and refused, and the
    /// deferred replies that deliver their results.
    pub fn tool_execution() -> Self {
        Self::only([
            EventType::ToolCallStarted,
            EventType::ToolCallUpdated,
            EventType::ToolCallEnded,
            EventType::ToolCallDropped,
            EventType::ToolCallRefused,
            EventType::ToolCallRetry,
            EventType::ToolApprovalRequested,
            EventType::ToolCallApproved,
            EventType::ToolReplyUpdated,
        ])
    }

    /// What a chat display follows: the agent's text as it streams and the speech events that
    /// frame it (`speech_created`, `x_agent_text`, `speech_done`).
    pub fn agent_text() -> Self {
        Self::only([EventType::SpeechCreated, EventType::AgentText, EventType::SpeechDone])
    }

    /// These types and `event_type`.
    pub fn with(self, event_type: EventType) -> Self {
        EventFilter(self.0 | 1 << event_type as u32)
    }

    /// Whether events of this type pass.
    pub fn contains(self, event_type: EventType) -> bool {
        self.0 & (1 << event_type as u32) != 0
    }
}

impl Default for EventFilter {
    /// [`EventFilter::DEFAULT`]: every event but the agent's text deltas.
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_select_by_type() {
        let e = EventKind::error(ErrorSource::Llm, "x");
        assert_eq!(e.event_type(), EventType::Error);
        assert!(EventFilter::ALL.contains(e.event_type()));
        assert!(!EventFilter::NONE.contains(e.event_type()));
        assert!(!EventFilter::tool_execution().contains(e.event_type()));
        let f = EventFilter::only([EventType::Error, EventType::SessionClosed]);
        assert!(f.contains(EventType::Error) && f.contains(EventType::SessionClosed));
        assert!(!f.contains(EventType::ToolCallStarted));
        assert_eq!(EventFilter::default(), EventFilter::DEFAULT);
    }

    #[test]
    fn agent_text_is_asked_for() {
        let text = EventKind::AgentText { speech_id: "s1".into(), step: 1, delta: "Hi".into() };
        assert_eq!(text.event_type(), EventType::AgentText);
        assert!(!EventFilter::DEFAULT.contains(EventType::AgentText));
        assert!(EventFilter::ALL.contains(EventType::AgentText));
        let chat = EventFilter::agent_text();
        assert!(chat.contains(EventType::AgentText) && chat.contains(EventType::SpeechDone));
        assert!(!chat.contains(EventType::ToolCallStarted));
        let e = SessionEvent { at_ms: 5, kind: text };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"at_ms":5,"type":"x_agent_text","speech_id":"s1","step":1,"delta":"Hi"}"#
        );
        assert_eq!(serde_json::from_str::<SessionEvent>(&json).unwrap(), e);
    }

    #[test]
    fn events_serialize_in_trace_shape() {
        let e = SessionEvent {
            at_ms: 310,
            kind: EventKind::ToolCallEnded {
                id: "c1".into(),
                call_id: "c1".into(),
                status: ToolCallStatus::Done,
                message: None,
                cached: false,
            },
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"at_ms":310,"type":"tool_call_ended","id":"c1","call_id":"c1","status":"done","message":null}"#
        );
        let refused = SessionEvent {
            at_ms: 300,
            kind: EventKind::ToolCallRefused {
                call_id: "c2".into(),
                name: "refund".into(),
                reason: RefusalReason::Rejected,
                duplicates: vec!["c1".into()],
            },
        };
        assert_eq!(
            serde_json::to_string(&refused).unwrap(),
            r#"{"at_ms":300,"type":"x_tool_call_refused","call_id":"c2","name":"refund","reason":"rejected","duplicates":["c1"]}"#
        );
        assert!(EventFilter::tool_execution().contains(refused.kind.event_type()));
    }

    #[test]
    fn approval_events_and_the_rejected_status_serialize_as_traces_spell_them() {
        let asked = SessionEvent {
            at_ms: 10,
            kind: EventKind::ToolApprovalRequested {
                call_id: "c1".into(),
                name: "refund".into(),
                arguments: r#"{"order_id": "5"}"#.into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&asked).unwrap(),
            r#"{"at_ms":10,"type":"x_tool_approval_requested","call_id":"c1","name":"refund","arguments":"{\"order_id\": \"5\"}"}"#
        );
        let approved =
            SessionEvent { at_ms: 20, kind: EventKind::ToolCallApproved { call_id: "c1".into() } };
        assert_eq!(
            serde_json::to_string(&approved).unwrap(),
            r#"{"at_ms":20,"type":"x_tool_call_approved","call_id":"c1"}"#
        );
        assert!(EventFilter::tool_execution().contains(asked.kind.event_type()));
        assert!(EventFilter::tool_execution().contains(approved.kind.event_type()));
        assert_eq!(ToolCallStatus::Rejected.as_str(), "rejected");
        assert_eq!(serde_json::to_value(ToolCallStatus::Rejected).unwrap(), "rejected");
    }
}
