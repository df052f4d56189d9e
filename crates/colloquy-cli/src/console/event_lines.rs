//! The chat's tool and error lines: each event a session reports turned into what the
//! terminal shows ([`EventLines`]), with the short ids the chat gives tool calls (`#1`, `#2`, …
//! in the order they start, [`Calls`]) and takes in its commands. Every field from a model, a
//! tool or a server is cleaned ([`clean::line`]) and cut to one line (`field`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use colloquy::events::{EventKind, InDoubtOutcome, ResumedCall, ToolCallStatus};
use colloquy::llm::FinishReason;
use colloquy::toolsets::END_CALL;

use super::clean;
use super::terminal::Style;

/// The longest a tool's update or result is shown, in characters: a line stays one line.
const FIELD_MAX: usize = 100;

/// The chat's short ids for tool calls, `#1`, `#2`, … in the order they start, shared by the
/// event lines and the commands that take a call id; cheap to clone.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<CallBook>>);

#[derive(Default)]
struct CallBook {
    /// Provider call ids; `#n` is the n-th.
    ids: Vec<String>,
    /// Each call's short number and tool name.
    by_id: BTreeMap<String, (usize, String)>,
    /// The calls started and not ended.
    running: BTreeSet<String>,
}

impl Calls {
    fn with<R>(&self, f: impl FnOnce(&mut CallBook) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The call's short id (`#3`), given on first sight.
    fn short(&self, call_id: &str, name: Option<&str>) -> String {
        self.with(|book| {
            let count = book.ids.len();
            let entry =
                book.by_id.entry(call_id.to_string()).or_insert_with(|| (count + 1, String::new()));
            if let Some(name) = name {
                entry.1 = name.to_string();
            }
            let n = entry.0;
            if n > count {
                book.ids.push(call_id.to_string());
            }
            format!("#{n}")
        })
    }

    /// The tool a call runs, if known.
    fn name(&self, call_id: &str) -> Option<String> {
        self.with(|book| book.by_id.get(call_id).map(|(_, name)| name.clone()))
            .filter(|name| !name.is_empty())
    }

    fn started(&self, call_id: &str, running: bool) {
        self.with(|book| match running {
            true => book.running.insert(call_id.to_string()),
            false => book.running.remove(call_id),
        });
    }

    /// Whether the chat saw the call start and not end.
    pub fn is_running(&self, call_id: &str) -> bool {
        self.with(|book| book.running.contains(call_id))
    }

    /// The call id a user typed: `#3`, a provider id, or a unique prefix of one (a running
    /// call's first). Anything else is passed on as typed, for the session to answer.
    ///
    /// ```
    /// use colloquy_cli::console::event_lines::Calls;
    /// let calls = Calls::default();
    /// assert_eq!(calls.resolve("#1"), Err("no call #1 (the `started` lines give each its #)".into()));
    /// assert_eq!(calls.resolve("call_x"), Ok("call_x".into()));
    /// ```
    pub fn resolve(&self, typed: &str) -> Result<String, String> {
        self.with(|book| {
            if let Some(number) = typed.strip_prefix('#') {
                let n: usize =
                    number.parse().map_err(|_| format!("`{typed}` is not a call number"))?;
                return n
                    .checked_sub(1)
                    .and_then(|i| book.ids.get(i).cloned())
                    .ok_or_else(|| format!("no call #{n} (the `started` lines give each its #)"));
            }
            if book.by_id.contains_key(typed) {
                return Ok(typed.to_string());
            }
            let matching: Vec<&String> =
                book.ids.iter().filter(|id| id.starts_with(typed)).collect();
            let running: Vec<&String> =
                matching.iter().copied().filter(|id| book.running.contains(id.as_str())).collect();
            match (matching.as_slice(), running.as_slice()) {
                ([], _) => Ok(typed.to_string()),
                ([one], _) | (_, [one]) => Ok(one.to_string()),
                (many, _) => {
                    let shorts: Vec<String> =
                        many.iter().map(|id| format!("#{}", book.by_id[id.as_str()].0)).collect();
                    Err(format!(
                        "`{typed}` starts {} call ids: say which with {}",
                        many.len(),
                        shorts.join(", ")
                    ))
                }
            }
        })
    }

    /// How the chat names a call: `#3`, or its id if it never started.
    pub fn label(&self, call_id: &str) -> String {
        self.with(|book| book.by_id.get(call_id).map(|(n, _)| format!("#{n}")))
            .unwrap_or_else(|| clean::line(call_id))
    }
}

/// `text` made safe and cut to one line of at most [`FIELD_MAX`] characters.
pub(crate) fn field(text: &str) -> String {
    let text = clean::line(text);
    match text.char_indices().nth(FIELD_MAX - 1) {
        Some((at, _)) => format!("{}…", text[..at].trim_end()),
        None => text,
    }
}

/// What the user can do about an LLM error of `kind` (as events spell it), if anything.
fn error_hint(kind: &str) -> &'static str {
    match kind {
        // The history no longer fits the model's context: only a new session helps.
        "context_length" => " (/new starts over)",
        _ => "",
    }
}

