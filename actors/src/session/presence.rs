//! Agent and user state, and the user-away timer (§10.4): the timer runs only while both
//! sides listen, no speech is pending and no call runs. The state is `parts/presence.rs`'s.
//!
//! Decides `AgentStateChanged` and `UserStateChanged`, only to a different value (so each
//! change is one event); emits `agent_state` and `user_state`; the user speaking interrupts
//! the Activity and, when they stop, frees the floor.

use colloquy_model::{AgentState, EventKind, UserState};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::ActivityMsg;

impl SessionState {
    pub(super) fn set_agent_state(&mut self, state: AgentState) {
        if self.floor.presence.agent() != state {
            self.apply(Fact::AgentStateChanged(state));
            self.emit_now(EventKind::AgentState { state });
            self.update_away_timer(false);
        }
    }

    pub(super) fn set_user_state(&mut self, state: UserState) {
        if self.floor.presence.user() != state {
            self.apply(Fact::UserStateChanged(state));
            self.emit_now(EventKind::UserState { state });
            self.update_away_timer(false);
        }
    }

    pub(super) fn set_user_speaking(&mut self, speaking: bool) {
        if speaking {
            let _ = self.agent.current.activity().cast(ActivityMsg::Interrupt { reply: None });
            self.set_user_state(UserState::Speaking);
        } else {
            self.set_user_state(UserState::Listening);
            self.floor_changed();
        }
    }

    /// Runs the user-away timer only while both sides listen and no call runs (§10.4);
    /// `restart` starts a full new window even if one is already counting.
    pub(super) fn update_away_timer(&mut self, restart: bool) {
        let presence = &self.floor.presence;
        let quiet = presence.agent() == AgentState::Listening
            && presence.user() == UserState::Listening
            && self.tools.calls.is_empty()
            && self.floor.no_speech()
            && !self.host.close.is_closing();
        let presence = &mut self.floor.presence;
        match self.link.options.user_away_timeout.filter(|_| quiet) {
            Some(timeout) => presence.arm_away_timer(timeout, restart, &self.link.actor),
            None => presence.stop_away_timer(),
        }
    }

    /// The away timer of `generation` fired.
    pub(super) fn away_timeout(&mut self, generation: u64) {
        if self.floor.presence.away_fired(generation) {
            self.set_user_state(UserState::Away);
        }
    }
}
