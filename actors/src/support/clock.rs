//! The session clock: tokio time plus a per-session sequence number (decision 21).
//!
//! Every actor of a session stamps items and events through a clone of the same clock, so
//! timestamps are totally ordered within a session and reproducible on the paused clock. It
//! also hands out call ids (decision 24): concurrent speeches of a session claim them here,
//! synchronously, so two responses that reuse one id never both keep it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use colloquy_model::{CallIds, Timestamp};
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
    /// Held only while one response's ids are claimed: never across an await.
    call_ids: Mutex<CallIds>,
    /// The tool calls the current user turn may still make (docs/decisions.md#edges-tool-deadlines).
    budget: TurnBudget,
}

/// A user turn's tool calls, its deferred replies' included: concurrent speeches claim them
/// here, synchronously, so together they never pass the limit.
#[derive(Debug)]
struct TurnBudget {
    limit: u32,
    used: AtomicU32,
    /// The exhaustion was announced this turn.
    announced: AtomicBool,
}

impl SessionClock {
    /// A clock starting now, whose timestamps begin after `offset_micros`.
    pub(crate) fn new(offset_micros: u64, max_tool_calls_per_turn: u32) -> Self {
        let budget = TurnBudget {
            limit: max_tool_calls_per_turn,
            used: AtomicU32::new(0),
            announced: AtomicBool::new(false),
        };
        Self {
            inner: Arc::new(Inner {
                start: Instant::now(),
                offset_micros,
                seq: AtomicU64::new(0),
                ids: AtomicU64::new(1),
                call_ids: Mutex::default(),
                budget,
            }),
        }
    }

    /// A new user turn: its tool-call budget is whole again.
    pub(crate) fn new_turn(&self) {
        self.inner.budget.used.store(0, Ordering::SeqCst);
        self.inner.budget.announced.store(false, Ordering::SeqCst);
    }

    /// A resumed turn that had made `used` tool calls before its process ended
    /// (docs/durability.md#resume-budget): they count, and a budget they spent was announced.
    pub(crate) fn resume_turn(&self, used: u32) {
        let budget = &self.inner.budget;
        budget.used.store(used.min(budget.limit), Ordering::SeqCst);
        budget.announced.store(used >= budget.limit, Ordering::SeqCst);
    }

    /// Claims up to `wanted` tool calls of the turn's budget; returns how many may run.
    pub(crate) fn claim_tool_calls(&self, wanted: usize) -> usize {
        let budget = &self.inner.budget;
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        let claimed = budget.used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
            Some(used.saturating_add(wanted).min(budget.limit.max(used)))
        });
        let before = claimed.unwrap_or_else(|used| used);
        budget.limit.saturating_sub(before).min(wanted) as usize
    }

    /// The most tool calls a user turn may make.
    pub(crate) fn tool_budget_limit(&self) -> u32 {
        self.inner.budget.limit
    }

    /// Whether the turn has used its whole budget.
    pub(crate) fn tool_budget_spent(&self) -> bool {
        let budget = &self.inner.budget;
        budget.used.load(Ordering::SeqCst) >= budget.limit
    }

    /// The turn's limit, once per turn when it is first found spent (to announce it).
    pub(crate) fn announce_tool_budget(&self) -> Option<u32> {
        let budget = &self.inner.budget;
        let first = self.tool_budget_spent() && !budget.announced.swap(true, Ordering::SeqCst);
        first.then_some(budget.limit)
    }

    /// Stamps the current instant.
    pub(crate) fn now(&self) -> Timestamp {
        let micros = self.inner.start.elapsed().as_micros() as u64;
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        Timestamp::new(self.inner.offset_micros + micros, seq)
    }

    /// Milliseconds since the session started (the `at_ms` of events).
    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.inner.start.elapsed().as_millis() as u64
    }

    /// The ids the calls of one response get, in order (see [`CallIds::claim`]).
    pub(crate) fn claim_call_ids<'a>(&self, proposed: impl IntoIterator<Item = &'a mut String>) {
        let mut book =
            self.inner.call_ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in proposed {
            let claimed = book.claim(id);
            if claimed != *id {
                tracing::debug!(model_id = %id, id = %claimed, "call id in use or empty: replaced");
                *id = claimed;
            }
        }
    }

    /// Marks the call ids of a restored history as in use.
    pub(crate) fn mark_call_ids<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut book =
            self.inner.call_ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            book.mark_used(id);
        }
    }

    /// Makes every later item id greater than the ids of `restored` items this clock's format
    /// made (`item_` and twelve hex digits, a step's calls `item_…/fnc_<n>`), so a resumed
    /// history never holds an id twice. Ids of another shape are left alone.
    pub(crate) fn skip_item_ids<'a>(&self, restored: impl IntoIterator<Item = &'a str>) {
        if let Some(last) = restored.into_iter().filter_map(item_number).max() {
            self.inner.ids.fetch_max(last + 1, Ordering::Relaxed);
        }
    }

    /// A fresh item id, unique within the session and reproducible.
    pub(crate) fn item_id(&self) -> String {
        item_id(self.inner.ids.fetch_add(1, Ordering::Relaxed))
    }
}

/// `item_` and `n` as at least twelve lower-case hex digits: what `format!("item_{n:012x}")`
/// writes, without the formatting machinery (ids are made several times per tool call).
fn item_id(n: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = [0u8; 16];
    for (i, digit) in hex.iter_mut().enumerate() {
        *digit = HEX[(n >> ((15 - i) * 4)) as usize & 0xf];
    }
    let digits = (16 - n.leading_zeros() as usize / 4).max(12);
    let mut id = String::with_capacity(5 + digits);
    id.push_str("item_");
    id.push_str(std::str::from_utf8(&hex[16 - digits..]).expect("hex digits are ASCII"));
    id
}

/// The number of an id [`item_id`] made below 2^48 (twelve digits), step calls included.
fn item_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix("item_")?.split('/').next()?;
    match digits.len() == 12 && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        true => u64::from_str_radix(digits, 16).ok(),
        false => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn restored_ids_are_read_back_and_others_ignored() {
        assert_eq!(super::item_number(&super::item_id(0x2a)), Some(0x2a));
        assert_eq!(super::item_number("item_00000000000b/fnc_3"), Some(11));
        assert_eq!(super::item_number("item_ZK3m9pQ2rT7x"), None);
        assert_eq!(super::item_number("item_ffffffffffffffff"), None);
        assert_eq!(super::item_number("msg_000000000001"), None);
        let clock = super::SessionClock::new(0, 20);
        clock.skip_item_ids(["item_000000000010", "item_000000000007/fnc_0", "custom"]);
        assert_eq!(clock.item_id(), "item_000000000011");
        clock.skip_item_ids(["item_000000000003"]);
        assert_eq!(clock.item_id(), "item_000000000012", "never backwards");
    }

    #[test]
    fn item_ids_are_zero_padded_hex() {
        for n in [0, 1, 0xabc, 0xffff_ffff_ffff, 0x1_0000_0000_0000, u64::MAX] {
            assert_eq!(super::item_id(n), format!("item_{n:012x}"));
        }
    }
}
