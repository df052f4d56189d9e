//! Speeches and the floor, as the Session runs them: user turns, creating speeches (numbered
//! here, in the Session's mailbox order), their end, and floor holds (`foreground`).

use colloquy_core::{AgentState, ChatItem, EventKind, Message, Role, SpeechSource, UserState};
use colloquy_llm::RequestKind;
use ractor::RpcReplyPort;

use super::state::SessionState;
use crate::api::error::SessionError;
use crate::protocol::{ActivityMsg, SpeechContent, SpeechJob};

impl SessionState {
    /// Commits a user message and starts a reply to it.
    pub fn user_turn(&mut self, text: String) -> Result<(), SessionError> {
        if self.close.is_closing() {
            return Err(SessionError::Closed);
        }
        if let Some(handoff) = &mut self.handoff {
            handoff.queue_turn(text);
            return Ok(());
        }
        if self.presence.user == UserState::Away {
            self.set_user_state(UserState::Listening);
        }
        // With no speech pending the Activity has nothing to interrupt (its speeches report
        // done only once they have ended): the message would change nothing.
        if !self.floor.no_speech() {
            let _ = self.current.activity.cast(ActivityMsg::Interrupt { reply: None });
        }
        let message = ChatItem::Message(Message {
            id: self.link.clock.item_id(),
            role: Role::User,
            text,
            interrupted: false,
            created_at: self.link.clock.now(),
        });
        let agent = self.current.id.clone();
        self.commit(&agent, None, vec![message]);
        self.link.clock.new_turn();
        self.turn.begin(&self.link.span, &self.link.id, &self.current.id);
        let content = SpeechContent::Reply {
            kind: RequestKind::UserTurn,
            extra_instructions: None,
            tool_choice: None,
        };
        self.create_speech(SpeechSource::UserTurn, content)
    }

    /// Starts a speech on the current Activity (queued for the next agent during a handoff).
    pub fn create_speech(
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
        if let Some(run) = &mut self.run {
            // Speeches created while a run is active belong to it (§17.1).
            run.speeches.insert(speech_id.clone());
        }
        self.update_away_timer(false);
        self.emit_now(EventKind::SpeechCreated { speech_id: speech_id.clone(), source });
        let parent = match source {
            SpeechSource::UserTurn => &self.turn.span,
            _ => &self.link.span,
        };
        let span = tracing::info_span!(
            parent: parent,
            "speech",
            session_id = %self.link.id,
            speech_id = %speech_id,
            source = ?source,
            agent = %self.current.id,
        );
        let allow_interruptions = self.current.allow_interruptions;
        let job = SpeechJob { speech_id, content, allow_interruptions, span };
        if let Err(e) = self.current.activity.cast(ActivityMsg::Speak(job)) {
            // Only after an Activity failure: report the speech as done so idle holds.
            if let ractor::MessagingErr::SendErr(ActivityMsg::Speak(job)) = e {
                self.speech_done(job.speech_id, true);
            }
            return Err(SessionError::Closed);
        }
        Ok(())
    }

    /// A speech is done (played out, interrupted, or dropped from the queue).
    pub fn speech_done(&mut self, speech_id: String, interrupted: bool) {
        let ends_session = self.close.ends_after(&speech_id);
        self.floor.speech_ended(&speech_id);
        if let Some(run) = &mut self.run {
            run.speeches.remove(&speech_id);
        }
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
    pub fn hold_floor(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        if self.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
            return;
        }
        self.floor.queue_hold(reply);
        self.floor_changed();
    }

    /// A speech waiting for its blocking tools does not hold the floor (§10.1): a hold may
    /// start while such a tool runs — the tool itself may be the one asking.
    pub fn speech_waiting(&mut self, speech_id: String, waiting: bool) {
        self.floor.set_waiting(speech_id, waiting);
        self.floor_changed();
    }

    /// Grants the next hold if nobody speaks and no deferred reply can go out first.
    pub(super) fn grant_hold(&mut self) {
        if self.floor.speaking()
            || self.presence.user == UserState::Speaking
            || self.close.is_closing()
        {
            return;
        }
        // Replies that can go out first do; while blocking tools run they cannot (decision 8).
        if self.replies.pending() && !self.floor.tools_running() {
            return;
        }
        if let Some(hold) = self.floor.grant_next()
            && let Some(run) = &mut self.run
        {
            run.holds.insert(hold);
        }
    }

    pub fn release_floor(&mut self, hold: u64) {
        self.floor.release(hold);
        if let Some(run) = &mut self.run {
            run.holds.remove(&hold);
        }
        self.floor_changed();
    }
}
