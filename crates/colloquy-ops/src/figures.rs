//! The metric families, registered under their names and help texts, and the bounded labels
//! that feed them. What each counts is in docs/operations.md; which event moves it, in
//! `tally.rs`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::labels::BoundedLabel;

/// The upper bounds, in seconds, of the tool call duration buckets: from a lookup (10 ms) to a
/// background job (5 min); a longer call lands in `+Inf`.
pub const DURATION_BUCKETS: [f64; 13] =
    [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// A series' labels, names and values, in the order the exposition prints them. Each family
/// is moved from one place in `tally.rs`, which names its labels.
pub(crate) type Labels<const N: usize> = [(&'static str, String); N];

type Durations = Family<Labels<2>, Histogram, fn() -> Histogram>;

fn durations() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Every metric family, and the bounded labels that feed them.
pub(crate) struct Figures {
    pub(crate) sessions_live: Gauge,
    pub(crate) sessions_started: Counter,
    pub(crate) sessions_closed: Family<Labels<1>, Counter>,
    pub(crate) watch_overflows: Counter,
    pub(crate) tool_calls_started: Family<Labels<1>, Counter>,
    pub(crate) tool_calls_ended: Family<Labels<2>, Counter>,
    pub(crate) tool_call_duration: Durations,
    pub(crate) tool_call_retries: Family<Labels<1>, Counter>,
    pub(crate) tool_calls_refused: Family<Labels<2>, Counter>,
    pub(crate) tool_calls_dropped: Family<Labels<1>, Counter>,
    pub(crate) llm_responses: Family<Labels<1>, Counter>,
    pub(crate) llm_errors: Family<Labels<1>, Counter>,
    pub(crate) llm_tokens: Family<Labels<1>, Counter>,
    pub(crate) errors: Family<Labels<1>, Counter>,
    pub(crate) tool_names: BoundedLabel,
    pub(crate) close_reasons: BoundedLabel,
}

impl Figures {
    pub(crate) fn register(
        registry: &mut Registry,
        max_tool_names: usize,
        max_close_reasons: usize,
    ) -> Self {
        let figures = Self {
            sessions_live: Gauge::default(),
            sessions_started: Counter::default(),
            sessions_closed: Family::default(),
            watch_overflows: Counter::default(),
            tool_calls_started: Family::default(),
            tool_calls_ended: Family::default(),
            tool_call_duration: Durations::new_with_constructor(durations),
            tool_call_retries: Family::default(),
            tool_calls_refused: Family::default(),
            tool_calls_dropped: Family::default(),
            llm_responses: Family::default(),
            llm_errors: Family::default(),
            llm_tokens: Family::default(),
            errors: Family::default(),
            tool_names: BoundedLabel::new(max_tool_names),
            close_reasons: BoundedLabel::new(max_close_reasons),
        };
        let f = &figures;
        registry.register(
            "sessions_live",
            "Sessions watched that have not closed",
            f.sessions_live.clone(),
        );
        registry.register(
            "sessions_started",
            "Sessions watched since the process started",
            f.sessions_started.clone(),
        );
        registry.register(
            "sessions_closed",
            "Sessions closed, by close reason",
            f.sessions_closed.clone(),
        );
        registry.register(
            "watch_overflows",
            "Watched sessions whose event stream overflowed: their figures stop there",
            f.watch_overflows.clone(),
        );
        registry.register(
            "tool_calls_started",
            "Tool calls started, by tool",
            f.tool_calls_started.clone(),
        );
        registry.register(
            "tool_calls_ended",
            "Tool calls ended, by tool and terminal status",
            f.tool_calls_ended.clone(),
        );
        registry.register_with_unit(
            "tool_call_duration",
            "Tool call durations from start to end on the session clock, by tool and status",
            Unit::Seconds,
            f.tool_call_duration.clone(),
        );
        registry.register(
            "tool_call_retries",
            "Tool call attempts retried, by tool",
            f.tool_call_retries.clone(),
        );
        registry.register(
            "tool_calls_refused",
            "Tool calls the duplicate policy answered without running, by tool and reason",
            f.tool_calls_refused.clone(),
        );
        registry.register(
            "tool_calls_dropped",
            "Tool calls dropped because the request allowed none, by tool",
            f.tool_calls_dropped.clone(),
        );
        registry.register(
            "llm_responses",
            "LLM responses the provider described (finish reason or usage), by finish reason",
            f.llm_responses.clone(),
        );
        registry.register(
            "llm_errors",
            "LLM requests that failed, by error kind",
            f.llm_errors.clone(),
        );
        registry.register(
            "llm_tokens",
            "Tokens the provider reported, by kind (prompt, completion, cached_prompt)",
            f.llm_tokens.clone(),
        );
        registry.register("errors", "Error events, by source", f.errors.clone());
        figures
    }
}
