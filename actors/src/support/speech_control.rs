//! What a speech's tools may do to it: read or forbid its interruption (§2
//! `disallow_interruptions`, §12.2). Shared by the Activity, the speech task and the calls the
//! speech dispatched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// A speech's interruption switch and signal. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct SpeechControl {
    allow: Arc<AtomicBool>,
    interrupt: CancellationToken,
}

impl SpeechControl {
    pub(crate) fn new(allow_interruptions: bool) -> Self {
        Self {
            allow: Arc::new(AtomicBool::new(allow_interruptions)),
            interrupt: CancellationToken::new(),
        }
    }

    /// Whether the speech may be interrupted (read at the moment of asking, even after the
    /// speech finished: a call it dispatched stays protected, §12.2).
    pub(crate) fn allows_interruptions(&self) -> bool {
        self.allow.load(Ordering::SeqCst)
    }

    /// Forbids interruptions; fails if the speech is already interrupted.
    pub(crate) fn disallow(&self) -> Result<(), &'static str> {
        if self.interrupt.is_cancelled() {
            return Err(
                "Cannot set allow_interruptions to False, the SpeechHandle is already interrupted",
            );
        }
        self.allow.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Interrupts the speech.
    pub(crate) fn interrupt(&self) {
        self.interrupt.cancel();
    }

    /// True once interrupted.
    pub(crate) fn is_interrupted(&self) -> bool {
        self.interrupt.is_cancelled()
    }

    /// The interruption signal.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.interrupt
    }
}
