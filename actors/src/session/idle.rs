//! The idle decision (decision 8), the callers of `wait_for_idle` and `wait_for_quiet`, and
//! what follows each time the floor may have changed hands: a deferred reply is offered, a
//! hold granted, a run finished, idle waiters released.
//!
//! Decides nothing of its own: it reads the floor, the agent, the tools and the close, and
//! answers the idle waiters (`parts/idle.rs`).

use colloquy_model::UserState;
use ractor::RpcReplyPort;

use super::state::SessionState;
use crate::types::error::SessionError;

impl SessionState {
    /// Nobody holds or waits for the floor: no speech is queued, playing or waiting for
    /// blocking tools, the user is not speaking, and no handoff is under way. A deferred reply
    /// may start.
    pub(super) fn floor_free(&self) -> bool {
        self.floor.no_speech()
            && self.floor.presence.user() != UserState::Speaking
            && self.agent.handoff.is_none()
    }

    /// Idle (decision 8): the floor is free and no deferred reply is pending; `quiet` also
    /// asks that no tool call runs at all.
    fn is_idle(&self, quiet: bool) -> bool {
        self.floor_free()
            && !self.floor.is_held()
            && !self.tools.replies.pending()
            && (!quiet || self.tools.calls.is_empty())
    }

    pub(super) fn wait_for_idle(
        &mut self,
        reply: RpcReplyPort<Result<(), SessionError>>,
        quiet: bool,
    ) {
        if self.host.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
        } else if self.is_idle(quiet) {
            let _ = reply.send(Ok(()));
        } else {
            self.floor.idle.push(reply, quiet);
        }
    }

    pub(super) fn release_idle_waiters(&mut self) {
        if !self.is_idle(false) {
            return;
        }
        let quiet_now = self.is_idle(true);
        self.floor.idle.release(quiet_now);
    }

    /// After anything that may free the floor: offer pending replies, grant a hold, finish a
    /// run, release idle waiters.
    pub(super) fn floor_changed(&mut self) {
        if self.floor_free() && !self.floor.is_held() && self.tools.replies.pending() {
            self.invite_coalescer();
        } else {
            self.grant_hold();
        }
        let run_done = self.agent.handoff.is_none() && self.host.testing.run_done();
        if run_done {
            self.finish_run(None);
        }
        self.release_idle_waiters();
    }
}
