//! Who may speak: user turns, the speeches the Session creates (numbered in its mailbox's
//! order) and their ends, and floor holds (a tool's `foreground`, §10.1, decision 8). The
//! state is `parts/floor.rs`'s.
//!
//! Decides `TurnBegan`, `SpeechCreated` (or, during a handoff, `WorkQueued`), `SpeechWaiting`,
//! `SpeechDone`, `HoldAsked`, `HoldGranted`, `HoldReleased`. Emits `speech_created`,
//! `speech_done` and a reply speech's end; commits the user's message, sets agent and user
//! states, may end the session after its last speech.

use std::sync::Arc;

use colloquy_model::{AgentState, ChatItem, EventKind, Message, Role, SpeechSource, UserState};
use ractor::RpcReplyPort;

use super::parts::fact::{Fact, QueuedWork};
use super::parts::floor::USER_REPLY;
use super::state::SessionState;
use crate::messages::{ActivityMsg, SpeechContent, SpeechJob};
use crate::types::error::SessionError;

impl SessionState {
    /// Commits a user message and starts a reply to it.
    pub(super) fn user_turn(&mut self, text: String) -> Result<(), SessionError> {
        let Some(text) = self.user_text_now(text, false)? else { return Ok(()) };
        self.user_is_back();
        // With no speech pending the Activity has nothing to interrupt (its speeches report
        // done only once they have ended): the message would change nothing.
        if !self.floor.no_speech() {
            let current = &self.agent.current;
            let _ = current.activity().cast(ActivityMsg::Interrupt { reply: None });
            // The queued inputs it drops were said first (docs/decisions.md#queued-user-input).
            if current.allow_interruptions() {
                self.inputs_unanswered();
            }
        }
        let message = self.user_message(text);
        let agent = Arc::clone(self.agent.current.shared_id());
        self.commit(agent, None, vec![message]);
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
        if self.floor.presence.user() == UserState::Away {
            self.set_user_state(UserState::Listening);
        }
    }

    /// Starts the next user turn's span (the speeches replying to it descend from it).
    pub(super) fn begin_turn(&mut self) {
        self.apply(Fact::TurnBegan);
        self.floor.open_turn_span(&self.link.span, &self.link.id, self.agent.current.id());
    }

    /// Starts a speech on the current Activity (queued for the next agent during a handoff).
    pub(super) fn create_speech(
        &mut self,
        source: SpeechSource,
        content: SpeechContent,
    ) -> Result<(), SessionError> {
        if self.host.close.is_closing() {
            return Err(SessionError::Closed);
        }
        if self.agent.handoff.is_some() {
            self.apply(Fact::WorkQueued(&QueuedWork::Speech(source, content)));
            return Ok(());
        }
        let speech_id = self.floor.upcoming_speech_id();
        self.apply(Fact::SpeechCreated { speech_id: &speech_id, source });
        self.update_away_timer(false);
        self.emit_now(EventKind::SpeechCreated { speech_id: speech_id.clone(), source });
        let parent = match source {
            SpeechSource::UserTurn => self.floor.turn_span(),
            _ => &self.link.span,
        };
        let current = &self.agent.current;
        let span = tracing::info_span!(
            parent: parent,
            "speech",
            session_id = %self.link.id,
            speech_id = %speech_id,
            source = ?source,
            agent = %current.id(),
        );
        let allow_interruptions = current.allow_interruptions();
        let job = SpeechJob { speech_id, content, allow_interruptions, span };
        if let Err(e) = current.activity().cast(ActivityMsg::Speak(job)) {
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
        let ends_session = self.host.close.ends_after(&speech_id);
        let reply_ended = self.tools.replies.ending(&speech_id, interrupted);
        self.apply(Fact::SpeechDone { speech_id: &speech_id, interrupted });
        self.emit_now(EventKind::SpeechDone { speech_id, interrupted });
        if let Some(event) = reply_ended {
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
        if self.host.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
            return;
        }
        self.apply(Fact::HoldAsked);
        self.floor.wait_for_hold(reply);
        self.floor_changed();
    }

    /// A speech waiting for its blocking tools does not hold the floor (§10.1): a hold may
    /// start while such a tool runs — the tool itself may be the one asking.
    pub(super) fn speech_waiting(&mut self, speech_id: String, waiting: bool) {
        self.apply(Fact::SpeechWaiting { speech_id: &speech_id, waiting });
        self.floor_changed();
    }

    /// Grants the next hold if nobody speaks and no deferred reply can go out first.
    pub(super) fn grant_hold(&mut self) {
        if self.floor.speaking()
            || self.floor.presence.user() == UserState::Speaking
            || self.host.close.is_closing()
        {
            return;
        }
        // Replies that can go out first do; while blocking tools run they cannot (decision 8).
        if self.tools.replies.pending() && !self.floor.tools_running() {
            return;
        }
        if let Some(hold) = self.floor.answer_next_hold() {
            self.apply(Fact::HoldGranted { hold });
        }
    }

    pub(super) fn release_floor(&mut self, hold: u64) {
        self.apply(Fact::HoldReleased { hold });
        self.floor_changed();
    }
}
