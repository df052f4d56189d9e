//! The floor a waiting speech lends, and a speech's end, without a message unless the
//! Activity is waiting for one.
//!
//! A speech that waits for its blocking tools lets other speeches speak meanwhile (§10.1). Most
//! waits see no other speech, so a message each way would be pure cost: the speech *lends* the
//! floor instead. It marks its [`FloorLease`] and tells the Activity only if the Activity said
//! it is waiting for something ([`Attention`]). The Activity takes a lent floor when it has something to start;
//! the speech reclaims its floor without a message if nobody took it, and asks for it back
//! (the `FloorRequest` round trip, ahead of the queue) only if somebody did. A speech that ends
//! marks its lease finished the same way: the Activity collects it at its next message, and is
//! told at once only when it waits for the floor, an interrupt, a drain or a close.
//!
//! Both sides store their own flag, then read the other's (sequentially consistent): whichever
//! comes second sees the first, so a lend or an end that races the Activity's wish is never
//! missed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

const HELD: u8 = 0;
const LENT: u8 = 1;
const TAKEN: u8 = 2;
const FINISHED: u8 = 3;

/// One live speech's hold on the floor, shared by the speech's task and the Activity.
#[derive(Clone, Debug, Default)]
pub(crate) struct FloorLease(Arc<AtomicU8>);

impl FloorLease {
    /// The speech waits for its tools: the Activity may give the floor to another speech.
    pub(super) fn lend(&self) {
        self.0.store(LENT, Ordering::SeqCst);
    }

    /// The speech takes its lent floor back; false if the Activity gave it away meanwhile.
    pub(super) fn reclaim(&self) -> bool {
        self.0.compare_exchange(LENT, HELD, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The Activity takes a lent floor; false if the speech holds it.
    pub(super) fn take(&self) -> bool {
        self.0.compare_exchange(LENT, TAKEN, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The Activity hands the floor (back) to this speech.
    pub(super) fn hold(&self) {
        self.0.store(HELD, Ordering::SeqCst);
    }

    /// Lent and not taken: the speech waits for its tools and nobody else speaks because of it.
    pub(super) fn is_lent(&self) -> bool {
        self.0.load(Ordering::SeqCst) == LENT
    }

    /// The speech's task has ended (it told the Session itself).
    pub(super) fn finish(&self) {
        self.0.store(FINISHED, Ordering::SeqCst);
    }

    pub(super) fn is_finished(&self) -> bool {
        self.0.load(Ordering::SeqCst) == FINISHED
    }
}

/// Set by the Activity while it waits for something a speech may do — it has a speech to
/// start or a floor request to grant, an interrupt caller to answer, a drain or a close to
/// finish: a speech that lends its floor or ends then tells it at once (`ActivityMsg::Wake`).
/// It lives in the speeches' shared environment, so it costs no allocation of its own.
#[derive(Debug, Default)]
pub(crate) struct Attention(AtomicBool);

impl Attention {
    pub(super) fn set(&self, wanted: bool) {
        self.0.store(wanted, Ordering::SeqCst);
    }

    pub(super) fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_floor_is_reclaimed_unless_taken() {
        let lease = FloorLease::default();
        assert!(!lease.take(), "a held floor cannot be taken");
        assert!(!lease.reclaim(), "nothing to reclaim while held");
        lease.lend();
        assert!(lease.is_lent());
        assert!(lease.reclaim());
        assert!(!lease.is_lent());
        lease.lend();
        assert!(lease.take());
        assert!(!lease.is_lent() && !lease.reclaim(), "taken: the speech must ask");
        lease.hold();
        assert!(!lease.take());
        lease.finish();
        assert!(lease.is_finished() && !lease.take() && !lease.reclaim() && !lease.is_lent());
    }
}
