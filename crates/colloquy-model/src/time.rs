//! Virtual timestamps for chat items.
//!
//! The runtime stamps every item with the session's tokio time plus a per-session sequence
//! number (decision 21), so two items created at the same virtual instant still have a total,
//! reproducible order.

use serde::{Deserialize, Serialize};

/// When an item was created: microseconds of session time, then a per-session sequence number
/// that breaks ties. Ordering is lexicographic.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Timestamp {
    /// Microseconds since the session's time origin.
    pub micros: u64,
    /// Per-session sequence number, strictly increasing in stamping order.
    pub seq: u64,
}

impl Timestamp {
    /// A timestamp from its parts.
    pub const fn new(micros: u64, seq: u64) -> Self {
        Self { micros, seq }
    }

    /// Whole milliseconds of session time.
    pub const fn as_millis(&self) -> u64 {
        self.micros / 1000
    }
}
