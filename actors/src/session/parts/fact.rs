//! What a Session's transitions change, as plain data: each fact names something that happened
//! to the session, and the concern that owns the state it changes applies it (`dispatch.rs`
//! routes each fact to its concerns). Applying a fact decides nothing and sends nothing: a
//! decider has already chosen, and the events and messages that follow are its own.
//!
//! A fact carries no actor address, reply port, timer, span or agent code: those handles live
//! beside the state they serve, installed and taken by name in the decider
//! (docs/decisions.md#session-facts). A fact borrows what the decider holds (it is `Copy`):
//! applying one copies only what a concern keeps, and a journal turns it into a record of its
//! own format.

use std::sync::Arc;

use colloquy_model::{AgentState, ChatItem, FunctionCall, ResumedCall, SpeechSource, UserState};
use serde_json::Value;

use crate::messages::SpeechContent;

/// Work that arrives while a handoff is in progress, for the new agent (decision 22).
#[derive(Clone, Debug)]
pub(crate) enum QueuedWork {
    /// A user turn (its message is committed when replayed, to the new agent).
    UserTurn(String),
    /// A queued user input (its message is committed when its reply begins).
    UserInput(String),
    /// Any other speech.
    Speech(SpeechSource, SpeechContent),
}

/// One change to a Session's state.
///
/// A fact says all that happened, even what no concern keeps today (a speech's source, whether
/// it was interrupted, the agent a handoff goes to): the trace shows it, and a journal needs it.
#[derive(Clone, Copy, Debug)]
#[expect(dead_code, reason = "some fields are for the trace and the journal only")]
pub(crate) enum Fact<'a> {
    // The conversation.
    /// Items a speech (`speech_id`), the host or a toolset produced, committed to `agent`'s
    /// context and the history.
    Committed { agent: &'a str, speech_id: Option<&'a str>, items: &'a [Arc<ChatItem>] },
    /// An agent entered: `item` is its `agent_handoff` marker (the history only).
    AgentEntered { item: &'a Arc<ChatItem> },
    /// The session started from a stored history (`SessionBuilder::history`), all of it in the
    /// first agent's context but its handoff markers: already in the state, a journal needs it.
    HistorySeeded { agent: &'a str, items: &'a [ChatItem] },
    /// The pair `update_id` was copied from `from`'s context into `to`'s (decision 4).
    PairMoved { from: &'a str, to: &'a str, update_id: &'a str },
    /// A queued user input waits for its reply speech `speech_id` to begin.
    InputQueued { speech_id: &'a str, text: &'a str },
    /// The input speech `speech_id` replies to was committed.
    InputTaken { speech_id: &'a str },

    // The floor.
    /// A user turn began (a new turn's span).
    TurnBegan,
    /// Speech `speech_id` was created (numbered in creation order).
    SpeechCreated { speech_id: &'a str, source: SpeechSource },
    /// Speech `speech_id` lent the floor to wait for its blocking tools, or took it back.
    SpeechWaiting { speech_id: &'a str, waiting: bool },
    /// Speech `speech_id` is done.
    SpeechDone { speech_id: &'a str, interrupted: bool },
    /// The Activity was lost with every speech it had.
    SpeechesLost,
    /// A tool asked to hold the floor: its hold is the next number.
    HoldAsked,
    /// Hold `hold` is in force.
    HoldGranted { hold: u64 },
    /// Hold `hold` ended.
    HoldReleased { hold: u64 },
    /// The agent state changed.
    AgentStateChanged(AgentState),
    /// The user state changed.
    UserStateChanged(UserState),

    // The tools.
    /// A toolset registered a call.
    /// `resumed`: run again after a resume (its start is in the journal already).
    CallStarted {
        call: &'a Arc<FunctionCall>,
        cancellable: bool,
        agent_scoped: bool,
        resumed: bool,
    },
    /// Call `call_id` waits for the host's approval.
    ApprovalAsked { call_id: &'a str },
    /// Call `call_id` was approved.
    CallApproved { call_id: &'a str },
    /// Call `call_id` ended.
    CallEnded { call_id: &'a str },
    /// An `idempotent` tool's result was remembered (durable sessions only).
    ResultRemembered { key: &'a str, result: &'a colloquy_store::RememberedResult },
    /// A resume handed these calls to the Activity to run again: running until registered.
    RerunsAsked { call_ids: &'a [String] },
    /// A drain ran out of time: calls handed on to run again and not registered yet never
    /// will be.
    RerunsAbandoned,
    /// Call `call_id` waits for approval or a place before its body (durable sessions only).
    CallWaiting { call_id: &'a str },
    /// Call `call_id`, which waited, is let through to its body (durable sessions only).
    CallLetThrough { call_id: &'a str },
    /// An inserted pair waits for its deferred reply.
    ReplyAwaited { update_id: &'a str },
    /// The ReplyCoalescer was told the floor is free.
    CoalescerInvited,
    /// The ReplyCoalescer offered what it held.
    CoalescerOffered,
    /// A reply takes these pairs.
    RepliesTaken { update_ids: &'a [String] },
    /// Speech `speech_id` delivers the reply to `update_ids` (`handoff`: another agent than
    /// the one that received them).
    ReplySpeechStarted { speech_id: &'a str, update_ids: &'a [String], handoff: bool },
    /// Pending replies were dropped (the session closes, §9.3).
    RepliesDropped,

    // The agent.
    /// A handoff to `agent` began: the old Activity drains.
    HandoffBegan { agent: &'a str },
    /// Work arrived during the handoff, for the new agent.
    WorkQueued(&'a QueuedWork),
    /// The old Activity has no speech left (or it is gone).
    OldAgentDrained,
    /// The handoff is over: the new agent entered, or a close won over it.
    HandoffEnded,

    // The host's side.
    /// The testing API's `run` began.
    RunStarted,
    /// A speech the run watches committed `items`; `validated` holds what each call's tool
    /// received, by call id.
    RunRecorded { items: &'a [Arc<ChatItem>], validated: &'a [(String, Value)] },
    /// The run failed with an LLM error (the first one counts).
    RunFailed { message: &'a str },
    /// The run was answered.
    RunEnded,
    /// The session began closing.
    CloseBegan { reason: &'a str },
    /// The closing Activity has no speech left.
    ActivityQuiet,
    /// The close finished: the tree stopped and `session_closed` went out.
    CloseFinished,
    /// The session ends once speech `speech_id` is done (the end-call tool).
    EndAfterSpeech { speech_id: &'a str, reason: &'a str },
    /// The end-after-speech request was taken (to close, or by a close).
    EndAfterTaken,
    /// The host's command `id` did something a resume keeps (docs/durability.md#commands).
    CommandTaken { id: &'a str },
    /// The session resumed from its store; these calls were running when its process ended
    /// (docs/durability.md).
    Resumed { in_doubt: &'a [ResumedCall] },
}
