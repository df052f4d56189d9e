//! Who may speak: user turns, the speeches the Session created (numbered here, in its
//! mailbox's order) and that are not done, the ones that lent the floor to wait for their
//! blocking tools, and floor holds (a tool's `foreground`, §10.1, decision 8).
//!
//! Invariants: speeches are numbered `s1`, `s2`, … in creation order; at most one hold is in
//! force, and holds are granted in the order they were asked for; a speech waiting for its
//! blocking tools does not count as speaking.
//!
//! Reads: `link`, `current`, `presence` (is the user speaking), `replies` (one may go first),
//! `close`. Writes: `floor`, `handoff` (work queued for the next agent), `replies` (a reply
//! speech ends), `testing` (the run's speeches and holds). Emits `speech_created`,
//! `speech_done` and a reply speech's end; commits the user's message (conversation), sets
//! agent and user states (presence), may end the session after its last speech (close).

use std::collections::{BTreeSet, VecDeque};

use colloquy_llm::RequestKind;
use colloquy_model::{AgentState, ChatItem, EventKind, Message, Role, SpeechSource, UserState};
use ractor::RpcReplyPort;

use super::state::SessionState;
use crate::messages::{ActivityMsg, SpeechContent, SpeechJob};
use crate::types::error::SessionError;

/// The speech that replies to a user message.
pub(super) const USER_REPLY: SpeechContent = SpeechContent::Reply {
    kind: RequestKind::UserTurn,
    extra_instructions: None,
    tool_choice: None,
};

/// A `hold_floor` caller, answered with its hold's id once granted.
struct HoldWaiter {
    hold: u64,
    reply: RpcReplyPort<Result<u64, SessionError>>,
}

#[derive(Default)]
pub(super) struct Floor {
    /// User turns so far, and the current one's span.
    turn: Turn,
    speech_seq: u64,
    /// Speeches created and not yet done (queued, playing, or waiting on blocking tools).
    pending: usize,
    /// Speeches that released the floor to wait for their blocking tools.
    waiting: BTreeSet<String>,
    /// The hold in force.
    held: Option<u64>,
    hold_waiters: VecDeque<HoldWaiter>,
    hold_seq: u64,
}

impl Floor {
    /// The id the next speech will get.
    pub(super) fn upcoming_speech_id(&self) -> String {
        format!("s{}", self.speech_seq + 1)
    }

    /// Counts a new speech; returns its id.
    fn speech_created(&mut self) -> String {
        self.speech_seq += 1;
        self.pending += 1;
        format!("s{}", self.speech_seq)
    }

    /// A speech is done.
    fn speech_ended(&mut self, speech_id: &str) {
        self.pending = self.pending.saturating_sub(1);
        self.waiting.remove(speech_id);
    }

    /// The Activity is gone and its speeches with it.
    pub(super) fn speeches_lost(&mut self) {
        self.pending = 0;
        self.waiting.clear();
    }

    /// A speech lent the floor to wait for its blocking tools (`waiting`), or took it back.
    fn set_waiting(&mut self, speech_id: String, waiting: bool) {
        if waiting {
            self.waiting.insert(speech_id);
        } else {
            self.waiting.remove(&speech_id);
        }
    }

    /// No speech is pending at all.
    pub(super) fn no_speech(&self) -> bool {
        self.pending == 0
    }

    /// Some speech waits for its blocking tools.
    fn tools_running(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Some speech holds the floor (it is queued or playing, not waiting for tools).
    pub(super) fn speaking(&self) -> bool {
        self.pending > self.waiting.len()
    }

    pub(super) fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// Queues a hold request; it is granted by [`grant_next`](Self::grant_next).
    fn queue_hold(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        self.hold_seq += 1;
        self.hold_waiters.push_back(HoldWaiter { hold: self.hold_seq, reply });
    }

    /// Grants waiting holds in order while none is in force; returns the one granted.
    fn grant_next(&mut self) -> Option<u64> {
        while self.held.is_none() {
            let HoldWaiter { hold, reply } = self.hold_waiters.pop_front()?;
            if reply.send(Ok(hold)).is_ok() {
                self.held = Some(hold);
                return Some(hold);
            }
        }
        None
    }

    /// Ends `hold`, if it is the one in force.
    pub(super) fn release(&mut self, hold: u64) {
        if self.held == Some(hold) {
            self.held = None;
        }
    }

    /// Refuses every waiting hold (the session is closing).
    pub(super) fn refuse_holds(&mut self) {
        for waiter in self.hold_waiters.drain(..) {
            let _ = waiter.reply.send(Err(SessionError::Closed));
        }
    }
}

/// User turns so far, and the current one's `tracing` span (its speeches descend from it).
struct Turn {
    seq: u64,
    span: tracing::Span,
}

impl Turn {
    /// Starts the next user turn's span.
    fn begin(&mut self, parent: &tracing::Span, session_id: &str, agent: &str) {
        self.seq += 1;
        self.span = tracing::info_span!(
            parent: parent,
            "turn",
            session_id = %session_id,
            turn = self.seq,
            agent = %agent,
        );
    }
}

impl Default for Turn {
    fn default() -> Self {
        Self { seq: 0, span: tracing::Span::none() }
    }
}

impl SessionState {
    /// Commits a user message and starts a reply to it.
    pub(super) fn user_turn(&mut self, text: String) -> Result<(), SessionError> {
        let Some(text) = self.user_text_now(text, false)? else { return Ok(()) };
        self.user_is_back();
        // With no speech pending the Activity has nothing to interrupt (its speeches report
        // done only once they have ended): the message would change nothing.
        if !self.floor.no_speech() {
            let _ = self.current.activity().cast(ActivityMsg::Interrupt { reply: None });
            // The queued inputs it drops were said first (docs/decisions.md#queued-user-input).
            if self.current.allow_interruptions() {
                self.inputs_unanswered();
            }
        }
        let message = self.user_message(text);
        let agent = self.current.id().to_string();
        self.commit(&agent, None, vec![message]);
        self.link.clock.new_turn();
        self.begin_turn();
        self.create_speech(SpeechSource::UserTurn, USER_REPLY)
    }

