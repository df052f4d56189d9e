//! The chat's output: the agent's text as it streams (a [`SpeechSink`]) and a line for each
//! tool and error event, written to one shared writer. A line that comes while the agent's
//! text is still streaming waits for the end of that text, so it never splits a sentence.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use colloquy::{EventKind, Playout, SpeechSink, ToolCallStatus};

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
}

/// The shared output; cheap to clone.
#[derive(Clone)]
pub struct Terminal(Arc<Mutex<Screen>>);

impl Terminal {
    /// Output to `out`, coloured or not.
    pub fn new(out: Box<dyn Write + Send>, color: bool) -> Self {
        Terminal(Arc::new(Mutex::new(Screen { out, color, mid_line: false, held: Vec::new() })))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Screen) -> R) -> R {
        let mut screen = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut screen)
    }

    /// A whole line in `style`, on a line of its own (after the agent's open line, if any).
    pub fn line(&self, style: Style, text: &str) {
        self.with(|s| match s.mid_line {
            true => s.held.push((style, text.to_string())),
            false => s.write_line(style, text),
        });
    }

    /// Ends an agent line left open (a speech that never finished) and writes what waited.
    pub fn finish(&self) {
        self.end_agent_text(None);
    }

    /// Agent text as it arrives; the first piece of a speech opens its line.
    fn agent_text(&self, first: bool, text: &str) {
        self.with(|s| {
            if first {
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
    fn end_agent_text(&self, note: Option<&str>) {
        self.with(|s| {
            if std::mem::take(&mut s.mid_line) {
                let (on, off) = s.paint(Style::Dim);
                match note {
                    Some(note) => drop(writeln!(s.out, " {on}{note}{off}")),
                    None => drop(writeln!(s.out)),
                }
            }
            for (style, text) in std::mem::take(&mut s.held) {
                s.write_line(style, &text);
            }
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
        let (on, off) = self.paint(style);
        let _ = writeln!(self.out, "{on}{text}{off}");
        let _ = self.out.flush();
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
                    _ = stop.requested() => break,
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

/// Turns events into the chat's tool and error lines.
#[derive(Default)]
pub struct EventLines {
    /// Tool names by call id.
    names: BTreeMap<String, String>,
}

impl EventLines {
    /// The line for an event, if it has one.
    pub fn line(&mut self, event: &EventKind) -> Option<(Style, String)> {
        let name = |names: &BTreeMap<String, String>, id: &str| {
            names.get(id).cloned().unwrap_or_else(|| id.to_string())
        };
        match event {
            EventKind::ToolCallStarted { call_id, name } => {
                self.names.insert(call_id.clone(), name.clone());
                Some((Style::Tool, format!("  tool ▸ {name} started ({call_id})")))
            }
            EventKind::ToolCallUpdated { call_id, message, .. } => {
                Some((Style::Tool, format!("  tool … {}: {message}", name(&self.names, call_id))))
            }
            EventKind::ToolCallEnded { call_id, status, message, .. } => {
                let tool = name(&self.names, call_id);
                let message = message.as_deref().unwrap_or("");
                Some(match status {
                    ToolCallStatus::Done => {
                        (Style::Tool, format!("  tool ✓ {tool} done: {message}"))
                    }
                    ToolCallStatus::Error => {
                        (Style::Error, format!("  tool ✗ {tool} failed: {message}"))
                    }
                    ToolCallStatus::Cancelled => {
                        (Style::Tool, format!("  tool ✗ {tool} cancelled"))
                    }
                    other => (Style::Tool, format!("  tool {tool} {}", other.as_str())),
                })
            }
            EventKind::ToolCallDropped { name, reason, .. } => {
                Some((Style::Error, format!("  tool ✗ {name} dropped: {reason}")))
            }
            EventKind::Error { source, message, .. } => {
                let source = source.as_str();
                Some((Style::Error, format!("error ! {source}: {message}")))
            }
            EventKind::LlmStepEnded { finish_reason: Some(reason), .. }
                if reason.is_truncated() =>
            {
                Some((Style::Error, format!("  (the model's reply was cut short: {reason:?})")))
            }
            EventKind::AgentHandoff { old_agent: Some(_), new_agent } => {
                Some((Style::Dim, format!("  ── agent: {new_agent} ──")))
            }
            EventKind::SessionClosed { reason } => {
                Some((Style::Dim, format!("  ── session closed: {reason} ──")))
            }
            _ => None,
        }
    }
}
