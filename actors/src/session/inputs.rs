//! Queued user input (LiveKit's `generate_reply(user_input=…)`,
//! docs/decisions.md#queued-user-input): a user message that waits behind the speeches
//! already queued or playing instead of interrupting them, then gets a reply of its own.
//!
//! Its reply speech is created (and queued on the Activity) when the input is accepted; its
//! message is committed, stamped then, when that speech begins its first LLM step, so the
//! reply's request ends with it. A speech that ends before it began (dropped by an interrupt,
//! the user speaking or a close, or lost with its Activity) commits the message as it ends,
//! and a user turn commits the ones it drops before its own: the history keeps what the user
//! said, in order, and the speech's `speech_done` (interrupted) says it got no reply. During a
//! handoff the input waits for the new agent, like a user turn.
//!
//! Invariant: every accepted input is committed exactly once; an input that could not be
//! accepted is refused with an error.
//!
//! Decides `InputQueued` and `InputTaken` (the inputs wait in the conversation, parts/); starts
//! the reply speech; an away user listens again; the turn's tool-call budget starts over when
//! the reply begins.

use std::sync::Arc;

use colloquy_model::SpeechSource;

use super::parts::fact::Fact;
use super::parts::floor::USER_REPLY;
use super::state::SessionState;
use crate::types::error::SessionError;

impl SessionState {
    /// Accepts a queued user input: its reply waits for the speeches before it.
    pub(super) fn user_input(&mut self, text: String) -> Result<(), SessionError> {
        let Some(text) = self.user_text_now(text, true)? else { return Ok(()) };
        self.queue_input(text)
    }

    /// Creates the reply speech for an input (accepted now, or during a handoff).
    pub(super) fn queue_input(&mut self, text: String) -> Result<(), SessionError> {
        self.user_is_back();
        self.begin_turn();
        let speech_id = self.floor.upcoming_speech_id();
        self.apply(Fact::InputQueued { speech_id: &speech_id, text: &text });
        let created = self.create_speech(SpeechSource::UserTurn, USER_REPLY);
        if created.is_err() {
            // Refused before the speech existed (the session is closing): nothing to answer.
            self.input_unanswered(&speech_id);
        }
        created
    }

    /// Speech `speech_id` begins an LLM step for `agent`: if it replies to a queued input,
    /// the message is committed now, before the request's context is built, and the user
    /// turn (its tool-call budget) starts.
    pub(super) fn input_taken(&mut self, speech_id: &str, agent: &Arc<str>) {
        if let Some(text) = self.take_input(speech_id) {
            let message = self.user_message(text);
            self.commit(Arc::clone(agent), None, vec![message]);
            self.link.clock.new_turn();
        }
    }

    /// Speech `speech_id` ended: if it never began, its input is committed unanswered.
    pub(super) fn input_unanswered(&mut self, speech_id: &str) {
        if let Some(text) = self.take_input(speech_id) {
            let agent = Arc::clone(self.agent.current.shared_id());
            let message = self.user_message(text);
            self.commit(agent, None, vec![message]);
        }
    }

    /// Every input still waiting is committed unanswered, in the order accepted (a user
    /// turn drops their replies, the session closes, or its Activity was lost with them).
    pub(super) fn inputs_unanswered(&mut self) {
        let agent = Arc::clone(self.agent.current.shared_id());
        let waiting = self.conversation.inputs().to_vec();
        let mut messages = Vec::with_capacity(waiting.len());
        for (speech_id, text) in waiting {
            self.apply(Fact::InputTaken { speech_id: &speech_id });
            messages.push(self.user_message(text));
        }
        if !messages.is_empty() {
            self.commit(agent, None, messages);
        }
    }

    /// The text of the input speech `speech_id` replies to, if it still waits: taken.
    fn take_input(&mut self, speech_id: &str) -> Option<String> {
        let text = self.conversation.input(speech_id)?.to_string();
        self.apply(Fact::InputTaken { speech_id });
        Some(text)
    }
}
