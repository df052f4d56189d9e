//! Closing a session (decision 7): from the request, through the Activity winding down and
//! the last calls ending, to `session_closed` and the actor's stop; and ending it after a
//! speech (the end-call tool).
//!
//! Invariants: a close starts once and finishes once; every `close` caller is answered with
//! the same `ClosedSession`; the host's close callback is called at most once.
//!
//! Reads: `link`, `current` (its Activity), `conversation` (the final history), `calls`.
//! Writes: `close`, `handoff` (a close wins over it), `presence` (the away timer stops),
//! `idle` and `floor` (waiters and holds refused), `replies` (pending ones dropped), `events`
//! (streams end). Emits `session_closed`; fails a run (testing), drains every call and starts the
//! drain timer (calls).

use std::time::Duration;

use colloquy_model::{ErrorSource, EventKind};
use ractor::{ActorRef, RpcReplyPort};

use super::state::SessionState;
use crate::messages::{ActivityMsg, ChildMsg, CloseCallback, ClosedSession, SessionMsg, TimerMsg};
use crate::support::task::OwnedTask;
use crate::types::error::SessionError;

/// A close in progress.
struct Closing {
    reason: String,
    waiters: Vec<RpcReplyPort<ClosedSession>>,
    /// The activity has no speech left; the close completes once no call runs either.
    activity_quiet: bool,
    /// The tree is stopped and `session_closed` emitted.
    finished: bool,
}

/// End the session once this speech is done (the end-call tool).
struct EndAfter {
    speech_id: String,
    reason: String,
    /// Ends the session anyway if the speech never finishes.
    _watchdog: Option<OwnedTask>,
}

#[derive(Default)]
pub(super) struct CloseState {
    closing: Option<Closing>,
    end_after: Option<EndAfter>,
    /// The host's close callback, called once after `session_closed`.
    on_close: Option<CloseCallback>,
}

impl CloseState {
    pub(super) fn new(on_close: Option<CloseCallback>) -> Self {
        Self { on_close, ..Self::default() }
    }

    pub(super) fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Why the session is closing, once it is.
    pub(super) fn reason(&self) -> Option<String> {
        self.closing.as_ref().map(|c| c.reason.clone())
    }

    /// The session ends once speech `speech_id` is done.
    pub(super) fn ends_after(&self, speech_id: &str) -> bool {
        self.end_after.as_ref().is_some_and(|end| end.speech_id == speech_id)
    }

    /// Starts closing with `reason`; false (and `reply` joins the waiters) if already closing.
    fn begin(&mut self, reason: String, reply: Option<RpcReplyPort<ClosedSession>>) -> bool {
        if let Some(closing) = &mut self.closing {
            closing.waiters.extend(reply);
            return false;
        }
        let waiters = reply.into_iter().collect();
        self.closing = Some(Closing { reason, waiters, activity_quiet: false, finished: false });
        true
    }

    /// The Activity has no speech left.
    fn activity_quiet(&mut self) {
        if let Some(closing) = &mut self.closing {
            closing.activity_quiet = true;
        }
    }

    /// Closing, and the Activity has no speech left.
    fn is_quiet(&self) -> bool {
        self.closing.as_ref().is_some_and(|c| c.activity_quiet)
    }

    /// Marks the close finished: its reason and waiters, the first time only. The session
    /// stays closing (it refuses new work) until its actor has stopped.
    fn finish(&mut self) -> Option<(String, Vec<RpcReplyPort<ClosedSession>>)> {
        let closing = self.closing.as_mut().filter(|c| !c.finished)?;
        closing.finished = true;
        Some((closing.reason.clone(), std::mem::take(&mut closing.waiters)))
    }

    /// The host's close callback, once.
    fn take_on_close(&mut self) -> Option<CloseCallback> {
        self.on_close.take()
    }

    /// End the session once `speech_id` is done; `watchdog` ends it anyway.
    fn end_after(&mut self, speech_id: String, reason: String, watchdog: Option<OwnedTask>) {
        self.end_after = Some(EndAfter { speech_id, reason, _watchdog: watchdog });
    }

    /// The end-after-speech request, once: its close reason.
    fn take_end_after(&mut self) -> Option<String> {
        self.end_after.take().map(|end| end.reason)
    }
}

