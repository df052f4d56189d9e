//! Who may speak: user turns, the speeches the Session created (numbered here, in its
//! mailbox's order) and that are not done, the ones that lent the floor to wait for their
//! blocking tools, floor holds (a tool's `foreground`, §10.1, decision 8); the agent and user
//! states (presence.rs) and the callers waiting for the session to be idle (idle.rs).
//!
//! Invariants: speeches are numbered `s1`, `s2`, … in creation order; at most one hold is in
//! force, and holds are granted in the order they were asked for; a speech waiting for its
//! blocking tools does not count as speaking.
//!
//! Applies: `TurnBegan`, `SpeechCreated`, `SpeechWaiting`, `SpeechDone`, `SpeechesLost`,
//! `HoldAsked`, `HoldGranted`, `HoldReleased`, and (presence) the state changes. Handles: the
//! hold waiters' reply ports, the turn's span, the away timer, the idle waiters.

use std::collections::{BTreeSet, VecDeque};

use colloquy_llm::RequestKind;
use ractor::RpcReplyPort;

use super::fact::Fact;
use super::idle::IdleWaiters;
use super::presence::Presence;
use crate::messages::SpeechContent;
use crate::types::error::SessionError;

/// The speech that replies to a user message.
pub(crate) const USER_REPLY: SpeechContent = SpeechContent::Reply {
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
pub(crate) struct Floor {
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
    /// The agent and user states, and the away timer.
    pub(crate) presence: Presence,
    /// The callers waiting for the session to be idle.
    pub(crate) idle: IdleWaiters,
}

impl Floor {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::TurnBegan => self.turn.seq += 1,
            Fact::SpeechCreated { .. } => {
                self.speech_seq += 1;
                self.pending += 1;
            }
            Fact::SpeechWaiting { speech_id, waiting: true } => {
                self.waiting.insert(speech_id.to_string());
            }
            Fact::SpeechWaiting { speech_id, waiting: false } => {
                self.waiting.remove(speech_id);
            }
            Fact::SpeechDone { speech_id, .. } => {
                self.pending = self.pending.saturating_sub(1);
                self.waiting.remove(speech_id);
            }
            Fact::SpeechesLost => {
                self.pending = 0;
                self.waiting.clear();
            }
            Fact::HoldAsked => self.hold_seq += 1,
            Fact::HoldGranted { hold } => self.held = Some(hold),
            Fact::HoldReleased { hold } if self.held == Some(hold) => self.held = None,
            Fact::AgentStateChanged(_) | Fact::UserStateChanged(_) => self.presence.apply(fact),
            _ => {}
        }
    }

    /// The current user turn's span (its speeches descend from it).
    pub(crate) fn turn_span(&self) -> &tracing::Span {
        &self.turn.span
    }

    /// Starts the current user turn's span (after `TurnBegan`).
    pub(crate) fn open_turn_span(&mut self, parent: &tracing::Span, session_id: &str, agent: &str) {
        self.turn.begin(parent, session_id, agent);
    }
    /// The id the next speech will get.
    pub(crate) fn upcoming_speech_id(&self) -> String {
        format!("s{}", self.speech_seq + 1)
    }

    /// No speech is pending at all.
    pub(crate) fn no_speech(&self) -> bool {
        self.pending == 0
    }

    /// Some speech waits for its blocking tools.
    pub(crate) fn tools_running(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Some speech holds the floor (it is queued or playing, not waiting for tools).
    pub(crate) fn speaking(&self) -> bool {
        self.pending > self.waiting.len()
    }

    pub(crate) fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// `reply` waits for the hold asked last (after `HoldAsked`).
    pub(crate) fn wait_for_hold(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        self.hold_waiters.push_back(HoldWaiter { hold: self.hold_seq, reply });
    }

    /// With no hold in force, tells the oldest waiter still listening that its hold is
    /// granted; returns that hold (to apply `HoldGranted`).
    pub(crate) fn answer_next_hold(&mut self) -> Option<u64> {
        if self.held.is_some() {
            return None;
        }
        loop {
            let HoldWaiter { hold, reply } = self.hold_waiters.pop_front()?;
            if reply.send(Ok(hold)).is_ok() {
                return Some(hold);
            }
        }
    }

    /// Refuses every waiting hold (the session is closing).
    pub(crate) fn refuse_holds(&mut self) {
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
    /// Starts the current user turn's span.
    fn begin(&mut self, parent: &tracing::Span, session_id: &str, agent: &str) {
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

#[cfg(test)]
mod tests {
    use colloquy_model::SpeechSource;

    use super::*;

    fn created(speech_id: &str) -> Fact<'_> {
        Fact::SpeechCreated { speech_id, source: SpeechSource::UserTurn }
    }

    /// A speech waiting for its blocking tools lends the floor; one done leaves it; a hold is in
    /// force from `HoldGranted` until its own `HoldReleased`.
    #[test]
    fn speeches_and_holds_follow_their_facts() {
        let mut floor = Floor::default();
        assert_eq!(floor.upcoming_speech_id(), "s1");
        floor.apply(created("s1"));
        floor.apply(created("s2"));
        assert_eq!(floor.upcoming_speech_id(), "s3");
        assert!(floor.speaking());
        floor.apply(Fact::SpeechWaiting { speech_id: "s1", waiting: true });
        floor.apply(Fact::SpeechDone { speech_id: "s2", interrupted: false });
        assert!(!floor.speaking() && !floor.no_speech() && floor.tools_running());
        floor.apply(Fact::SpeechDone { speech_id: "s1", interrupted: true });
        assert!(floor.no_speech() && !floor.tools_running());

        floor.apply(Fact::HoldGranted { hold: 1 });
        floor.apply(Fact::HoldReleased { hold: 2 });
        assert!(floor.is_held(), "only the hold in force ends it");
        floor.apply(Fact::HoldReleased { hold: 1 });
        assert!(!floor.is_held());
    }
}
