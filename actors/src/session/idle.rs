//! The idle decision (decision 8) and what follows from it each time the floor may have
//! changed hands: a deferred reply is offered, a hold granted, a run finished, idle waiters
//! released.

use colloquy_core::UserState;
use ractor::RpcReplyPort;

use super::state::SessionState;
use crate::api::error::SessionError;

impl SessionState {
    /// Nobody holds or waits for the floor: no speech is queued, playing or waiting for
    /// blocking tools, the user is not speaking, and no handoff is under way. A deferred reply
    /// may start.
    pub(super) fn floor_free(&self) -> bool {
        self.floor.no_speech()
            && self.presence.user != UserState::Speaking
            && self.handoff.is_none()
    }

    /// Idle (decision 8): the floor is free and no deferred reply is pending; `quiet` also
    /// asks that no tool call runs at all.
    fn is_idle(&self, quiet: bool) -> bool {
        self.floor_free()
            && !self.floor.is_held()
            && !self.replies.pending()
            && (!quiet || self.calls.is_empty())
    }

    pub fn wait_for_idle(&mut self, reply: RpcReplyPort<Result<(), SessionError>>, quiet: bool) {
        if self.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
        } else if self.is_idle(quiet) {
            let _ = reply.send(Ok(()));
        } else {
            self.idle_waiters.push(reply, quiet);
        }
    }

    pub(super) fn release_idle_waiters(&mut self) {
        if !self.is_idle(false) {
            return;
        }
        let quiet_now = self.is_idle(true);
        self.idle_waiters.release(quiet_now);
    }

    /// After anything that may free the floor: offer pending replies, grant a hold, finish a
    /// run, release idle waiters.
    pub(super) fn floor_changed(&mut self) {
        if self.floor_free() && !self.floor.is_held() && self.replies.pending() {
            self.invite_coalescer();
        } else {
            self.grant_hold();
        }
        let run_done = self.handoff.is_none() && self.run.as_ref().is_some_and(|r| r.done());
        if run_done {
            self.finish_run(None);
        }
        self.release_idle_waiters();
    }
}