impl SessionState {
    /// Ends the session (gracefully, with `reason`) once speech `speech_id` is done — played
    /// out, interrupted or dropped — or after `watchdog` if it never is (the end-call tool).
    pub(super) fn end_after_speech(
        &mut self,
        speech_id: String,
        reason: String,
        watchdog: Option<Duration>,
    ) {
        if self.close.is_closing() {
            return;
        }
        let watchdog = watchdog.map(|limit| {
            let session = self.link.actor.clone();
            OwnedTask::spawn(async move {
                tokio::time::sleep(limit).await;
                let _ = session.cast(TimerMsg::EndNow.into());
            })
        });
        self.close.end_after(speech_id, reason, watchdog);
    }

    /// The speech before the end is done, or (`watchdog`) it never finished in time.
    pub(super) fn end_now(&mut self, watchdog: bool) {
        if self.close.is_closing() {
            return;
        }
        let Some(reason) = self.close.take_end_after() else { return };
        if watchdog {
            let message =
                format!("the speech before the end ({reason}) never finished: ending now");
            tracing::warn!(session = %self.link.id, "{message}");
            self.emit_now(EventKind::error(ErrorSource::Session, message));
        }
        self.close(reason, None);
    }

    /// Starts closing (or, already closing, adds `reply` to those told when it is done).
    pub(super) fn close(&mut self, reason: String, reply: Option<RpcReplyPort<ClosedSession>>) {
        if !self.close.begin(reason, reply) {
            return;
        }
        self.handoff = None; // a close wins over a handoff in progress
        self.presence.stop_away_timer();
        self.finish_run(Some(SessionError::Closed));
        self.idle.refuse();
        self.floor.refuse_holds();
        // Pending deferred replies are dropped at close (§9.3); cancellable calls are
        // cancelled, the others awaited (decision 7).
        self.replies.drop_pending();
        self.calls.drain(|_| true, colloquy_model::text::APPROVAL_CLOSED);
        if self.current.activity().cast(ActivityMsg::Close).is_err() {
            // No activity to wind down: finish at once.
            let _ = self.link.actor.cast(ChildMsg::ActivityClosed.into());
        }
        // Decision 7: the bound counts from the close, blocking calls included.
        self.start_drain_timer();
    }

    /// The activity has no speech left. Calls still running in the background are awaited
    /// (the cancellable ones were cancelled), so each still ends exactly once and its result
    /// lands in the history; then the close completes.
    pub(super) async fn activity_closed(&mut self, myself: &ActorRef<SessionMsg>) {
        self.close.activity_quiet();
        self.close_if_quiet(myself).await;
    }

    /// Completes a close whose activity is quiet once no call runs.
    pub(super) async fn close_if_quiet(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.close.is_quiet() && self.calls.is_empty() {
            // Boxed, like every rare heavy path the Session awaits in a handler: inlined, it
            // would size every session's actor task for it (docs/decisions.md#boxed-futures).
            Box::pin(self.finish_close(myself)).await;
        }
    }

    /// Stop the tree, tell everyone, stop.
    pub(super) async fn finish_close(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some((reason, waiters)) = self.close.finish() else { return };
        // The activity has no speech left and its toolset no call: a graceful stop is short.
        if let Err(e) = self.current.activity().stop_and_wait(Some(reason.clone()), None).await {
            tracing::warn!(session = %self.link.id, "activity did not stop cleanly: {e}");
        }
        // Normally none is left (the Activity's speeches ended first); never lose one.
        self.inputs_unanswered();
        self.emit_now(EventKind::SessionClosed { reason: reason.clone() });
        if let Some(on_close) = self.close.take_on_close() {
            // The host's hook (hang up the phone line, close the socket): a panic in it is
            // reported, never stops the close.
            if let Err(panic) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_close(&reason)))
            {
                let message = format!(
                    "the close callback panicked: {}",
                    crate::support::task::panic_text(&*panic)
                );
                tracing::error!(session = %self.link.id, "{message}");
            }
        }
        self.events.clear();
        let closed = self.conversation.closed(reason.clone());
        for waiter in waiters {
            let _ = waiter.send(closed.clone());
        }
        let _ = self.link.closed.set(closed);
        myself.stop(Some(reason));
    }
}
