//! Agent and user state, and the user-away timer (§10.4): the timer runs only while both
//! sides listen, no speech is pending and no call runs.
//!
//! Invariants: a state changes only to a different value (so each change is one event); a
//! timer that fired after its window was replaced (an older generation) changes nothing.
//!
//! Applies: `AgentStateChanged`, `UserStateChanged`. Handles: the away timer.

use std::time::Duration;

use colloquy_model::{AgentState, UserState};
use ractor::ActorRef;

use super::fact::Fact;
use crate::messages::{SessionMsg, TimerMsg};
use crate::support::task::OwnedTask;

pub(crate) struct Presence {
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
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::AgentStateChanged(state) => self.agent = state,
            Fact::UserStateChanged(state) => self.user = state,
            _ => {}
        }
    }

    /// The agent state.
    pub(crate) fn agent(&self) -> AgentState {
        self.agent
    }

    /// The user state.
    pub(crate) fn user(&self) -> UserState {
        self.user
    }

    /// Stops the away timer (a handoff or a close began).
    pub(crate) fn stop_away_timer(&mut self) {
        self.away_timer = None;
    }

    /// Starts a full away window of `timeout` (replacing one that is counting) when
    /// `restart`, else only if none is counting.
    pub(crate) fn arm_away_timer(
        &mut self,
        timeout: Duration,
        restart: bool,
        session: &ActorRef<SessionMsg>,
    ) {
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
    pub(crate) fn away_fired(&mut self, generation: u64) -> bool {
        let current = generation == self.away_generation && self.away_timer.is_some();
        if current {
            self.away_timer = None;
        }
        current
    }
}
