//! Agent and user state changes, and the user-away timer, as the Session runs them
//! (§10.4): the timer runs only while both sides listen, no speech is pending
//! and no call runs.

use colloquy_core::{AgentState, EventKind, UserState};

use super::state::SessionState;
use crate::protocol::ActivityMsg;

impl SessionState {
    pub fn set_agent_state(&mut self, state: AgentState) {
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

    pub fn set_user_speaking(&mut self, speaking: bool) {
        if speaking {
            let _ = self.current.activity.cast(ActivityMsg::Interrupt { reply: None });
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
    pub fn away_timeout(&mut self, generation: u64) {
        if self.presence.away_fired(generation) {
            self.set_user_state(UserState::Away);
        }
    }
}