/// A finish reason in words, with its name as events spell it.
fn cut_short(reason: &FinishReason) -> String {
    let words = match reason {
        FinishReason::Length => "it reached its output token limit",
        FinishReason::ContentFilter => "the provider's filter withheld content",
        _ => "it stopped early",
    };
    let code = match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(code)) => code,
        Ok(serde_json::Value::Object(other)) => {
            other.values().next().and_then(|v| v.as_str()).unwrap_or("other").to_string()
        }
        _ => "other".into(),
    };
    format!("  (the model's reply was cut short: {words} ({}))", clean::line(&code))
}

/// Turns events into the chat's tool and error lines; every field from a model, a tool or a
/// server is cleaned ([`clean::line`]).
#[derive(Default)]
pub struct EventLines {
    /// The calls' short ids.
    calls: Calls,
    /// Notes about a speech's text (it was cut short), shown once the speech is done, after
    /// the text they are about.
    after_speech: BTreeMap<String, Vec<(Style, String)>>,
}

impl EventLines {
    /// Lines that number calls in `calls`.
    pub fn new(calls: Calls) -> Self {
        Self { calls, after_speech: BTreeMap::new() }
    }

    /// The lines for an event (most have none).
    pub fn lines(&mut self, event: &EventKind) -> Vec<(Style, String)> {
        let calls = &self.calls;
        // A call's tool and short id, as its lines show them.
        let tool = |id: &str| {
            let short = calls.short(id, None);
            let name = calls.name(id).unwrap_or_else(|| id.to_string());
            format!("{} {short}", clean::line(&name))
        };
        let one = |style, text| vec![(style, text)];
        match event {
            EventKind::ToolCallStarted { call_id, name } => {
                calls.short(call_id, Some(name));
                calls.started(call_id, true);
                one(
                    Style::Tool,
                    format!("  tool ▸ {} started ({})", tool(call_id), clean::line(call_id)),
                )
            }
            EventKind::ToolApprovalRequested { call_id, name, arguments } => {
                let short = calls.short(call_id, Some(name));
                let arguments = field(arguments);
                one(
                    Style::Tool,
                    format!(
                        "  tool ? {} ({arguments}) waits for your approval: /approve {short} \
                         or /reject {short} REASON",
                        tool(call_id)
                    ),
                )
            }
            EventKind::ToolCallApproved { call_id } => {
                one(Style::Tool, format!("  tool ▸ {} approved", tool(call_id)))
            }
            EventKind::ToolCallUpdated { call_id, message, .. } => {
                one(Style::Tool, format!("  tool … {}: {}", tool(call_id), field(message)))
            }
            EventKind::ToolCallEnded { call_id, status, message, cached, .. } => {
                calls.started(call_id, false);
                let raw_name = calls.name(call_id);
                let tool = tool(call_id);
                let message = field(message.as_deref().unwrap_or(""));
                let short = calls.label(call_id);
                one(
                    match status {
                        ToolCallStatus::Error
                        | ToolCallStatus::TimedOut
                        | ToolCallStatus::Rejected => Style::Error,
                        _ => Style::Tool,
                    },
                    match status {
                        // Its output is an instruction to the model, not news for the user.
                        ToolCallStatus::Done if raw_name.as_deref() == Some(END_CALL) => {
                            format!("  tool ✓ {tool}: the call ends after this reply")
                        }
                        // An idempotent tool's earlier result: nothing ran again.
                        ToolCallStatus::Done if *cached => {
                            format!("  tool ✓ {tool} remembered, not run again: {message}")
                        }
                        ToolCallStatus::Done => format!("  tool ✓ {tool} done: {message}"),
                        ToolCallStatus::Error => format!("  tool ✗ {tool} failed: {message}"),
                        ToolCallStatus::Cancelled => format!("  tool ✗ {tool} cancelled"),
                        // The message names the tool and says who rejected it and why, or the
                        // bound it passed.
                        ToolCallStatus::Rejected | ToolCallStatus::TimedOut => {
                            format!("  tool ✗ {message} ({short})")
                        }
                        other => format!("  tool {tool} {}", other.as_str()),
                    },
                )
            }
            EventKind::ToolCallRefused { name, reason, duplicates, .. } => {
                let running: Vec<String> = duplicates.iter().map(|id| calls.label(id)).collect();
                let (name, running) = (clean::line(name), running.join(", "));
                let why = reason.as_str().replace('_', " ");
                one(
                    Style::Error,
                    format!("  tool ✗ {name} refused ({why}): {running} still running"),
                )
            }
            EventKind::ToolBudgetExhausted { limit } => one(
                Style::Error,
                format!(
                    "  (this turn made its {limit} tool calls: the agent answers without tools)"
                ),
            ),
            EventKind::ToolCallDropped { name, reason, .. } => {
                let (name, reason) = (clean::line(name), clean::line(reason));
                one(Style::Error, format!("  tool ✗ {name} dropped: {reason}"))
            }
            EventKind::Error { source, message, llm_error } => {
                let (source, message) = (source.as_str(), clean::line(message));
                let hint = match llm_error.map(serde_json::to_value) {
                    Some(Ok(serde_json::Value::String(kind))) => error_hint(&kind),
                    _ => "",
                };
                one(Style::Error, format!("error ! {source}: {message}{hint}"))
            }
            EventKind::LlmStepEnded { speech_id, finish_reason: Some(reason), .. }
                if reason.is_truncated() =>
            {
                let note = cut_short(reason);
                self.after_speech.entry(speech_id.clone()).or_default().push((Style::Error, note));
                vec![]
            }
            EventKind::SpeechDone { speech_id, .. } => {
                self.after_speech.remove(speech_id).unwrap_or_default()
            }
            // A resume marks itself as a handoff to the same agent: `resumed` says it.
            EventKind::AgentHandoff { old_agent: Some(old), new_agent } if old != new_agent => {
                one(Style::Dim, format!("  ── agent: {} ──", clean::line(new_agent)))
            }
            EventKind::SessionResumed { in_doubt } => {
                in_doubt_lines("  ── session resumed ──".to_owned(), in_doubt, "the restart")
            }
            EventKind::SessionMoved { from, to, calls_in_doubt } => {
                let (from, to) = (clean::line(from), clean::line(to));
                let head = format!("  ── moved from {from} to {to} ──");
                in_doubt_lines(head, calls_in_doubt, "the move")
            }
            EventKind::StoreError { message } => {
                one(Style::Error, format!("error ! store: {}", clean::line(message)))
            }
            EventKind::SessionClosed { reason } if reason == "suspended" => {
                let mut lines: Vec<_> =
                    std::mem::take(&mut self.after_speech).into_values().flatten().collect();
                lines.push((Style::Dim, "  ── session suspended: it can resume ──".to_owned()));
                lines
            }
            EventKind::SessionClosed { reason } => {
                let mut lines: Vec<_> =
                    std::mem::take(&mut self.after_speech).into_values().flatten().collect();
                lines
                    .push((Style::Dim, format!("  ── session closed: {} ──", clean::line(reason))));
                lines
            }
            _ => vec![],
        }
    }
}

