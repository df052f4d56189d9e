//! The chat's output: the agent's text as it streams (a [`SpeechSink`]) and a line for each
//! tool and error event, written to one shared writer. A line that comes while the agent's
//! text is still streaming waits for the end of that text, so it never splits a sentence.
//! Text from the model and tools passes through [`clean`] on its way, so no
//! control character reaches the terminal. In a terminal, a prompt (`you › `) is shown while
//! the chat waits for a line; any output starts below it and the prompt comes back after.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use colloquy::events::{EventKind, ToolCallStatus};
use colloquy::speech::{Playout, SpeechSink};
use colloquy::toolsets::END_CALL;

use super::clean;

const RESET: &str = "\x1b[0m";
const AGENT: &str = "\x1b[1;32m";
const TOOL: &str = "\x1b[33m";
const ERROR: &str = "\x1b[1;31m";
const DIM: &str = "\x1b[2m";

struct Screen {
    out: Box<dyn Write + Send>,
    color: bool,
    /// True while a line of agent text is open (no newline yet).
    mid_line: bool,
    /// Lines that came while it was open, written when it ends.
    held: Vec<(Style, String)>,
    /// An answer to a command broke the agent's open line: its text goes on, labelled
    /// again, on a line of its own.
    broken: bool,
    /// The prompt, in a terminal.
    prompt: Option<&'static str>,
    /// The chat waits for a line: the prompt is wanted (after any output too).
    want_prompt: bool,
    /// The prompt is on screen, the cursor after it.
    prompt_open: bool,
}

/// The prompt shown in a terminal while the chat waits for a line.
pub const PROMPT: &str = "you › ";

/// The shared output; cheap to clone.
#[derive(Clone)]
pub struct Terminal(Arc<Mutex<Screen>>);

impl Terminal {
    /// Output to `out`, coloured or not; with a prompt when `prompt` (input is a terminal).
    pub fn new(out: Box<dyn Write + Send>, color: bool, prompt: bool) -> Self {
        Terminal(Arc::new(Mutex::new(Screen {
            out,
            color,
            mid_line: false,
            held: Vec::new(),
            broken: false,
            prompt: prompt.then_some(PROMPT),
            want_prompt: false,
            prompt_open: false,
        })))
    }

    /// Whether the chat waits for a line (the prompt is shown) or not (the agent speaks).
    pub fn waiting(&self, waiting: bool) {
        self.with(|s| {
            s.want_prompt = waiting;
            s.show_prompt();
        });
    }

    /// The user entered a line: the terminal echoed its newline, the prompt is gone.
    pub fn entered(&self) {
        self.with(|s| s.prompt_open = false);
    }

    fn with<R>(&self, f: impl FnOnce(&mut Screen) -> R) -> R {
        let mut screen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut screen)
    }

    /// A whole line in `style`, on a line of its own (after the agent's open line, if any).
    pub fn line(&self, style: Style, text: &str) {
        self.with(|s| match s.mid_line {
            true => s.held.push((style, text.to_string())),
            false => {
                s.write_line(style, text);
                s.show_prompt();
            }
        });
    }

    /// The answer to something the user typed: written at once, breaking the agent's open
    /// line if there is one (the user asked; the answer must not wait for the reply's end).
    pub fn answer(&self, style: Style, text: &str) {
        self.with(|s| {
            if std::mem::take(&mut s.mid_line) {
                let _ = writeln!(s.out);
                s.broken = true;
            }
            s.write_line(style, text);
            s.show_prompt();
        });
    }

    /// Ends an agent line left open (a speech that never finished) and writes what waited.
    pub fn finish(&self) {
        self.end_agent_text(None);
    }

    /// A whole message of agent text, with a note if it was cut: a remote session's, which
    /// arrives committed rather than as it streams.
    pub(crate) fn agent_message(&self, text: &str, interrupted: bool) {
        self.agent_text(true, text);
        self.end_agent_text(interrupted.then_some("[interrupted]"));
    }

    /// Agent text as it arrives, cleaned; the first piece of a speech opens its line.
    pub(crate) fn agent_text(&self, first: bool, text: &str) {
        let text = clean::text(text);
        self.with(|s| {
            s.leave_prompt();
            if first || std::mem::take(&mut s.broken) {
                let (on, off) = s.paint(Style::Agent);
                if std::mem::take(&mut s.mid_line) {
                    let _ = writeln!(s.out);
                }
                let _ = write!(s.out, "{on}agent ›{off} ");
            }
            let _ = write!(s.out, "{text}");
            s.mid_line = true;
            let _ = s.out.flush();
        });
    }

    /// Ends the open line of agent text, with a note if it was cut, then writes the lines
    /// that waited for it.
    pub(crate) fn end_agent_text(&self, note: Option<&str>) {
        self.with(|s| {
            if std::mem::take(&mut s.mid_line) {
                let (on, off) = s.paint(Style::Dim);
                match note {
                    Some(note) => drop(writeln!(s.out, " {on}{note}{off}")),
                    None => drop(writeln!(s.out)),
                }
            } else if std::mem::take(&mut s.broken)
                && let Some(note) = note
            {
                let (on, off) = s.paint(Style::Dim);
                let _ = writeln!(s.out, "{on}{note}{off}");
            }
            s.broken = false;
            for (style, text) in std::mem::take(&mut s.held) {
                s.write_line(style, &text);
            }
            s.show_prompt();
            let _ = s.out.flush();
        });
    }
}

