//! From one session's events to the figures: which event moves which metric. A tool call's
//! name and start time are kept from its `tool_call_started` until its `tool_call_ended`,
//! which carries neither.

use std::collections::HashMap;
use std::sync::Arc;

use colloquy_actors::EventStream;
use colloquy_model::{CloseReason, ErrorSource, EventFilter, EventKind, EventType, SessionEvent};

use crate::figures::Figures;
use crate::labels::{UNKNOWN_TOOL, spelled};

/// The close reason counted for a session whose stream ended without `session_closed`: its
/// actor stopped without closing, or it had closed before the watch began.
pub(crate) const LOST: &str = "_lost";

/// The event types the figures read: the session asks for none of the others (no state
/// changes, no history items, never the agent's text).
pub(crate) fn watched_events() -> EventFilter {
    EventFilter::only([
        EventType::ToolCallStarted,
        EventType::ToolCallEnded,
        EventType::ToolCallRetry,
        EventType::ToolCallRefused,
        EventType::ToolCallDropped,
        EventType::Error,
        EventType::LlmStepEnded,
        EventType::SessionClosed,
    ])
}

/// Reads `events` to their end, then counts the session as no longer live.
pub(crate) async fn follow(figures: Arc<Figures>, mut events: EventStream) {
    let mut tally = Tally::new(figures);
    while let Some(event) = events.recv().await {
        tally.observe(&event);
    }
    tally.finish();
}

/// A started call, until it ends.
struct Running {
    tool: String,
    started_ms: u64,
}

/// One session's part of the figures.
pub(crate) struct Tally {
    figures: Arc<Figures>,
    running: HashMap<String, Running>,
    /// `session_closed` or `x_stream_overflowed` came: the session is no longer counted live.
    ended: bool,
}

impl Tally {
    pub(crate) fn new(figures: Arc<Figures>) -> Self {
        Self { figures, running: HashMap::new(), ended: false }
    }

    pub(crate) fn observe(&mut self, event: &SessionEvent) {
        let f = &self.figures;
        match &event.kind {
            EventKind::ToolCallStarted { call_id, name } => {
                let tool = f.tool_names.admit(name);
                f.tool_calls_started.get_or_create(&[("tool", tool.clone())]).inc();
                self.running.insert(call_id.clone(), Running { tool, started_ms: event.at_ms });
            }
            EventKind::ToolCallEnded { call_id, status, .. } => {
                let running = self.running.remove(call_id);
                let tool = running.as_ref().map_or(UNKNOWN_TOOL, |r| r.tool.as_str()).to_string();
                let labels = [("tool", tool), ("status", status.as_str().to_string())];
                f.tool_calls_ended.get_or_create(&labels).inc();
                if let Some(Running { started_ms, .. }) = running {
                    let ms = event.at_ms.saturating_sub(started_ms);
                    // Milliseconds of the session clock: exact in an f64.
                    #[allow(clippy::cast_precision_loss)]
                    let seconds = ms as f64 / 1000.0;
                    f.tool_call_duration.get_or_create(&labels).observe(seconds);
                }
            }
            EventKind::ToolCallRetry { call_id, .. } => {
                let tool = self.running.get(call_id).map_or(UNKNOWN_TOOL, |r| r.tool.as_str());
                f.tool_call_retries.get_or_create(&[("tool", tool.to_string())]).inc();
            }
            EventKind::ToolCallRefused { name, reason, .. } => {
                let labels =
                    [("tool", f.tool_names.admit(name)), ("reason", reason.as_str().to_string())];
                f.tool_calls_refused.get_or_create(&labels).inc();
            }
            EventKind::ToolCallDropped { name, .. } => {
                f.tool_calls_dropped.get_or_create(&[("tool", f.tool_names.admit(name))]).inc();
            }
            EventKind::Error { source, llm_error, .. } => {
                f.errors.get_or_create(&[("source", source.as_str().to_string())]).inc();
                if *source == ErrorSource::Llm {
                    let kind = llm_error.as_ref().map_or_else(|| "unknown".to_string(), spelled);
                    f.llm_errors.get_or_create(&[("kind", kind)]).inc();
                }
            }
            EventKind::LlmStepEnded { finish_reason, usage, .. } => {
                let finish_reason =
                    finish_reason.as_ref().map_or_else(|| "none".to_string(), spelled);
                f.llm_responses.get_or_create(&[("finish_reason", finish_reason)]).inc();
                if let Some(usage) = usage {
                    for (kind, tokens) in [
                        ("prompt", usage.prompt_tokens),
                        ("completion", usage.completion_tokens),
                        ("cached_prompt", usage.cached_prompt_tokens),
                    ] {
                        f.llm_tokens.get_or_create(&[("kind", kind.to_string())]).inc_by(tokens);
                    }
                }
            }
            EventKind::SessionClosed { reason } => {
                // The runtime's own reasons are a closed set; only a host's are bounded.
                let reason = match CloseReason::parse(reason).is_known() {
                    true => reason.clone(),
                    false => f.close_reasons.admit(reason),
                };
                f.sessions_closed.get_or_create(&[("reason", reason)]).inc();
                self.end();
            }
            EventKind::StreamOverflowed { .. } => {
                f.watch_overflows.inc();
                self.end();
            }
            _ => {}
        }
    }

