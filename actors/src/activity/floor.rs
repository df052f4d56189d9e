//! The floor a waiting speech lends, without a message unless someone wants it.
//!
//! A speech that waits for its blocking tools lets other speeches speak meanwhile (§10.1). It
//! used to tell the Activity every time and ask for the floor back with a round trip; most
//! waits see no other speech, so both were pure cost. Now the speech *lends* the floor: it
//! marks its [`FloorLease`] and tells the Activity only if the Activity said it wants the floor
//! ([`FloorWanted`]). The Activity takes a lent floor when it has something to start; the
//! speech reclaims its floor without a message if nobody took it, and asks for it back (the
//! `FloorRequest` round trip, ahead of the queue) only if somebody did.
//!
//! Both sides store their own flag, then read the other's (sequentially consistent): whichever
//! comes second sees the first, so a lend that races the Activity's wish is never missed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

const HELD: u8 = 0;
const LENT: u8 = 1;
const TAKEN: u8 = 2;

/// One live speech's hold on the floor, shared by the speech's task and the Activity.
#[derive(Clone, Debug, Default)]
pub(crate) struct FloorLease(Arc<AtomicU8>);

impl FloorLease {
    /// The speech waits for its tools: the Activity may give the floor to another speech.
    pub fn lend(&self) {
        self.0.store(LENT, Ordering::SeqCst);
    }

    /// The speech takes its lent floor back; false if the Activity gave it away meanwhile.
    pub fn reclaim(&self) -> bool {
        self.0.compare_exchange(LENT, HELD, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The Activity takes a lent floor; false if the speech holds it.
    pub fn take(&self) -> bool {
        self.0.compare_exchange(LENT, TAKEN, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The Activity hands the floor (back) to this speech.
    pub fn hold(&self) {
        self.0.store(HELD, Ordering::SeqCst);
    }

    /// Lent and not taken: the speech waits for its tools and nobody else speaks because of it.
    pub fn is_lent(&self) -> bool {
        self.0.load(Ordering::SeqCst) == LENT
    }
}

/// Set by the Activity while it has a speech to start or a request to grant and the floor is
/// held: a speech that lends its floor then tells it at once (`FloorReleased`).
#[derive(Clone, Debug, Default)]
pub(crate) struct FloorWanted(Arc<AtomicBool>);

impl FloorWanted {
    pub fn set(&self, wanted: bool) {
        self.0.store(wanted, Ordering::SeqCst);
    }

    pub fn get(&self) -> bool {
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
    }
}