/// A resume's line, then one for each call in doubt and what became of it (`cause`: what
/// interrupted it).
fn in_doubt_lines(head: String, in_doubt: &[ResumedCall], cause: &str) -> Vec<(Style, String)> {
    let mut lines = vec![(Style::Dim, head)];
    for call in in_doubt {
        let name = clean::line(&call.name);
        let (style, line) = match call.outcome {
            InDoubtOutcome::Rerun => {
                (Style::Dim, format!("  tool ~ {name} was interrupted by {cause}: it runs again"))
            }
            InDoubtOutcome::NotStarted => (
                Style::Dim,
                format!("  tool ~ {name} had not started: it goes on as it would have"),
            ),
            InDoubtOutcome::Asked => (
                Style::Dim,
                format!("  tool ? {name} was interrupted by {cause}: approve it to run it again"),
            ),
            _ => (
                Style::Error,
                format!(
                    "  tool x {name} was interrupted by {cause}: it may or may not have completed"
                ),
            ),
        };
        lines.push((style, line));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy::events::RefusalReason;

    fn lines(events: &[EventKind]) -> Vec<(Style, String)> {
        let mut lines = EventLines::default();
        events.iter().flat_map(|e| lines.lines(e)).collect()
    }

    #[test]
    fn the_edges_show_as_lines_that_say_what_happened() {
        let started = EventKind::ToolCallStarted { call_id: "c1".into(), name: "book".into() };
        let timed_out = EventKind::ToolCallEnded {
            id: "c1".into(),
            call_id: "c1".into(),
            status: ToolCallStatus::TimedOut,
            message: Some("Tool `book` timed out after 5 s".into()),
            cached: false,
        };
        let refused = EventKind::ToolCallRefused {
            call_id: "c2".into(),
            name: "book".into(),
            reason: RefusalReason::Rejected,
            duplicates: vec!["c1".into()],
        };
        let spent = EventKind::ToolBudgetExhausted { limit: 20 };
        let remembered = EventKind::ToolCallEnded {
            id: "c3".into(),
            call_id: "c3".into(),
            status: ToolCallStatus::Done,
            message: Some("CQ-1".into()),
            cached: true,
        };
        let again = EventKind::ToolCallStarted { call_id: "c3".into(), name: "book".into() };
        let shown: Vec<(Style, String)> =
            lines(&[started, timed_out, refused, spent, again, remembered]);
        assert_eq!(
            shown,
            [
                (Style::Tool, "  tool ▸ book #1 started (c1)".to_string()),
                (Style::Error, "  tool ✗ Tool `book` timed out after 5 s (#1)".into()),
                (Style::Error, "  tool ✗ book refused (rejected): #1 still running".into()),
                (
                    Style::Error,
                    "  (this turn made its 20 tool calls: the agent answers without tools)".into()
                ),
                (Style::Tool, "  tool ▸ book #2 started (c3)".into()),
                (Style::Tool, "  tool ✓ book #2 remembered, not run again: CQ-1".into()),
            ]
        );
    }

    #[test]
    fn calls_are_numbered_and_found_by_number_or_prefix() {
        let calls = Calls::default();
        let mut lines = EventLines::new(calls.clone());
        for id in ["call_ab1", "call_ab2", "call_cd3"] {
            lines.lines(&EventKind::ToolCallStarted { call_id: id.into(), name: "book".into() });
        }
        assert_eq!(calls.resolve("#2"), Ok("call_ab2".into()));
        assert_eq!(calls.resolve("call_c"), Ok("call_cd3".into()));
        assert_eq!(calls.resolve("call_ab2"), Ok("call_ab2".into()));
        assert_eq!(calls.resolve("unknown"), Ok("unknown".into()));
        let many = calls.resolve("call_ab").unwrap_err();
        assert!(many.contains("#1, #2"), "{many}");
        assert!(calls.resolve("#4").is_err() && calls.resolve("#x").is_err());
        // Once one of two has ended, a prefix names the one still running.
        lines
            .lines(&EventKind::ToolCallEnded {
                id: "call_ab1".into(),
                call_id: "call_ab1".into(),
                status: ToolCallStatus::Done,
                message: Some(format!("{{\"flights\": [{}]}}", "\"CQ-1\", ".repeat(40))),
                cached: false,
            })
            .into_iter()
            .for_each(|(_, line)| {
                assert!(line.starts_with("  tool ✓ book #1 done: {\"flights\""), "{line}");
                assert!(line.ends_with('…') && line.chars().count() < 130, "{line}");
            });
        assert_eq!(calls.resolve("call_ab"), Ok("call_ab2".into()));
    }

    #[test]
    fn a_cut_reply_says_why_in_words_and_a_full_context_suggests_new() {
        assert_eq!(
            cut_short(&FinishReason::Length),
            "  (the model's reply was cut short: it reached its output token limit (length))"
        );
        assert!(cut_short(&FinishReason::ContentFilter).ends_with("(content_filter))"));
        assert!(cut_short(&FinishReason::Other("max_time".into())).ends_with("(max_time))"));
        let error = |kind| EventKind::Error {
            source: colloquy::events::ErrorSource::Llm,
            message: "too long".into(),
            llm_error: Some(kind),
        };
        let http = lines(&[error(colloquy::llm::LlmErrorKind::Http)]);
        assert_eq!(http[0].1, "error ! llm: too long");
        assert_eq!(error_hint("context_length"), " (/new starts over)");
    }
}
