//! Queued user input (LiveKit's `generate_reply(user_input=…)`,
//! docs/decisions.md#queued-user-input): a user message that waits behind the speeches
//! already queued or playing instead of interrupting them, then gets a reply of its own.
//!
//! Its reply speech is created (and queued on the Activity) when the input is accepted; its
//! message, stamped then, is committed when that speech begins its first LLM step, so the
//! reply's request is the first to see it. A speech that ends before it began (dropped by an
//! interrupt, a user turn or a close, or lost with its Activity) commits the message as it
//! ends: the history keeps what the user said, and the speech's `speech_done` (interrupted)
//! says it got no reply. During a handoff the input waits for the new agent, like a user turn.
//!
//! Invariant: every accepted input is committed exactly once, in timestamp order with the
//! rest of the history; an input that could not be accepted is refused with an error.
//!
//! Reads: `close`, `handoff`, `current`, `floor` (the next speech's id). Writes: `inputs`,
//! `conversation`, `handoff` (inputs queued for the next agent). Starts the reply speech
//! (floor); an away user listens again (presence); the turn's tool-call budget starts over
//! when the reply begins.

use std::collections::BTreeMap;

use colloquy_core::{ChatItem, SpeechSource};

use super::floor::USER_REPLY;
use super::state::SessionState;
use crate::api::error::SessionError;

/// Accepted user messages waiting for their reply speech to begin, by that speech's id.
#[derive(Default)]
pub(super) struct QueuedInputs {
    waiting: BTreeMap<String, ChatItem>,
}

impl SessionState {
    /// Accepts a queued user input: its reply waits for the speeches before it.
    pub(super) fn user_input(&mut self, text: String) -> Result<(), SessionError> {
        if self.close.is_closing() {
            return Err(SessionError::Closed);
        }
        let message = self.user_message(text);
        if let Some(handoff) = &mut self.handoff {
            handoff.queue_input(message);
            return Ok(());
        }
        self.queue_input(message)
    }

    /// Creates the reply speech for `message` (accepted earlier, or just now).
    pub(super) fn queue_input(&mut self, message: ChatItem) -> Result<(), SessionError> {
        self.user_is_back();
        self.begin_turn();
        let speech_id = self.floor.upcoming_speech_id();
        self.inputs.waiting.insert(speech_id.clone(), message);
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
    pub(super) fn input_taken(&mut self, speech_id: &str, agent: &str) {
        if let Some(message) = self.inputs.waiting.remove(speech_id) {
            self.commit(agent, None, vec![message]);
            self.link.clock.new_turn();
        }
    }

    /// Speech `speech_id` ended: if it never began, its input is committed unanswered.
    pub(super) fn input_unanswered(&mut self, speech_id: &str) {
        if let Some(message) = self.inputs.waiting.remove(speech_id) {
            let agent = self.current.id().to_string();
            self.commit(&agent, None, vec![message]);
        }
    }

    /// Every input still waiting is committed unanswered (the session closes, or its
    /// Activity was lost with the speeches queued on it).
    pub(super) fn inputs_unanswered(&mut self) {
        let agent = self.current.id().to_string();
        let waiting = std::mem::take(&mut self.inputs.waiting);
        if !waiting.is_empty() {
            self.commit(&agent, None, waiting.into_values().collect());
        }
    }
}
