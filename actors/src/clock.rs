//! The session clock: tokio time plus a per-session sequence number (decision 21).
//!
//! Every actor of a session stamps items and events through a clone of the same clock, so
//! timestamps are totally ordered within a session and reproducible on the paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use colloquy_core::Timestamp;
use tokio::time::Instant;

/// A session's clock and id source. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct SessionClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    start: Instant,
    /// Added to every timestamp so items of a restored history stay before new ones.
    offset_micros: u64,
    seq: AtomicU64,
    ids: AtomicU64,
}

impl SessionClock {
    /// A clock starting now, whose timestamps begin after `offset_micros`.
    pub fn new(offset_micros: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                start: Instant::now(),
                offset_micros,
                seq: AtomicU64::new(0),
                ids: AtomicU64::new(1),
            }),
        }
    }

    /// Stamps the current instant.
    pub fn now(&self) -> Timestamp {
        let micros = self.inner.start.elapsed().as_micros() as u64;
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        Timestamp::new(self.inner.offset_micros + micros, seq)
    }

    /// Milliseconds since the session started (the `at_ms` of events).
    pub fn elapsed_ms(&self) -> u64 {
        self.inner.start.elapsed().as_millis() as u64
    }

    /// A fresh item id, unique within the session and reproducible.
    pub fn item_id(&self) -> String {
        format!("item_{:012x}", self.inner.ids.fetch_add(1, Ordering::Relaxed))
    }
}
