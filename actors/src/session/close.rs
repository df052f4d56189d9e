//! Closing a session (decision 7): from the request, through the Activity winding down and
//! the last calls ending, to `session_closed` and the actor's stop; and ending it after a
//! speech (the end-call tool). The state is `parts/close.rs`'s.
//!
//! Decides `CloseBegan` (a close wins over a handoff: `HandoffEnded`; pending replies are
//! dropped: `RepliesDropped`), `ActivityQuiet`, `CloseFinished`, `EndAfterSpeech`,
//! `EndAfterTaken`. Emits `session_closed`; fails a run, refuses idle waiters and holds,
//! drains every call and starts the drain timer.

use std::time::Duration;

use colloquy_model::{ErrorSource, EventKind};
use ractor::{ActorRef, RpcReplyPort};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ActivityMsg, ChildMsg, ClosedSession, SessionMsg, TimerMsg};
use crate::support::task::OwnedTask;
use crate::types::error::SessionError;

impl SessionState {
    /// Ends the session (gracefully, with `reason`) once speech `speech_id` is done — played
    /// out, interrupted or dropped — or after `watchdog` if it never is (the end-call tool).
    pub(super) fn end_after_speech(
        &mut self,
        speech_id: String,
        reason: String,
        watchdog: Option<Duration>,
    ) {
        if self.host.close.is_closing() {
            return;
        }
        let watchdog = watchdog.map(|limit| {
            let session = self.link.actor.clone();
            OwnedTask::spawn(async move {
                tokio::time::sleep(limit).await;
                let _ = session.cast(TimerMsg::EndNow.into());
            })
        });
        self.apply(Fact::EndAfterSpeech { speech_id: &speech_id, reason: &reason });
        self.host.close.watch(watchdog);
    }

    /// The speech before the end is done, or (`watchdog`) it never finished in time.
    pub(super) fn end_now(&mut self, watchdog: bool) {
        if self.host.close.is_closing() {
            return;
        }
        let Some(reason) = self.host.close.end_reason().map(str::to_string) else { return };
        self.apply(Fact::EndAfterTaken);
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
        if self.host.close.is_closing() {
            self.host.close.join(reply);
            return;
        }
        self.apply(Fact::CloseBegan { reason: &reason });
        self.host.close.join(reply);
        if self.agent.handoff.is_some() {
            self.apply(Fact::HandoffEnded); // a close wins over a handoff in progress
        }
        self.floor.presence.stop_away_timer();
        self.finish_run(Some(SessionError::Closed));
        self.floor.idle.refuse();
        self.floor.refuse_holds();
        // Pending deferred replies are dropped at close (§9.3); cancellable calls are
        // cancelled, the others awaited (decision 7).
        self.apply(Fact::RepliesDropped);
        self.tools.calls.drain(|_| true, colloquy_model::text::APPROVAL_CLOSED);
        if self.agent.current.activity().cast(ActivityMsg::Close).is_err() {
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
        self.apply(Fact::ActivityQuiet);
        self.close_if_quiet(myself).await;
    }

    /// Completes a close whose activity is quiet once no call runs.
    pub(super) async fn close_if_quiet(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.host.close.is_quiet() && self.tools.calls.is_empty() {
            // Boxed, like every rare heavy path the Session awaits in a handler: inlined, it
            // would size every session's actor task for it (docs/decisions.md#boxed-futures).
            Box::pin(self.finish_close(myself)).await;
        }
    }

    /// Stop the tree, tell everyone, stop.
    pub(super) async fn finish_close(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(reason) = self.host.close.unfinished().map(str::to_string) else { return };
        let waiters = self.host.close.take_waiters();
        self.apply(Fact::CloseFinished);
        // The activity has no speech left and its toolset no call: a graceful stop is short.
        let activity = self.agent.current.activity();
        if let Err(e) = activity.stop_and_wait(Some(reason.clone()), None).await {
            tracing::warn!(session = %self.link.id, "activity did not stop cleanly: {e}");
        }
        // Normally none is left (the Activity's speeches ended first); never lose one.
        self.inputs_unanswered();
        self.emit_now(EventKind::SessionClosed { reason: reason.clone() });
        if let Some(on_close) = self.host.close.take_on_close() {
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
        self.host.events.clear();
        let closed = self.conversation.closed(reason.clone());
        for waiter in waiters {
            let _ = waiter.send(closed.clone());
        }
        let _ = self.link.closed.set(closed);
        myself.stop(Some(reason));
    }
}
