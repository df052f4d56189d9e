//! The interactive chat's input: a line editor (rustyline) on a thread of its own, when both
//! standard input and output are a terminal. It reads the terminal raw, so a line has no
//! length limit (cooked mode cuts one at 4,095 bytes), can be edited and recalled from a
//! history; Ctrl-C reaches the chat as [`Input::Interrupt`] rather than as a signal. The chat's
//! output goes through the editor's printer, which writes it above the prompt and draws the
//! prompt again below, so the prompt is printed once and stays last.

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::termios::{SetArg, Termios, tcgetattr, tcsetattr};
use rustyline::error::ReadlineError;
use rustyline::{Config, DefaultEditor, ExternalPrinter};
use tokio::sync::mpsc;

use super::Input;

/// The prompt the line editor shows.
pub(crate) const PROMPT: &str = "you › ";

/// How long closing waits for the editor's thread to have printed the last lines.
const PRINTED_WAIT: Duration = Duration::from_millis(500);

/// A line editor on the terminal: its lines, the writer that prints above its prompt, the
/// terminal's width, and what restores the terminal at the end.
pub(crate) struct LineEditor {
    pub(crate) input: mpsc::Receiver<Input>,
    pub(crate) out: Box<dyn Write + Send>,
    /// The terminal's columns, as the editor last read them.
    pub(crate) columns: Arc<AtomicUsize>,
    pub(crate) restore: Restore,
}

type Printer = Arc<Mutex<Box<dyn ExternalPrinter + Send>>>;

impl LineEditor {
    /// Starts the editor, or says why it cannot run (not a terminal the editor knows).
    pub(crate) fn start() -> Result<Self, ReadlineError> {
        let saved = tcgetattr(io::stdin()).map_err(io::Error::from)?;
        let config = Config::builder().auto_add_history(true).max_history_size(1000)?.build();
        let mut editor = DefaultEditor::with_config(config)?;
        let printer: Printer = Arc::new(Mutex::new(Box::new(editor.create_external_printer()?)));
        let columns = Arc::new(AtomicUsize::new(80));
        let (tx, input) = mpsc::channel(16);
        let width = Arc::clone(&columns);
        std::thread::Builder::new().name("colloquy-editor".into()).spawn(move || {
            loop {
                if let Some((cols, _)) = editor.dimensions() {
                    width.store(usize::from(cols).max(20), Ordering::Relaxed);
                }
                let read = match editor.readline(PROMPT) {
                    Ok(line) => Input::Line(line),
                    Err(ReadlineError::Interrupted) => Input::Interrupt,
                    Err(_) => break, // Ctrl-D on an empty line, or the terminal is gone
                };
                if tx.blocking_send(read).is_err() {
                    break;
                }
            }
        })?;
        let out = Box::new(PrinterOut { printer: Arc::clone(&printer), pending: Vec::new() });
        Ok(Self { input, out, columns, restore: Restore { saved, printer } })
    }
}

/// Puts the terminal back as the chat found it.
pub struct Restore {
    saved: Termios,
    printer: Printer,
}

impl Restore {
    /// Waits (at most half a second) until the editor has printed what it was given, then
    /// restores the terminal's mode and clears the prompt's row: the editor's thread may
    /// still be waiting for a key, and the process ends without it.
    pub fn finish(self) {
        let printer = Arc::clone(&self.printer);
        let (done, printed) = std::sync::mpsc::channel();
        // The printer holds one message at most: once a second one is taken, every line sent
        // before it is on screen. A move up and a newline cancel out, whether the editor
        // prints it or (its thread gone) the printer writes it itself.
        let spawned =
            std::thread::Builder::new().name("colloquy-editor-flush".into()).spawn(move || {
                if let Ok(mut printer) = printer.lock() {
                    for _ in 0..2 {
                        let _ = printer.print("\x1b[A\n".into());
                    }
                }
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = printed.recv_timeout(PRINTED_WAIT);
        }
        let _ = tcsetattr(io::stdin(), SetArg::TCSANOW, &self.saved);
        let mut out = io::stdout();
        let _ = write!(out, "\r\x1b[J");
        let _ = out.flush();
    }
}

/// Writes through the editor's printer, whole lines at a time (the printer ends each message
/// with a newline).
struct PrinterOut {
    printer: Printer,
    pending: Vec<u8>,
}

impl Write for PrinterOut {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let Some(end) = self.pending.iter().rposition(|&b| b == b'\n') else { return Ok(()) };
        let lines: Vec<u8> = self.pending.drain(..=end).collect();
        let text = String::from_utf8_lossy(&lines).into_owned();
        let mut printer = self.printer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        printer.print(text).map_err(io::Error::other)
    }
}