/// How a line looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Agent text.
    Agent,
    /// Tool activity.
    Tool,
    /// Errors.
    Error,
    /// Notes from the chat itself.
    Dim,
}

impl Screen {
    fn write_line(&mut self, style: Style, text: &str) {
        self.leave_prompt();
        let (on, off) = self.paint(style);
        let _ = writeln!(self.out, "{on}{text}{off}");
        let _ = self.out.flush();
    }

    /// Moves below an open prompt (what the user typed so far stays on its line, and in the
    /// terminal's line buffer).
    fn leave_prompt(&mut self) {
        if std::mem::take(&mut self.prompt_open) {
            let _ = writeln!(self.out);
        }
    }

    fn show_prompt(&mut self) {
        if let Some(prompt) = self.prompt
            && self.want_prompt
            && !self.prompt_open
            && !self.mid_line
        {
            let (on, off) = self.paint(Style::Dim);
            let _ = write!(self.out, "{on}{prompt}{off}");
            let _ = self.out.flush();
            self.prompt_open = true;
        }
    }

    fn paint(&self, style: Style) -> (&'static str, &'static str) {
        let code = match style {
            Style::Agent => AGENT,
            Style::Tool => TOOL,
            Style::Error => ERROR,
            Style::Dim => DIM,
        };
        if self.color { (code, RESET) } else { ("", "") }
    }
}

/// Plays speech by printing it as it streams; an interruption keeps what was printed.
pub struct TerminalSink(pub Terminal);

impl SpeechSink for TerminalSink {
    fn play(&self, mut playout: Playout) {
        let terminal = self.0.clone();
        tokio::spawn(async move {
            let stop = playout.interrupt_signal();
            let mut played = String::new();
            loop {
                let delta = tokio::select! {
                    biased;
                    () = stop.requested() => break,
                    delta = playout.next_text() => delta,
                };
                let Some(delta) = delta else { break };
                terminal.agent_text(played.is_empty(), &delta);
                played.push_str(&delta);
                playout.progress(played.chars().count());
            }
            if stop.is_requested() {
                terminal.end_agent_text(Some("[interrupted]"));
                playout.interrupted(played);
            } else {
                terminal.end_agent_text(None);
                playout.done();
            }
        });
    }
}

/// Turns events into the chat's tool and error lines; every field from a model, a tool or a
/// server is cleaned ([`clean::line`]).
#[derive(Default)]
pub struct EventLines {
    /// Tool names by call id.
    names: BTreeMap<String, String>,
    /// Notes about a speech's text (it was cut short), shown once the speech is done, after
    /// the text they are about.
    after_speech: BTreeMap<String, Vec<(Style, String)>>,
}