    /// A user message, stamped now.
    pub(super) fn user_message(&self, text: String) -> ChatItem {
        ChatItem::Message(Message {
            id: self.link.clock.item_id(),
            role: Role::User,
            text,
            interrupted: false,
            created_at: self.link.clock.now(),
        })
    }

    /// The user said something: an away user is listening again.
    pub(super) fn user_is_back(&mut self) {
        if self.presence.user() == UserState::Away {
            self.set_user_state(UserState::Listening);
        }
    }

    /// Starts the next user turn's span (the speeches replying to it descend from it).
    pub(super) fn begin_turn(&mut self) {
        self.floor.turn.begin(&self.link.span, &self.link.id, self.current.id());
    }

    /// Starts a speech on the current Activity (queued for the next agent during a handoff).
    pub(super) fn create_speech(
        &mut self,
        source: SpeechSource,
        content: SpeechContent,
    ) -> Result<(), SessionError> {
        if self.close.is_closing() {
            return Err(SessionError::Closed);
        }
        if let Some(handoff) = &mut self.handoff {
            handoff.queue_speech(source, content);
            return Ok(());
        }
        let speech_id = self.floor.speech_created();
        self.testing.speech_created(&speech_id);
        self.update_away_timer(false);
        self.emit_now(EventKind::SpeechCreated { speech_id: speech_id.clone(), source });
        let parent = match source {
            SpeechSource::UserTurn => &self.floor.turn.span,
            _ => &self.link.span,
        };
        let span = tracing::info_span!(
            parent: parent,
            "speech",
            session_id = %self.link.id,
            speech_id = %speech_id,
            source = ?source,
            agent = %self.current.id(),
        );
        let allow_interruptions = self.current.allow_interruptions();
        let job = SpeechJob { speech_id, content, allow_interruptions, span };
        if let Err(e) = self.current.activity().cast(ActivityMsg::Speak(job)) {
            // Only after an Activity failure: report the speech as done so idle holds.
            if let ractor::MessagingErr::SendErr(ActivityMsg::Speak(job)) = e {
                self.speech_done(job.speech_id, true);
            }
            return Err(SessionError::Closed);
        }
        Ok(())
    }

    /// A speech is done (played out, interrupted, or dropped from the queue).
    pub(super) fn speech_done(&mut self, speech_id: String, interrupted: bool) {
        self.input_unanswered(&speech_id);
        let ends_session = self.close.ends_after(&speech_id);
        self.floor.speech_ended(&speech_id);
        self.testing.speech_done(&speech_id);
        let done = EventKind::SpeechDone { speech_id: speech_id.clone(), interrupted };
        self.emit_now(done);
        if let Some(event) = self.replies.speech_done(&speech_id, interrupted) {
            self.emit_now(event);
        }
        // Speeches still pending wait for blocking tools (or are queued): the agent thinks.
        let state =
            if self.floor.no_speech() { AgentState::Listening } else { AgentState::Thinking };
        self.set_agent_state(state);
        self.floor_changed();
        if ends_session {
            self.end_now(false);
        }
    }

    /// Queues a hold; granted once the session is idle with no deferred reply pending.
    pub(super) fn hold_floor(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        if self.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
            return;
        }
        self.floor.queue_hold(reply);
        self.floor_changed();
    }

    /// A speech waiting for its blocking tools does not hold the floor (§10.1): a hold may
    /// start while such a tool runs — the tool itself may be the one asking.
    pub(super) fn speech_waiting(&mut self, speech_id: String, waiting: bool) {
        self.floor.set_waiting(speech_id, waiting);
        self.floor_changed();
    }

    /// Grants the next hold if nobody speaks and no deferred reply can go out first.
    pub(super) fn grant_hold(&mut self) {
        if self.floor.speaking()
            || self.presence.user() == UserState::Speaking
            || self.close.is_closing()
        {
            return;
        }
        // Replies that can go out first do; while blocking tools run they cannot (decision 8).
        if self.replies.pending() && !self.floor.tools_running() {
            return;
        }
        if let Some(hold) = self.floor.grant_next() {
            self.testing.hold_granted(hold);
        }
    }

    pub(super) fn release_floor(&mut self, hold: u64) {
        self.floor.release(hold);
        self.testing.hold_released(hold);
        self.floor_changed();
    }
}
