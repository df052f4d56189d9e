//! The chat's output: the agent's text as it streams (a [`SpeechSink`]) and a line for each
//! tool and error event, written to one shared writer. A line that comes while the agent's
//! text is still streaming waits for the end of that text, so it never splits a sentence.
//! Text from the model and tools passes through [`clean`] on its way, so no
//! control character reaches the terminal. Above a line editor's prompt, output is written a
//! whole row at a time (the editor draws its prompt again below each): the agent's open row is
//! written again in place as it grows, wrapped before the terminal's width. The lines for
//! events are `event_lines.rs`'s.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use unicode_width::UnicodeWidthStr;

use colloquy::speech::{Playout, SpeechSink};

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
    /// Output goes above a line editor's prompt, a whole row at a time: the terminal's width.
    columns: Option<Arc<AtomicUsize>>,
    /// Above a prompt: the open row of agent text, not yet ended.
    row: Row,
}

/// The open row of agent text above a line editor's prompt: written again, in place, as it
/// grows, and wrapped at a space before it reaches the terminal's width.
#[derive(Default)]
struct Row {
    /// It starts with the `agent ›` label.
    labelled: bool,
    text: String,
    /// It is on screen, as the last row written: the next write replaces it.
    shown: bool,
}

const LABEL: &str = "agent ›";

/// The shared output; cheap to clone.
#[derive(Clone)]
pub struct Terminal(Arc<Mutex<Screen>>);

impl Terminal {
    /// Output to `out`, coloured or not, as a stream of lines.
    pub fn new(out: Box<dyn Write + Send>, color: bool) -> Self {
        Self::with_columns(out, color, None)
    }

    /// Output through a line editor's printer (each write a whole row, above its prompt), on
    /// a terminal `columns` wide.
    pub(crate) fn above_prompt(
        out: Box<dyn Write + Send>,
        color: bool,
        columns: Arc<AtomicUsize>,
    ) -> Self {
        Self::with_columns(out, color, Some(columns))
    }

    fn with_columns(
        out: Box<dyn Write + Send>,
        color: bool,
        columns: Option<Arc<AtomicUsize>>,
    ) -> Self {
        Terminal(Arc::new(Mutex::new(Screen {
            out,
            color,
            mid_line: false,
            held: Vec::new(),
            broken: false,
            columns,
            row: Row::default(),
        })))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Screen) -> R) -> R {
        let mut screen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut screen)
    }

    /// A whole line in `style`, on a line of its own (after the agent's open line, if any).
    pub fn line(&self, style: Style, text: &str) {
        self.with(|s| match s.mid_line {
            true => s.held.push((style, text.to_string())),
            false => s.write_line(style, text),
        });
    }

    /// The answer to something the user typed: written at once, breaking the agent's open
    /// line if there is one (the user asked; the answer must not wait for the reply's end).
    pub fn answer(&self, style: Style, text: &str) {
        self.with(|s| {
            if std::mem::take(&mut s.mid_line) {
                s.break_row();
                s.broken = true;
            }
            s.write_line(style, text);
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
            if first || std::mem::take(&mut s.broken) {
                if std::mem::take(&mut s.mid_line) {
                    s.break_row();
                }
                match s.columns {
                    Some(_) => s.row = Row { labelled: true, ..Row::default() },
                    None => {
                        let (on, off) = s.paint(Style::Agent);
                        let _ = write!(s.out, "{on}{LABEL}{off} ");
                    }
                }
            }
            s.mid_line = true;
            match s.columns.clone() {
                Some(columns) => s.grow_row(&text, columns.load(Ordering::Relaxed)),
                None => {
                    let _ = write!(s.out, "{text}");
                    let _ = s.out.flush();
                }
            }
        });
    }

    /// Ends the open line of agent text, with a note if it was cut, then writes the lines
    /// that waited for it.
    pub(crate) fn end_agent_text(&self, note: Option<&str>) {
        self.with(|s| {
            if std::mem::take(&mut s.mid_line) {
                let (on, off) = s.paint(Style::Dim);
                let note = note.map(|note| format!(" {on}{note}{off}"));
                match (s.columns.is_some(), note) {
                    (false, note) => drop(writeln!(s.out, "{}", note.unwrap_or_default())),
                    (true, note) if s.row.shown || !s.row.text.is_empty() => {
                        s.end_row(note.as_deref().unwrap_or(""));
                    }
                    // The text ended its own row: the note has one of its own.
                    (true, Some(note)) => s.write_line(Style::Dim, note.trim_start()),
                    (true, None) => s.row = Row::default(),
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

    /// The agent's open line stops here (another line comes below it).
    fn break_row(&mut self) {
        match self.columns {
            Some(_) => self.row = Row::default(),
            None => drop(writeln!(self.out)),
        }
    }

    /// Above a prompt: adds `text` to the open row, writing each row it ends and the open
    /// one as it now is.
    fn grow_row(&mut self, text: &str, columns: usize) {
        // A row one column short of the width never wraps on its own.
        let room = columns.saturating_sub(1).max(10);
        for c in text.chars() {
            if c == '\n' {
                self.end_row("");
                continue;
            }
            self.row.text.push(c);
            let label = if self.row.labelled { LABEL.width() + 1 } else { 0 };
            if label + self.row.text.width() > room {
                let cut = self.row.text.trim_end().rfind(' ').filter(|&at| at > 0);
                let rest = match cut {
                    Some(at) => self.row.text.split_off(at + 1),
                    None => self.row.text.pop().map(String::from).unwrap_or_default(),
                };
                self.end_row("");
                self.row.text = rest;
            }
        }
        if !self.row.text.is_empty() {
            self.write_row("");
            self.row.shown = true;
        }
    }

    /// Writes the open row with `note` after it, and ends it.
    fn end_row(&mut self, note: &str) {
        self.write_row(note);
        self.row = Row::default();
    }

    fn write_row(&mut self, note: &str) {
        // The printer clears the prompt and writes below the last row: up one, to replace it.
        let replace = if self.row.shown { "\x1b[A\r\x1b[2K" } else { "" };
        let label = match self.row.labelled {
            true => {
                let (on, off) = self.paint(Style::Agent);
                format!("{on}{LABEL}{off} ")
            }
            false => String::new(),
        };
        let _ = writeln!(self.out, "{replace}{label}{}{note}", self.row.text);
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