impl EventLines {
    /// The lines for an event (most have none).
    pub fn lines(&mut self, event: &EventKind) -> Vec<(Style, String)> {
        let name = |names: &BTreeMap<String, String>, id: &str| {
            clean::line(names.get(id).map_or(id, String::as_str))
        };
        let one = |style, text| vec![(style, text)];
        match event {
            EventKind::ToolCallStarted { call_id, name } => {
                self.names.insert(call_id.clone(), name.clone());
                let (name, call_id) = (clean::line(name), clean::line(call_id));
                one(Style::Tool, format!("  tool ▸ {name} started ({call_id})"))
            }
            EventKind::ToolApprovalRequested { call_id, name, arguments } => {
                let (name, id) = (clean::line(name), clean::line(call_id));
                let arguments = clean::line(arguments);
                one(
                    Style::Tool,
                    format!(
                        "  tool ? {name}({arguments}) waits for your approval: /approve {id} \
                         or /reject {id} REASON"
                    ),
                )
            }
            EventKind::ToolCallApproved { call_id } => {
                one(Style::Tool, format!("  tool ▸ {} approved", name(&self.names, call_id)))
            }
            EventKind::ToolCallUpdated { call_id, message, .. } => {
                let (tool, message) = (name(&self.names, call_id), clean::line(message));
                one(Style::Tool, format!("  tool … {tool}: {message}"))
            }
            EventKind::ToolCallEnded { call_id, status, message, .. } => {
                let raw_name = self.names.get(call_id).map(String::as_str);
                let tool = name(&self.names, call_id);
                let message = clean::line(message.as_deref().unwrap_or(""));
                one(
                    match status {
                        ToolCallStatus::Error
                        | ToolCallStatus::TimedOut
                        | ToolCallStatus::Rejected => Style::Error,
                        _ => Style::Tool,
                    },
                    match status {
                        // Its output is an instruction to the model, not news for the user.
                        ToolCallStatus::Done if raw_name == Some(END_CALL) => {
                            format!("  tool ✓ {tool}: the call ends after this reply")
                        }
                        ToolCallStatus::Done => format!("  tool ✓ {tool} done: {message}"),
                        ToolCallStatus::Error => format!("  tool ✗ {tool} failed: {message}"),
                        ToolCallStatus::Cancelled => format!("  tool ✗ {tool} cancelled"),
                        // The message says who rejected it and why.
                        ToolCallStatus::Rejected => format!("  tool ✗ {message}"),
                        // The message names the tool and the bound it passed.
                        ToolCallStatus::TimedOut => format!("  tool ✗ {message}"),
                        other => format!("  tool {tool} {}", other.as_str()),
                    },
                )
            }
            EventKind::ToolCallRefused { name, reason, duplicates, .. } => {
                let (name, running) = (clean::line(name), clean::line(&duplicates.join(", ")));
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
            EventKind::Error { source, message, .. } => {
                let (source, message) = (source.as_str(), clean::line(message));
                one(Style::Error, format!("error ! {source}: {message}"))
            }
            EventKind::LlmStepEnded { speech_id, finish_reason: Some(reason), .. }
                if reason.is_truncated() =>
            {
                let note = format!("  (the model's reply was cut short: {reason:?})");
                self.after_speech.entry(speech_id.clone()).or_default().push((Style::Error, note));
                vec![]
            }
            EventKind::SpeechDone { speech_id, .. } => {
                self.after_speech.remove(speech_id).unwrap_or_default()
            }
            EventKind::AgentHandoff { old_agent: Some(_), new_agent } => {
                one(Style::Dim, format!("  ── agent: {} ──", clean::line(new_agent)))
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
        let shown: Vec<(Style, String)> = lines(&[started, timed_out, refused, spent]);
        assert_eq!(
            shown[1..],
            [
                (Style::Error, "  tool ✗ Tool `book` timed out after 5 s".to_string()),
                (Style::Error, "  tool ✗ book refused (rejected): c1 still running".into()),
                (
                    Style::Error,
                    "  (this turn made its 20 tool calls: the agent answers without tools)".into()
                ),
            ]
        );
    }
}
