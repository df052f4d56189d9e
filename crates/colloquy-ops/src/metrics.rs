//! [`Metrics`]: the figures in a Prometheus registry, the sessions they follow, and their
//! OpenMetrics text.

use std::sync::Arc;

use colloquy_actors::SessionHandle;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::figures::Figures;
use crate::tally;

/// The prefix of every metric name.
pub const PREFIX: &str = "colloquy";

/// How many distinct tool names keep their own label by default.
pub const DEFAULT_MAX_TOOL_NAMES: usize = 64;

/// How many distinct close reasons of a host's own keep their own label by default.
pub const DEFAULT_MAX_CLOSE_REASONS: usize = 16;

/// The figures of the sessions a process runs, for Prometheus. Cheap to clone: clones share
/// the figures. A host calls [`watch`](Self::watch) once for each session it starts and serves
/// [`render`](Self::render) (or [`router`](crate::router)) to its scraper.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use colloquy_actors::Session;
/// use colloquy_model::Agent;
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
    registry: Arc<Registry>,
    figures: Arc<Figures>,
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

    /// The first `limit` distinct close reasons of the host's own keep their own `reason`
    /// label; later ones are counted as `_other` ([`DEFAULT_MAX_CLOSE_REASONS`] unless set).
    /// The reasons colloquy names ([`CloseReason`](colloquy_model::CloseReason)) always keep
    /// theirs.
    pub fn max_close_reasons(mut self, limit: usize) -> Self {
        self.max_close_reasons = limit;
        self
    }

    /// The metrics, registered and at zero.
    pub fn build(self) -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let figures = Figures::register(&mut registry, self.max_tool_names, self.max_close_reasons);
        Metrics { registry: Arc::new(registry), figures: Arc::new(figures) }
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
        self.figures.sessions_started.inc();
        self.figures.sessions_live.inc();
        tokio::spawn(tally::follow(Arc::clone(&self.figures), events))
    }

    /// The OpenMetrics text exposition of every figure, ending with `# EOF`.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a `String` cannot fail; the encoder escapes label values (a tool name or a
        // close reason with a quote or a newline stays one well-formed line).
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    #[cfg(test)]
    pub(crate) fn figures(&self) -> &Arc<Figures> {
        &self.figures
    }
}
