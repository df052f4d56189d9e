//! The idle decision (decision 8), the callers of `wait_for_idle` and `wait_for_quiet`, and
//! what follows each time the floor may have changed hands: a deferred reply is offered, a
//! hold granted, a run finished, idle waiters released.
//!
//! Invariant: each waiter is answered once: released when the session is idle (`quiet` ones
//! once no call runs either), or refused when it closes.
//!
//! Reads: `floor`, `presence`, `handoff`, `replies`, `calls`, `close`, `testing`. Writes:
//! `idle`. Invites the coalescer (replies), grants a hold (floor), finishes a run (testing).

use colloquy_model::UserState;
use ractor::RpcReplyPort;

use super::state::SessionState;
use crate::types::error::SessionError;

/// A `wait_for_idle` (`quiet: false`) or `wait_for_quiet` (`quiet: true`) caller.
struct IdleWaiter {
    reply: RpcReplyPort<Result<(), SessionError>>,
    quiet: bool,
}

#[derive(Default)]
pub(super) struct IdleWaiters(Vec<IdleWaiter>);

impl IdleWaiters {
    /// Refuses every waiter (the session is closing).
    pub(super) fn refuse(&mut self) {
        for waiter in self.0.drain(..) {
            let _ = waiter.reply.send(Err(SessionError::Closed));
        }
    }

    pub(super) fn push(&mut self, reply: RpcReplyPort<Result<(), SessionError>>, quiet: bool) {
        self.0.push(IdleWaiter { reply, quiet });
    }

    /// Answers the waiters the session satisfies now: all but `quiet` ones unless `quiet_now`.
    pub(super) fn release(&mut self, quiet_now: bool) {
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.0).into_iter().partition(|w| !w.quiet || quiet_now);
        self.0 = waiting;
        for waiter in ready {
            let _ = waiter.reply.send(Ok(()));
        }
    }
}

impl SessionState {
    /// Nobody holds or waits for the floor: no speech is queued, playing or waiting for
    /// blocking tools, the user is not speaking, and no handoff is under way. A deferred reply
    /// may start.
    pub(super) fn floor_free(&self) -> bool {
        self.floor.no_speech()
            && self.presence.user() != UserState::Speaking
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

    pub(super) fn wait_for_idle(
        &mut self,
        reply: RpcReplyPort<Result<(), SessionError>>,
        quiet: bool,
    ) {
        if self.close.is_closing() {
            let _ = reply.send(Err(SessionError::Closed));
        } else if self.is_idle(quiet) {
            let _ = reply.send(Ok(()));
        } else {
            self.idle.push(reply, quiet);
        }
    }

    pub(super) fn release_idle_waiters(&mut self) {
        if !self.is_idle(false) {
            return;
        }
        let quiet_now = self.is_idle(true);
        self.idle.release(quiet_now);
    }

    /// After anything that may free the floor: offer pending replies, grant a hold, finish a
    /// run, release idle waiters.
    pub(super) fn floor_changed(&mut self) {
        if self.floor_free() && !self.floor.is_held() && self.replies.pending() {
            self.invite_coalescer();
        } else {
            self.grant_hold();
        }
        let run_done = self.handoff.is_none() && self.testing.run_done();
        if run_done {
            self.finish_run(None);
        }
        self.release_idle_waiters();
    }
}
