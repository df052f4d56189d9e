//! Label values: a bounded set of names (tool names, close reasons) and the spelling of the
//! events' enums. A label value makes a time series, so every label here takes a bounded set
//! of values (docs/decisions.md#metric-labels).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

/// The value counted in place of a name once a label has taken its share of distinct names.
pub const OTHER_LABEL: &str = "_other";

/// The tool of a call whose `tool_call_started` the watch did not see (it began watching late).
pub(crate) const UNKNOWN_TOOL: &str = "_unknown";

/// The first `limit` distinct values of one label keep their name; later ones count as
/// [`OTHER_LABEL`]. Names are what an agent's code or a host chose (tool names, close reasons), so a
/// process usually stays far below its limit; the limit is there for a model that invents
/// names or a host that puts an id in a reason.
pub(crate) struct BoundedLabel {
    limit: usize,
    seen: Mutex<HashSet<String>>,
}

impl BoundedLabel {
    pub(crate) fn new(limit: usize) -> Self {
        Self { limit, seen: Mutex::new(HashSet::new()) }
    }

    /// `value` if it is one of the first `limit` distinct values, else [`OTHER_LABEL`].
    pub(crate) fn admit(&self, value: &str) -> String {
        // A panic while holding the set cannot leave it half-updated: keep using it.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() < self.limit {
            seen.insert(value.to_string());
            return value.to_string();
        }
        OTHER_LABEL.to_string()
    }
}

/// How the events spell a unit variant (`rate_limit`, `tool_calls`); `other` for a variant
/// that carries data (a finish reason the runtime does not know, which a provider spelled).
pub(crate) fn spelled(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "other".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_model::{FinishReason, LlmErrorKind};

    #[test]
    fn a_label_keeps_its_first_names_and_counts_the_rest_as_other() {
        let label = BoundedLabel::new(2);
        assert_eq!(label.admit("lookup"), "lookup");
        assert_eq!(label.admit("book"), "book");
        assert_eq!(label.admit("cancel"), OTHER_LABEL);
        assert_eq!(label.admit("lookup"), "lookup", "a name already seen keeps its own");
    }

    #[test]
    fn enums_are_spelled_as_the_events_spell_them() {
        assert_eq!(spelled(&LlmErrorKind::RateLimit), "rate_limit");
        assert_eq!(spelled(&FinishReason::ToolCalls), "tool_calls");
        assert_eq!(spelled(&FinishReason::Other("pause_turn".into())), "other");
    }
}
