//! Closing a session (decision 7): from the request, through the Activity winding down and
//! the last calls ending, to `session_closed` and the actor's stop; and ending it after a
//! speech (the end-call tool).
//!
//! Invariants: a close starts once and finishes once; every `close` caller is answered with
//! the same `ClosedSession`; the host's close callback is called at most once.
//!
//! Applies: `CloseBegan`, `ActivityQuiet`, `CloseFinished`, `EndAfterSpeech`,
//! `EndAfterTaken`. Handles: the `close` callers, the host's close callback, the end-call
//! watchdog.

use ractor::RpcReplyPort;

use super::fact::Fact;
use crate::messages::{CloseCallback, ClosedSession};
use crate::support::task::OwnedTask;

/// A close in progress.
struct Closing {
    reason: String,
    /// The activity has no speech left; the close completes once no call runs either.
    activity_quiet: bool,
    /// The tree is stopped and `session_closed` emitted.
    finished: bool,
}

/// End the session once this speech is done (the end-call tool).
struct EndAfter {
    speech_id: String,
    reason: String,
}

#[derive(Default)]
pub(crate) struct CloseState {
    closing: Option<Closing>,
    /// Told with the final history once the close finishes.
    waiters: Vec<RpcReplyPort<ClosedSession>>,
    end_after: Option<EndAfter>,
    /// Ends the session anyway if the speech before the end never finishes.
    watchdog: Option<OwnedTask>,
    /// The host's close callback, called once after `session_closed`.
    on_close: Option<CloseCallback>,
}

impl CloseState {
    pub(crate) fn new(on_close: Option<CloseCallback>) -> Self {
        Self { on_close, ..Self::default() }
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Why the session is closing, once it is.
    pub(crate) fn reason(&self) -> Option<String> {
        self.closing.as_ref().map(|c| c.reason.clone())
    }

    /// The session ends once speech `speech_id` is done.
    pub(crate) fn ends_after(&self, speech_id: &str) -> bool {
        self.end_after.as_ref().is_some_and(|end| end.speech_id == speech_id)
    }

    /// Tells `reply` the final history once the close finishes.
    pub(crate) fn join(&mut self, reply: Option<RpcReplyPort<ClosedSession>>) {
        self.waiters.extend(reply);
    }

    /// Closing, and the Activity has no speech left.
    pub(crate) fn is_quiet(&self) -> bool {
        self.closing.as_ref().is_some_and(|c| c.activity_quiet)
    }

    /// The close's reason, while it has not finished yet.
    pub(crate) fn unfinished(&self) -> Option<&str> {
        self.closing.as_ref().filter(|c| !c.finished).map(|c| c.reason.as_str())
    }

    /// The callers to tell the final history, once.
    pub(crate) fn take_waiters(&mut self) -> Vec<RpcReplyPort<ClosedSession>> {
        std::mem::take(&mut self.waiters)
    }

    /// The host's close callback, once.
    pub(crate) fn take_on_close(&mut self) -> Option<CloseCallback> {
        self.on_close.take()
    }

    /// The end-after-speech request's close reason.
    pub(crate) fn end_reason(&self) -> Option<&str> {
        self.end_after.as_ref().map(|end| end.reason.as_str())
    }

    /// Ends the session anyway once `watchdog` fires (after `EndAfterSpeech`).
    pub(crate) fn watch(&mut self, watchdog: Option<OwnedTask>) {
        self.watchdog = watchdog;
    }

    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::CloseBegan { reason } => {
                let reason = reason.to_string();
                self.closing = Some(Closing { reason, activity_quiet: false, finished: false });
            }
            Fact::ActivityQuiet => {
                if let Some(closing) = &mut self.closing {
                    closing.activity_quiet = true;
                }
            }
            Fact::CloseFinished => {
                // The session stays closing (it refuses new work) until its actor has stopped.
                if let Some(closing) = &mut self.closing {
                    closing.finished = true;
                }
            }
            Fact::EndAfterSpeech { speech_id, reason } => {
                let (speech_id, reason) = (speech_id.to_string(), reason.to_string());
                self.end_after = Some(EndAfter { speech_id, reason });
            }
            Fact::EndAfterTaken => {
                self.end_after = None;
                self.watchdog = None;
            }
            _ => {}
        }
    }
}