    /// The session is no longer live (once).
    fn end(&mut self) {
        if !std::mem::replace(&mut self.ended, true) {
            self.figures.sessions_live.dec();
        }
    }

    /// The stream ended: a session that did not say it closed is counted closed as `_lost`.
    pub(crate) fn finish(mut self) {
        if !self.ended {
            let lost = [("reason", LOST.to_string())];
            self.figures.sessions_closed.get_or_create(&lost).inc();
            self.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use colloquy_model::{FinishReason, LlmErrorKind, RefusalReason, ToolCallStatus, Usage};

    use super::*;
    use crate::metrics::Metrics;

    fn at(at_ms: u64, kind: EventKind) -> SessionEvent {
        SessionEvent { at_ms, kind }
    }

    fn started(at_ms: u64, call_id: &str, name: &str) -> SessionEvent {
        at(at_ms, EventKind::ToolCallStarted { call_id: call_id.into(), name: name.into() })
    }

    fn ended(at_ms: u64, call_id: &str, status: ToolCallStatus) -> SessionEvent {
        let kind = EventKind::ToolCallEnded {
            id: call_id.into(),
            call_id: call_id.into(),
            status,
            message: None,
            cached: false,
        };
        at(at_ms, kind)
    }

    /// The exposition's lines that start with `prefix`, sorted: a family's series come in its
    /// hash map's order.
    fn lines(metrics: &Metrics, prefix: &str) -> Vec<String> {
        let text = metrics.render();
        let mut lines: Vec<String> =
            text.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect();
        lines.sort();
        lines
    }

    fn watching(metrics: &Metrics) -> Tally {
        metrics.figures().sessions_live.inc();
        Tally::new(Arc::clone(metrics.figures()))
    }

    #[test]
    fn the_watch_asks_for_what_it_reads_and_never_the_agent_text() {
        let filter = watched_events();
        assert!(!filter.contains(EventType::AgentText));
        assert!(!filter.contains(EventType::ConversationItemAdded));
        assert!(!filter.contains(EventType::AgentState));
        assert!(filter.contains(EventType::ToolCallEnded) && filter.contains(EventType::Error));
    }

    #[test]
    fn a_call_is_counted_by_tool_and_status_with_its_duration_on_the_session_clock() {
        let metrics = Metrics::new();
        let mut tally = watching(&metrics);
        tally.observe(&started(100, "c1", "lookup"));
        let retry =
            EventKind::ToolCallRetry { call_id: "c1".into(), attempt: 2, reason: "x".into() };
        tally.observe(&at(150, retry));
        tally.observe(&ended(1_600, "c1", ToolCallStatus::Error));
        tally.observe(&ended(1_700, "c9", ToolCallStatus::Done));
        assert_eq!(
            lines(&metrics, "colloquy_tool_calls_ended_total"),
            [
                r#"colloquy_tool_calls_ended_total{tool="_unknown",status="done"} 1"#,
                r#"colloquy_tool_calls_ended_total{tool="lookup",status="error"} 1"#,
            ]
        );
        assert_eq!(
            lines(&metrics, "colloquy_tool_call_duration_seconds_sum"),
            [r#"colloquy_tool_call_duration_seconds_sum{tool="lookup",status="error"} 1.5"#],
            "a call whose start was not seen has no duration"
        );
        let buckets = lines(&metrics, "colloquy_tool_call_duration_seconds_bucket");
        assert!(
            buckets.iter().any(|l| l.contains(r#"le="1.0""#) && l.ends_with(" 0")),
            "{buckets:?}"
        );
        assert!(
            buckets.iter().any(|l| l.contains(r#"le="2.5""#) && l.ends_with(" 1")),
            "{buckets:?}"
        );
        assert_eq!(
            lines(&metrics, "colloquy_tool_call_retries_total"),
            [r#"colloquy_tool_call_retries_total{tool="lookup"} 1"#]
        );
    }

    #[test]
    fn refused_and_dropped_calls_are_counted_by_tool() {
        let metrics = Metrics::new();
        let mut tally = watching(&metrics);
        let refused = EventKind::ToolCallRefused {
            call_id: "c2".into(),
            name: "refund".into(),
            reason: RefusalReason::ConfirmationNeeded,
            duplicates: vec!["c1".into()],
        };
        tally.observe(&at(10, refused));
        let dropped = EventKind::ToolCallDropped {
            call_id: "c3".into(),
            name: "refund".into(),
            reason: "tool_choice is none".into(),
        };
        tally.observe(&at(20, dropped));
        assert_eq!(
            lines(&metrics, "colloquy_tool_calls_refused_total"),
            [r#"colloquy_tool_calls_refused_total{tool="refund",reason="confirmation_needed"} 1"#]
        );
        assert_eq!(
            lines(&metrics, "colloquy_tool_calls_dropped_total"),
            [r#"colloquy_tool_calls_dropped_total{tool="refund"} 1"#]
        );
    }

    #[test]
    fn llm_responses_errors_and_tokens_come_from_their_events() {
        let metrics = Metrics::new();
        let mut tally = watching(&metrics);
        let usage = Usage { prompt_tokens: 120, completion_tokens: 30, cached_prompt_tokens: 100 };
        let step = |finish_reason| EventKind::LlmStepEnded {
            speech_id: "s1".into(),
            finish_reason,
            usage: Some(usage),
        };
        tally.observe(&at(10, step(Some(FinishReason::ToolCalls))));
        tally.observe(&at(20, step(Some(FinishReason::Other("pause_turn".into())))));
        tally.observe(&at(30, step(None)));
        let failed = EventKind::Error {
            source: ErrorSource::Llm,
            message: "429".into(),
            llm_error: Some(LlmErrorKind::RateLimit),
        };
        tally.observe(&at(40, failed));
        tally.observe(&at(50, EventKind::error(ErrorSource::Sink, "the sink broke")));
        assert_eq!(
            lines(&metrics, "colloquy_llm_responses_total"),
            [
                r#"colloquy_llm_responses_total{finish_reason="none"} 1"#,
                r#"colloquy_llm_responses_total{finish_reason="other"} 1"#,
                r#"colloquy_llm_responses_total{finish_reason="tool_calls"} 1"#,
            ]
        );
        assert_eq!(
            lines(&metrics, "colloquy_llm_tokens_total"),
            [
                r#"colloquy_llm_tokens_total{kind="cached_prompt"} 300"#,
                r#"colloquy_llm_tokens_total{kind="completion"} 90"#,
                r#"colloquy_llm_tokens_total{kind="prompt"} 360"#,
            ]
        );
        assert_eq!(
            lines(&metrics, "colloquy_llm_errors_total"),
            [r#"colloquy_llm_errors_total{kind="rate_limit"} 1"#]
        );
        assert_eq!(
            lines(&metrics, "colloquy_errors_total"),
            [
                r#"colloquy_errors_total{source="llm"} 1"#,
                r#"colloquy_errors_total{source="sink"} 1"#,
            ]
        );
    }

    #[test]
    fn a_session_leaves_the_live_count_once_however_its_stream_ends() {
        let metrics = Metrics::new();
        let mut closed = watching(&metrics);
        closed.observe(&at(5, EventKind::SessionClosed { reason: "close".into() }));
        closed.finish();
        let mut overflowed = watching(&metrics);
        overflowed.observe(&at(5, EventKind::StreamOverflowed { unread: 10 }));
        overflowed.finish();
        watching(&metrics).finish();
        assert_eq!(lines(&metrics, "colloquy_sessions_live"), ["colloquy_sessions_live 0"]);
        assert_eq!(
            lines(&metrics, "colloquy_sessions_closed_total"),
            [
                r#"colloquy_sessions_closed_total{reason="_lost"} 1"#,
                r#"colloquy_sessions_closed_total{reason="close"} 1"#,
            ]
        );
        assert_eq!(
            lines(&metrics, "colloquy_watch_overflows_total"),
            ["colloquy_watch_overflows_total 1"]
        );
    }

    #[test]
    fn names_past_the_limit_share_one_label() {
        let metrics = Metrics::builder().max_tool_names(1).max_close_reasons(1).build();
        let mut tally = watching(&metrics);
        tally.observe(&started(0, "c1", "lookup"));
        tally.observe(&started(0, "c2", "call_4711"));
        tally
            .observe(&at(5, EventKind::SessionClosed { reason: "caller 555-0100 hung up".into() }));
        assert_eq!(
            lines(&metrics, "colloquy_tool_calls_started_total"),
            [
                r#"colloquy_tool_calls_started_total{tool="_other"} 1"#,
                r#"colloquy_tool_calls_started_total{tool="lookup"} 1"#,
            ]
        );
        // The runtime's own reasons are a closed set: named whatever the bound; a host's count
        // against it.
        let metrics2 = Metrics::builder().max_close_reasons(0).build();
        for reason in ["node_lost", "shift over"] {
            let mut other = watching(&metrics2);
            other.observe(&at(5, EventKind::SessionClosed { reason: reason.into() }));
        }
        assert_eq!(
            lines(&metrics2, "colloquy_sessions_closed_total"),
            [
                r#"colloquy_sessions_closed_total{reason="_other"} 1"#,
                r#"colloquy_sessions_closed_total{reason="node_lost"} 1"#
            ]
        );
    }
}
