//! The closing state (decision 7) and the end-after-speech request (the end-call tool).
//!
//! Invariants: a close starts once and finishes once; every `close` caller is answered with
//! the same `ClosedSession`; the host's close callback is called at most once.

use ractor::RpcReplyPort;

use crate::protocol::{CloseCallback, ClosedSession};
use crate::support::task::OwnedTask;

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
pub(crate) struct CloseState {
    closing: Option<Closing>,
    end_after: Option<EndAfter>,
    /// The host's close callback, called once after `session_closed`.
    on_close: Option<CloseCallback>,
}

impl CloseState {
    pub fn new(on_close: Option<CloseCallback>) -> Self {
        Self { on_close, ..Self::default() }
    }

    pub fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Why the session is closing, once it is.
    pub fn reason(&self) -> Option<String> {
        self.closing.as_ref().map(|c| c.reason.clone())
    }

    /// The session ends once speech `speech_id` is done.
    pub fn ends_after(&self, speech_id: &str) -> bool {
        self.end_after.as_ref().is_some_and(|end| end.speech_id == speech_id)
    }

    /// Starts closing with `reason`; false (and `reply` joins the waiters) if already closing.
    pub fn begin(&mut self, reason: String, reply: Option<RpcReplyPort<ClosedSession>>) -> bool {
        if let Some(closing) = &mut self.closing {
            closing.waiters.extend(reply);
            return false;
        }
        let waiters = reply.into_iter().collect();
        self.closing = Some(Closing { reason, waiters, activity_quiet: false, finished: false });
        true
    }

    /// The Activity has no speech left.
    pub fn activity_quiet(&mut self) {
        if let Some(closing) = &mut self.closing {
            closing.activity_quiet = true;
        }
    }

    /// Closing, and the Activity has no speech left.
    pub fn is_quiet(&self) -> bool {
        self.closing.as_ref().is_some_and(|c| c.activity_quiet)
    }

    /// Marks the close finished: its reason and waiters, the first time only. The session
    /// stays closing (it refuses new work) until its actor has stopped.
    pub fn finish(&mut self) -> Option<(String, Vec<RpcReplyPort<ClosedSession>>)> {
        let closing = self.closing.as_mut().filter(|c| !c.finished)?;
        closing.finished = true;
        Some((closing.reason.clone(), std::mem::take(&mut closing.waiters)))
    }

    /// The host's close callback, once.
    pub fn take_on_close(&mut self) -> Option<CloseCallback> {
        self.on_close.take()
    }

    /// End the session once `speech_id` is done; `watchdog` ends it anyway.
    pub fn end_after(&mut self, speech_id: String, reason: String, watchdog: Option<OwnedTask>) {
        self.end_after = Some(EndAfter { speech_id, reason, _watchdog: watchdog });
    }

    /// The end-after-speech request, once: its close reason.
    pub fn take_end_after(&mut self) -> Option<String> {
        self.end_after.take().map(|end| end.reason)
    }
}
