//! Call ids belong to the runtime (decision 24): the model's id is kept when it is non-empty
//! and not in use; otherwise the call gets a fresh id before anything records it.
//!
//! "In use" means claimed before in this session — running, or anywhere in the history —
//! including the ids derived from a call (`<id>_update_<n>`, `<id>_final`): a model id that
//! equals a derived id of an earlier call is in use, and so is a model id whose derived ids an
//! earlier call already holds. Fresh ids are deterministic (decision 21) and made of
//! `[A-Za-z0-9_-]` only: `<id>_<n>` with the smallest free `n` from 2, and `call_<n>` for an
//! empty id.

use std::collections::BTreeSet;

/// The call ids a session has handed out.
///
/// ```
/// use colloquy_model::CallIds;
/// let mut ids = CallIds::default();
/// assert_eq!(ids.claim("call_0"), "call_0");
/// assert_eq!(ids.claim("call_0"), "call_0_2"); // reused by the next response
/// assert_eq!(ids.claim(""), "call_1");          // no id at all
/// assert_eq!(ids.claim("call_0_final"), "call_0_final_2"); // a derived id of call_0
/// ```
// Ordered sets: no hashing on the hot path (every call claims an id), and a session holds
// few enough ids that a lookup is a handful of comparisons.
#[derive(Clone, Debug, Default)]
pub struct CallIds {
    used: BTreeSet<String>,
    /// The bases of claimed ids that look derived (`x_final` claims `x`'s derived ids).
    derived_bases: BTreeSet<String>,
    /// The last `n` of `call_<n>` handed out for an empty id.
    unnamed: u64,
}

impl CallIds {
    /// The id the call gets for `proposed`, now in use.
    pub fn claim(&mut self, proposed: &str) -> String {
        // The usual case, one lookup: a fresh, plain id the model gave.
        if !proposed.is_empty()
            && derived_base(proposed).is_none()
            && !self.derived_bases.contains(proposed)
            && self.used.insert(proposed.to_string())
        {
            return proposed.to_string();
        }
        let id = if proposed.is_empty() {
            loop {
                self.unnamed += 1;
                let id = format!("call_{}", self.unnamed);
                if !self.is_used(&id) {
                    break id;
                }
            }
        } else if self.is_used(proposed) {
            let stem: String = proposed
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
                .collect();
            (2u64..)
                .map(|n| format!("{stem}_{n}"))
                .find(|id| !self.is_used(id))
                .expect("some suffix is free")
        } else {
            proposed.to_string()
        };
        self.mark_used(&id);
        id
    }

    /// Records ids already in a history (a session resumed from stored items).
    pub fn mark_used(&mut self, id: &str) {
        if let Some(base) = derived_base(id) {
            self.derived_bases.insert(base.to_string());
        }
        self.used.insert(id.to_string());
    }

    /// Whether `id` (or a call whose derived ids include it) is in use.
    pub fn is_used(&self, id: &str) -> bool {
        self.used.contains(id)
            || self.derived_bases.contains(id)
            || derived_base(id).is_some_and(|base| self.used.contains(base))
    }
}

/// `x` for `x_final` and `x_update_<digits>`: the call a synthetic pair's id derives from
/// (suffix checks only: this runs for every call).
///
/// ```
/// use colloquy_model::call_ids::derived_base;
/// assert_eq!(derived_base("call_7_update_12"), Some("call_7"));
/// assert_eq!(derived_base("call_7_final"), Some("call_7"));
/// assert_eq!(derived_base("call_7"), None);
/// ```
pub fn derived_base(id: &str) -> Option<&str> {
    if let Some(base) = id.strip_suffix("_final") {
        return Some(base);
    }
    let stem = id.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == id.len() {
        return None;
    }
    stem.strip_suffix("_update_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_skip_every_kind_of_use() {
        let mut ids = CallIds::default();
        assert_eq!(ids.claim("c1"), "c1");
        assert_eq!(ids.claim("c1"), "c1_2");
        assert_eq!(ids.claim("c1"), "c1_3");
        assert_eq!(ids.claim("c1_update_2"), "c1_update_2_2", "derived from c1");
        // A model id claimed first makes its own derived ids unavailable to later calls.
        assert_eq!(ids.claim("d_final"), "d_final");
        assert_eq!(ids.claim("d"), "d_2");
        assert_eq!(ids.claim("x_update_"), "x_update_", "no digits: not derived");
        assert_eq!(ids.claim("call:7"), "call:7", "kept as sent when free");
        assert_eq!(ids.claim("call:7"), "call_7_2", "fresh ids are [A-Za-z0-9_-]");
    }

    #[test]
    fn empty_ids_count_past_ids_in_use() {
        let mut ids = CallIds::default();
        ids.mark_used("call_1");
        assert_eq!(ids.claim(""), "call_2");
        assert_eq!(ids.claim(""), "call_3");
        assert_eq!(ids.claim("call_3"), "call_3_2");
    }
}
