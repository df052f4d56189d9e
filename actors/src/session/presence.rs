//! Agent and user state, and the user-away timer (§10.4): the timer runs only while both
//! sides listen, no speech is pending and no call runs.
//!
//! Invariants: a state changes only to a different value (so each change is one event); a
//! timer that fired after its window was replaced (an older generation) changes nothing.
//!
//! Reads: `link`, `current`, `calls`, `floor`, `close`. Writes: `presence`. Emits
//! `agent_state` and `user_state`; the user speaking interrupts the Activity and, when they
//! stop, frees the floor (idle).

use std::time::Duration;

use colloquy_model::{AgentState, EventKind, UserState};
use ractor::ActorRef;

use super::state::SessionState;
use crate::messages::{ActivityMsg, SessionMsg, TimerMsg};
use crate::support::task::OwnedTask;

pub(super) struct Presence {
    agent: AgentState,
    user: UserState,
    away_timer: Option<OwnedTask>,
    away_generation: u64,
}

impl Default for Presence {
    fn default() -> Self {
        Self {
            agent: AgentState::Initializing,
            user: UserState::Listening,
            away_timer: None,
            away_generation: 0,
        }
    }
}

impl Presence {
    /// The agent state.
    pub(super) fn agent(&self) -> AgentState {
        self.agent
    }

    /// The user state.
    pub(super) fn user(&self) -> UserState {
        self.user
    }

    /// Stops the away timer (a handoff or a close began).
    pub(super) fn stop_away_timer(&mut self) {
        self.away_timer = None;
    }

    /// Starts a full away window of `timeout` (replacing one that is counting) when
    /// `restart`, else only if none is counting.
    fn arm_away_timer(&mut self, timeout: Duration, restart: bool, session: &ActorRef<SessionMsg>) {
        if self.away_timer.is_some() && !restart {
            return;
        }
        self.away_generation += 1;
        let generation = self.away_generation;
        let session = session.clone();
        self.away_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(TimerMsg::AwayTimeout(generation).into());
        }));
    }

    /// The away timer of `generation` fired: true if it is the one counting now.
    fn away_fired(&mut self, generation: u64) -> bool {
        let current = generation == self.away_generation && self.away_timer.is_some();
        if current {
            self.away_timer = None;
        }
        current
    }
}

impl SessionState {
    pub(super) fn set_agent_state(&mut self, state: AgentState) {
        if self.presence.agent != state {
            self.presence.agent = state;
            self.emit_now(EventKind::AgentState { state });
            self.update_away_timer(false);
        }
    }

    pub(super) fn set_user_state(&mut self, state: UserState) {
        if self.presence.user != state {
            self.presence.user = state;
            self.emit_now(EventKind::UserState { state });
            self.update_away_timer(false);
        }
    }

    pub(super) fn set_user_speaking(&mut self, speaking: bool) {
        if speaking {
            let _ = self.current.activity().cast(ActivityMsg::Interrupt { reply: None });
            self.set_user_state(UserState::Speaking);
        } else {
            self.set_user_state(UserState::Listening);
            self.floor_changed();
        }
    }

    /// Runs the user-away timer only while both sides listen and no call runs (§10.4);
    /// `restart` starts a full new window even if one is already counting.
    pub(super) fn update_away_timer(&mut self, restart: bool) {
        let quiet = self.presence.agent == AgentState::Listening
            && self.presence.user == UserState::Listening
            && self.calls.is_empty()
            && self.floor.no_speech()
            && !self.close.is_closing();
        match self.link.options.user_away_timeout.filter(|_| quiet) {
            Some(timeout) => self.presence.arm_away_timer(timeout, restart, &self.link.actor),
            None => self.presence.stop_away_timer(),
        }
    }

    /// The away timer of `generation` fired.
    pub(super) fn away_timeout(&mut self, generation: u64) {
        if self.presence.away_fired(generation) {
            self.set_user_state(UserState::Away);
        }
    }
}
