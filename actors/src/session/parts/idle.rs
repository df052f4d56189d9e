//! The callers of `wait_for_idle` and `wait_for_quiet` (decision 8).
//!
//! Invariant: each waiter is answered once: released when the session is idle (`quiet` ones
//! once no call runs either), or refused when it closes.
//!
//! Handles only: the waiters' reply ports (the idle decision itself is `floor_changed`'s).

use ractor::RpcReplyPort;

use crate::types::error::SessionError;

/// A `wait_for_idle` (`quiet: false`) or `wait_for_quiet` (`quiet: true`) caller.
struct IdleWaiter {
    reply: RpcReplyPort<Result<(), SessionError>>,
    quiet: bool,
}

#[derive(Default)]
pub(crate) struct IdleWaiters(Vec<IdleWaiter>);

impl IdleWaiters {
    /// Refuses every waiter (the session is closing).
    pub(crate) fn refuse(&mut self) {
        for waiter in self.0.drain(..) {
            let _ = waiter.reply.send(Err(SessionError::Closed));
        }
    }

    pub(crate) fn push(&mut self, reply: RpcReplyPort<Result<(), SessionError>>, quiet: bool) {
        self.0.push(IdleWaiter { reply, quiet });
    }

    /// Answers the waiters the session satisfies now: all but `quiet` ones unless `quiet_now`.
    pub(crate) fn release(&mut self, quiet_now: bool) {
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.0).into_iter().partition(|w| !w.quiet || quiet_now);
        self.0 = waiting;
        for waiter in ready {
            let _ = waiter.reply.send(Ok(()));
        }
    }
}
