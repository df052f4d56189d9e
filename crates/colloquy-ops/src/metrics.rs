//! [`Metrics`]: the runtime's figures in a Prometheus registry, and their OpenMetrics text.
//! What each figure counts is in docs/operations.md; which event moves it, in `tally.rs`.

use std::sync::Arc;

use colloquy_actors::SessionHandle;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio::task::JoinHandle;

use crate::labels::BoundedLabel;
use crate::tally;

/// The prefix of every metric name.
pub const PREFIX: &str = "colloquy";

/// The upper bounds, in seconds, of the tool call duration buckets: from a lookup (10 ms) to a
/// background job (5 min); a longer call lands in `+Inf`.
pub const DURATION_BUCKETS: [f64; 13] =
    [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// How many distinct tool names keep their own label by default.
pub const DEFAULT_MAX_TOOL_NAMES: usize = 64;

/// How many distinct close reasons keep their own label by default.
pub const DEFAULT_MAX_CLOSE_REASONS: usize = 16;

/// The figures of the sessions a process runs, for Prometheus. Cheap to clone: clones share
/// the figures. A host calls [`watch`](Self::watch) once for each session it starts and serves
/// [`render`](Self::render) (or [`router`](crate::router)) to its scraper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use colloquy_actors::Session;
/// use colloquy_core::Agent;
/// use colloquy_llm::{ScriptedLlm, ScriptedResponse};
/// use colloquy_ops::Metrics;
///
/// let metrics = Metrics::new();
/// let llm = ScriptedLlm::new([ScriptedResponse::text("Hello.")]);
/// let session = Session::builder().llm(llm).start(Agent::new("desk", "You help.")).await.unwrap();
/// let watching = metrics.watch(&session);
/// session.close().await.unwrap();
/// watching.await.unwrap();
/// let text = metrics.render();
/// assert!(text.contains("colloquy_sessions_closed_total{reason=\"close\"} 1"));
/// assert!(text.ends_with("# EOF\n"));
/// # }
/// ```
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    figures: Figures,
}

/// Settings of a [`Metrics`]: how many distinct values its open-ended labels keep.
#[derive(Clone, Debug)]
pub struct MetricsBuilder {
    max_tool_names: usize,
    max_close_reasons: usize,
}

impl Default for MetricsBuilder {
    fn default() -> Self {
        Self {
            max_tool_names: DEFAULT_MAX_TOOL_NAMES,
            max_close_reasons: DEFAULT_MAX_CLOSE_REASONS,
        }
    }
}

impl MetricsBuilder {
    /// The first `limit` distinct tool names keep their own `tool` label; later ones are
    /// counted as `_other` ([`DEFAULT_MAX_TOOL_NAMES`] unless set).
    pub fn max_tool_names(mut self, limit: usize) -> Self {
        self.max_tool_names = limit;
        self
    }

    /// The first `limit` distinct close reasons keep their own `reason` label; later ones are
    /// counted as `_other` ([`DEFAULT_MAX_CLOSE_REASONS`] unless set).
    pub fn max_close_reasons(mut self, limit: usize) -> Self {
        self.max_close_reasons = limit;
        self
    }

    /// The metrics, registered and at zero.
    pub fn build(self) -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let figures = Figures::register(&mut registry, &self);
        Metrics { inner: Arc::new(Inner { registry, figures }) }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics with the default label limits.
    pub fn new() -> Self {
        MetricsBuilder::default().build()
    }

    /// Metrics with other label limits.
    pub fn builder() -> MetricsBuilder {
        MetricsBuilder::default()
    }

    /// Counts `session` as started and live, and updates the figures from its events in a task
    /// until it closes; the task holds no handle, so it never keeps a session alive, and it ends
    /// with the session's event stream. Subscribes only to the event types the figures read
    /// (never the agent's text deltas). Call it right after `start`: a tool call that started
    /// before has no duration and counts under tool `_unknown`. Needs a tokio runtime.
    pub fn watch(&self, session: &SessionHandle) -> JoinHandle<()> {
        let events = session.subscribe_to(tally::watched_events());
        self.inner.figures.sessions_started.inc();
        self.inner.figures.sessions_live.inc();
        tokio::spawn(tally::follow(self.clone(), events))
    }

    /// The OpenMetrics text exposition of every figure, ending with `# EOF`.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a `String` cannot fail; the encoder escapes label values (a tool name or a
        // close reason with a quote or a newline stays one well-formed line).
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry);
        text
    }

    pub(crate) fn figures(&self) -> &Figures {
        &self.inner.figures
    }
}

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
    fn register(registry: &mut Registry, settings: &MetricsBuilder) -> Self {
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
            tool_names: BoundedLabel::new(settings.max_tool_names),
            close_reasons: BoundedLabel::new(settings.max_close_reasons),
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
