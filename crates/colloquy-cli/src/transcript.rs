//! A readable, optionally coloured transcript of session events.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use colloquy::chat::{ChatItem, Role};
use colloquy::events::{EventKind, SessionEvent};
use colloquy::toolsets::END_CALL;

const RESET: &str = "\x1b[0m";
const USER: &str = "\x1b[1;36m";
const AGENT: &str = "\x1b[1;32m";
const TOOL: &str = "\x1b[33m";
const ERROR: &str = "\x1b[1;31m";
const DIM: &str = "\x1b[2m";

/// Writes transcript lines for the events that matter to a reader.
pub struct Transcript<W: Write> {
    out: W,
    color: bool,
    /// Tool names by call id (from `tool_call_started`).
    names: BTreeMap<String, String>,
    /// Calls whose output is a progress update already shown.
    updated: BTreeSet<String>,
    /// Calls whose call line is written.
    shown: BTreeSet<String>,
    /// Update lines of calls whose call line is not written yet (a tool starts, and may
    /// report progress, before its call reaches the history): written after it.
    held: BTreeMap<String, Vec<String>>,
}

impl<W: Write> Transcript<W> {
    /// A transcript writing to `out`.
    pub fn new(out: W, color: bool) -> Self {
        Self {
            out,
            color,
            names: BTreeMap::new(),
            updated: BTreeSet::new(),
            shown: BTreeSet::new(),
            held: BTreeMap::new(),
        }
    }

    fn paint(&self, style: &'static str) -> (&'static str, &'static str) {
        if self.color { (style, RESET) } else { ("", "") }
    }

    /// A free-form heading line.
    pub fn heading(&mut self, text: &str) -> io::Result<()> {
        let (on, off) = self.paint(DIM);
        writeln!(self.out, "{on}{text}{off}")
    }

    /// Writes the line for one event, if it has one.
    pub fn event(&mut self, event: &SessionEvent) -> io::Result<()> {
        match &event.kind {
            EventKind::ConversationItemAdded { item } => self.item(item),
            EventKind::Error { source, message, .. } => {
                let (on, off) = self.paint(ERROR);
                let source = source.as_str();
                writeln!(self.out, "{on} error ! {source}: {message}{off}")
            }
            EventKind::ToolCallStarted { call_id, name } => {
                self.names.insert(call_id.clone(), name.clone());
                Ok(())
            }
            EventKind::ToolCallUpdated { id, call_id, message, .. } => {
                self.updated.insert(id.clone());
                let name = self.names.get(call_id).cloned().unwrap_or_default();
                let (on, off) = self.paint(TOOL);
                let line = format!("{on}  tool … {name}{off} {message}");
                match self.shown.contains(call_id) {
                    true => writeln!(self.out, "{line}"),
                    false => {
                        self.held.entry(call_id.clone()).or_default().push(line);
                        Ok(())
                    }
                }
            }
            // A call whose call line never came (it was dropped with its speech): its
            // updates still show.
            EventKind::ToolCallEnded { call_id, .. } => self.release(call_id),
            EventKind::SessionClosed { reason } => {
                let (on, off) = self.paint(DIM);
                writeln!(self.out, "{on}  ── session closed: {reason} ──{off}")
            }
            EventKind::ToolCallDropped { name, reason, .. } => {
                let (on, off) = self.paint(ERROR);
                writeln!(self.out, "{on}  tool x {name} dropped: {reason}{off}")
            }
            _ => Ok(()),
        }
    }

    /// Writes the update lines held for `call_id`.
    fn release(&mut self, call_id: &str) -> io::Result<()> {
        for line in self.held.remove(call_id).unwrap_or_default() {
            writeln!(self.out, "{line}")?;
        }
        Ok(())
    }

    /// `<id>_update_<n>` or `<id>_final` of a call this transcript saw start.
    fn is_synthetic(&self, call_id: &str) -> bool {
        self.names.keys().any(|id| {
            call_id.strip_prefix(id.as_str()).is_some_and(|rest| {
                rest == "_final"
                    || rest.strip_prefix("_update_").is_some_and(|n| n.parse::<u32>().is_ok())
            })
        })
    }

    fn item(&mut self, item: &ChatItem) -> io::Result<()> {
        match item {
            ChatItem::Message(m) => {
                let (label, style) = match m.role {
                    Role::User => ("user ", USER),
                    _ => ("agent", AGENT),
                };
                let (on, off) = self.paint(style);
                let cut = if m.interrupted { " [interrupted]" } else { "" };
                writeln!(self.out, "{on}{label} ›{off} {}{cut}", m.text)
            }
            // Synthetic pairs of background calls: their updates were shown as they came.
            ChatItem::FunctionCall(c) if self.is_synthetic(&c.call_id) => Ok(()),
            ChatItem::FunctionCall(c) => {
                let (on, off) = self.paint(TOOL);
                writeln!(self.out, "{on}  tool ▸ {}{off} {}", c.name, c.arguments)?;
                self.shown.insert(c.call_id.clone());
                self.release(&c.call_id)
            }
            ChatItem::FunctionCallOutput(o) if self.updated.contains(&o.call_id) => Ok(()),
            // Its output is an instruction to the model, not news for the reader.
            ChatItem::FunctionCallOutput(o) if o.name == END_CALL => {
                let (on, off) = self.paint(TOOL);
                writeln!(self.out, "{on}  tool ◂ {}{off} (the call ends after this reply)", o.name)
            }
            ChatItem::FunctionCallOutput(o) => {
                let (on, off) = self.paint(if o.is_error { ERROR } else { TOOL });
                let shown = if o.output.is_empty() { "(no output)" } else { &o.output };
                writeln!(self.out, "{on}  tool ◂ {}{off} {shown}", o.name)
            }
            ChatItem::AgentHandoff(h) => {
                let (on, off) = self.paint(DIM);
                writeln!(self.out, "{on}  ── agent: {} ──{off}", h.new_agent)
            }
            _ => Ok(()),
        }
    }
}
