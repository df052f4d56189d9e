//! `colloquy chat`: a conversation in the terminal with an agent whose tools run in the
//! background. One user turn a line. Lines are read at all times, so nothing the agent, a
//! model or a tool does can keep `/quit` from being read: in a terminal every line acts at
//! once (a plain line interrupts the agent as speech would), typed in a line editor
//! (`editor.rs`); piped input is a script, echoed as `you › LINE`, each line sent once the
//! speech answering the previous one is done (deferred replies and background tools go on).
//! Once a script's `/quit` or its end is reached, the chat leaves when the reply in progress
//! is over, or has shown nothing for [`SCRIPT_QUIT_WAIT`]; lines it never sent are counted.
//! Ctrl-C interrupts the reply, twice within [`DOUBLE_CTRL_C`] quits; SIGTERM and SIGHUP quit.
//! Tool activity and errors show as lines between the agent's streamed text.

mod answers;
pub mod commands;
mod editor;
mod remote;
mod session;

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy::cluster::ClusterError;
use colloquy::events::{EventFilter, EventKind, SessionEvent};
use colloquy::prelude::*;
use colloquy::store::{SessionStore, SqliteStore};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::ChatArgs;
use crate::console::event_lines::{self, Calls, EventLines};
use crate::console::terminal::{self, Style, Terminal, TerminalSink};
use crate::console::{Signal, Signals, clean};
use crate::served::{McpServer, agent, llm, report_mcp_servers, with_mcp_servers};
use answers::run_command;
use commands::Line;
pub use editor::Restore;
use session::{ChatSession, Reply, Speeches, TurnRefused};

/// How long closing waits for calls that cannot be cancelled (and for the session's actors
/// to stop); past it the chat exits without them.
pub const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Two Ctrl-C within this window quit.
pub const DOUBLE_CTRL_C: Duration = Duration::from_secs(1);

/// Piped input: once `/quit` or the end of input is reached, how long the reply in progress
/// may go without showing anything before the chat closes anyway.
pub const SCRIPT_QUIT_WAIT: Duration = Duration::from_secs(10);

/// [`SCRIPT_QUIT_WAIT`] while the agent thinks: past the model's own 30 s wait for its first
/// token (`llm_timeout`), so a slow model reading a long prompt is waited for, and one that
/// never answers has ended the reply with an error by then.
pub const SCRIPT_THINKING_WAIT: Duration = Duration::from_secs(45);

/// How long a command (or a user turn) waits for the session to answer.
pub const COMMAND_WAIT: Duration = Duration::from_secs(5);

/// Why the chat could not run.
#[derive(Debug)]
pub enum ChatError {
    /// A usage problem (no key, say): exit status 2.
    Usage(String),
    /// The session failed.
    Session(SessionError),
    /// With `--nats`: the cluster could not be reached, or no node took the session.
    Cluster(ClusterError),
    /// With `--store`: the store could not be opened (exit status 1).
    Store(String),
    /// With `--nats`: the node that ran the session was lost, and the session with it (exit
    /// status 1, whatever ended the chat after that).
    Lost(ClusterError),
}

/// How the chat ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `/quit`, the end of input, Ctrl-C twice, or the agent ended the call: exit status 0.
    Left,
    /// SIGTERM or SIGHUP: the chat closed; exit status 128 + the signal's number, as a shell
    /// reports a process the signal ended.
    Signal(i32),
}

/// What the chat reads.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// A line.
    Line(String),
    /// Ctrl-C, read by the line editor (which keeps the terminal from sending SIGINT).
    Interrupt,
}

/// Where the chat reads and writes.
pub struct Console {
    /// The input; the channel closing is the end of input.
    pub input: mpsc::Receiver<Input>,
    /// Where everything is written.
    pub out: Box<dyn Write + Send>,
    /// ANSI colours.
    pub color: bool,
    /// The input is a terminal: every line acts at once. Otherwise the input is a script.
    pub interactive: bool,
    /// `out` is a line editor's printer, on a terminal this many columns wide.
    pub columns: Option<Arc<AtomicUsize>>,
}

/// The process's console: a line editor when standard input and output are both a terminal
/// (and what puts the terminal back once the chat is over), else lines read from standard
/// input and written to standard output.
pub fn console(color: bool) -> (Console, Option<Restore>) {
    let interactive = std::io::stdin().is_terminal();
    if interactive
        && std::io::stdout().is_terminal()
        && let Ok(editor) = editor::LineEditor::start()
    {
        let editor::LineEditor { input, out, columns, restore } = editor;
        return (Console { input, out, color, interactive, columns: Some(columns) }, Some(restore));
    }
    let input = read_lines(std::io::BufReader::new(std::io::stdin()));
    let out = Box::new(std::io::stdout());
    (Console { input, out, color, interactive, columns: None }, None)
}

/// The lines of `input`, read on a thread of their own: a read that blocks (a terminal no
/// one types in) never holds the chat, nor the runtime's shutdown. Bytes that are not UTF-8
/// are replaced, not a reason to stop reading.
pub fn read_lines(input: impl BufRead + Send + 'static) -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(16);
    let spawned = std::thread::Builder::new().name("colloquy-input".into()).spawn(move || {
        let mut input = input;
        let mut line = Vec::new();
        loop {
            line.clear();
            match input.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end_matches(['\n', '\r']).to_string();
                    if tx.blocking_send(Input::Line(text)).is_err() {
                        break;
                    }
                }
            }
        }
    });
    // Without a thread there is no input: the chat sees its end and closes.
    drop(spawned);
    rx
}

/// Runs the chat on `console` until `/quit`, the end of input, Ctrl-C twice, SIGTERM or
/// SIGHUP, or the agent ending the call; then closes the session, within [`CLOSE_WAIT`]. With
/// `--nats`, the session runs on a node of the cluster (`chat/remote.rs`).
pub async fn run(args: &ChatArgs, console: Console) -> Result<Ending, ChatError> {
    let place = match &args.nats {
        Some(url) => Err(remote::Placement::from_args(args, url).map_err(ChatError::Usage)?),
        None => Ok(llm::choose(args.provider, &args.agent).map_err(ChatError::Usage)?),
    };
    let Console { mut input, out, color, interactive, columns } = console;
    let terminal = match columns {
        Some(columns) => Terminal::above_prompt(out, color, columns),
        None => Terminal::new(out, color),
    };
    let mut signals = Signals::new().map_err(|e| ChatError::Usage(e.to_string()))?;
    let seen: Arc<Mutex<Vec<SessionEvent>>> = Arc::default();
    let (opened, llm) = match place {
        Ok((llm, about)) => {
            terminal.line(
                Style::Dim,
                &format!("colloquy chat with {about}: /help for commands, /quit to leave"),
            );
            let (agent, servers) = with_mcp_servers(
                agent(args.agent.instructions.as_deref(), &args.agent.require_approval),
                &args.agent.mcp,
                &terminal,
            );
            let stored = match &args.store {
                Some(path) => Some(Stored::open(path, args.resume.clone(), args.take_over)?),
                None => None,
            };
            let local = LocalModel { llm, settings: args.agent.clone(), stored };
            let opened = open_local(&local, agent, servers, &terminal, &seen).await?;
            report_mcp_servers(&opened.servers, &terminal);
            (opened, Some(local))
        }
        Err(placement) => {
            (placement.open(&terminal, &seen).await.map_err(ChatError::Cluster)?, None)
        }
    };
    let mut chat = Chat {
        opened,
        llm,
        terminal: &terminal,
        seen: &seen,
        interactive,
        reply: None,
        last_ctrl_c: None,
    };
    let ending = chat.converse(&mut input, &mut signals).await;
    let opened = chat.opened;
    if shutdown(&opened.session, &terminal, &mut signals, &mut input).await {
        // The event stream ends once the session has closed: every line is out after this.
        let _ = tokio::time::timeout(CLOSE_WAIT, opened.printer).await;
    }
    terminal.finish();
    match (ending, opened.session.lost()) {
        // The conversation did not end: it was cut off, and a script must hear of it.
        (Ending::Left, Some(lost)) => Err(ChatError::Lost(lost)),
        _ => Ok(ending),
    }
}

/// The session the chat talks to, and the task that shows its events.
struct Opened {
    session: ChatSession,
    /// The agent, for `/tools`, when it runs here.
    agent: Option<Agent>,
    servers: Vec<McpServer>,
    printer: tokio::task::JoinHandle<()>,
    /// The short ids of its calls.
    calls: Calls,
}

/// What starts a session in this process: the model and the agent's settings, and where
/// the session is kept (`--store`).
struct LocalModel {
    llm: Arc<dyn colloquy::llm::Llm>,
    settings: crate::AgentArgs,
    stored: Option<Stored>,
}

/// `--store FILE [--resume ID]`: the file, and the session to continue (the first one only:
/// `/new` starts a new one there).
struct Stored {
    path: std::path::PathBuf,
    store: Arc<SqliteStore>,
    resume: std::sync::Mutex<Option<String>>,
    /// `--take-over`: the resume takes the session from a process that still holds it.
    take_over: bool,
}

impl Stored {
    fn open(
        path: &std::path::Path,
        resume: Option<String>,
        take_over: bool,
    ) -> Result<Self, ChatError> {
        if resume.is_some() && !path.exists() {
            return Err(ChatError::Store(format!("no store at `{}`", path.display())));
        }
        let store = SqliteStore::open(path).map_err(|e| ChatError::Store(e.to_string()))?;
        let (path, store) = (path.to_owned(), Arc::new(store));
        Ok(Self { path, store, resume: resume.into(), take_over })
    }
}

/// Starts a session with `agent` in this process.
async fn open_local(
    local: &LocalModel,
    agent: Agent,
    servers: Vec<McpServer>,
    terminal: &Terminal,
    seen: &Arc<Mutex<Vec<SessionEvent>>>,
) -> Result<Opened, ChatError> {
    let mut builder = Session::builder().llm(Arc::clone(&local.llm));
    if let Some(stored) = &local.stored {
        builder = builder.store(Arc::clone(&stored.store) as Arc<dyn SessionStore>);
    }
    let mut builder = local.settings.configure(builder).speech_sink(TerminalSink(terminal.clone()));
    // Every event, the agent's text included: the sink shows the text, the text events say
    // the reply still makes progress.
    let events = builder.subscribe_to(EventFilter::ALL);
    let resume = local.stored.as_ref().and_then(|s| s.resume.lock().ok()?.take());
    let session = match resume {
        Some(id) => {
            let same = |name: &str| (name == agent.id()).then(|| agent.clone());
            let take_over = local.stored.as_ref().is_some_and(|s| s.take_over);
            builder.take_over(take_over).resume(&id, same).await.map_err(ChatError::Session)?
        }
        None => builder.start(agent.clone()).await.map_err(ChatError::Session)?,
    };
    if let Some(stored) = &local.stored {
        let (id, path) =
            (clean::line(session.id()), clean::line(&stored.path.display().to_string()));
        terminal.line(
            Style::Dim,
            &format!("session {id}, kept in {path}: --store {path} --resume {id} continues it"),
        );
    }
    let (speeches, watched) = watch::channel(Speeches::default());
    let calls = Calls::default();
    let lines = EventLines::new(calls.clone());
    let printer =
        tokio::spawn(print_events(events, terminal.clone(), Arc::clone(seen), lines, speeches));
    Ok(Opened {
        session: ChatSession::local(session, watched, local.stored.is_some()),
        agent: Some(agent),
        servers,
        printer,
        calls,
    })
}

/// What woke the chat.
enum Woke {
    Signal(Signal),
    /// The reply finished (true) or the session closed (false).
    Replied(bool),
    /// The session closed without the chat asking (its node drained).
    Ended,
    /// The session showed something: a script's quit wait starts over.
    Progress,
    /// Piped input's quit wait is over.
    Late,
    /// Input, or its end.
    Input(Option<Input>),
}

/// What to do after a line.
enum Flow {
    Go,
    Leave,
}

struct Chat<'a> {
    opened: Opened,
    /// The model, to start a new local session (`/new`).
    llm: Option<LocalModel>,
    terminal: &'a Terminal,
    seen: &'a Arc<Mutex<Vec<SessionEvent>>>,
    interactive: bool,
    /// Set while a reply is in progress.
    reply: Option<Reply>,
    last_ctrl_c: Option<Instant>,
}

impl Chat<'_> {
    /// Reads lines and signals until it is time to leave.
    async fn converse(
        &mut self,
        input: &mut mpsc::Receiver<Input>,
        signals: &mut Signals,
    ) -> Ending {
        // Piped input: lines waiting for the reply in progress.
        let mut queue: VecDeque<String> = VecDeque::new();
        let mut input_open = true;
        // Piped input, once its /quit or end is reached: when to leave without the reply.
        let mut leave_by: Option<Instant> = None;
        loop {
            while self.reply.is_none()
                && let Some(line) = queue.pop_front()
            {
                if let Flow::Leave = self.handle(&line).await {
                    self.not_sent(queue, input, "the chat ended before them");
                    return Ending::Left;
                }
            }
            let quit_next = queue.front().is_some_and(|line| commands::parse(line) == Line::Quit);
            if !self.interactive && (quit_next || (queue.is_empty() && !input_open)) {
                if self.reply.is_none() {
                    self.not_sent(queue, input, "the chat ended before them");
                    return Ending::Left;
                }
                leave_by.get_or_insert(Instant::now() + self.opened.session.quiet_bound());
            }
            if !self.opened.session.is_running() {
                self.not_sent(queue, input, "the session closed");
                return Ending::Left;
            }
            let mut progress = self.opened.session.progress();
            let reply = &mut self.reply;
            let session = &self.opened.session;
            let woke = tokio::select! {
                biased;
                signal = signals.recv() => Woke::Signal(signal),
                open = async {
                    match reply {
                        Some(reply) => reply.await,
                        None => std::future::pending().await,
                    }
                } => Woke::Replied(open),
                () = session.ended() => Woke::Ended,
                _ = progress.changed(), if leave_by.is_some() => Woke::Progress,
                () = sleep_until(leave_by) => Woke::Late,
                read = input.recv(), if input_open => Woke::Input(read),
            };
            match woke {
                Woke::Signal(Signal::Interrupt) | Woke::Input(Some(Input::Interrupt)) => {
                    if self.ctrl_c() {
                        self.not_sent(queue, input, "the chat was interrupted");
                        return Ending::Left;
                    }
                }
                Woke::Signal(Signal::Terminate) => {
                    self.not_sent(queue, input, "the chat was stopped");
                    return Ending::Signal(15);
                }
                Woke::Signal(Signal::Hangup) => {
                    self.not_sent(queue, input, "the chat was stopped");
                    return Ending::Signal(1);
                }
                Woke::Replied(open) => {
                    self.reply = None;
                    if !open {
                        self.not_sent(queue, input, "the session closed");
                        return Ending::Left; // the agent ended the call
                    }
                }
                Woke::Progress => {
                    leave_by = Some(Instant::now() + self.opened.session.quiet_bound());
                }
                Woke::Late => {
                    let wait = self.opened.session.quiet_bound().as_secs();
                    self.terminal.answer(
                        Style::Dim,
                        &format!("(the reply showed nothing for {wait} s: leaving without it)"),
                    );
                    self.not_sent(queue, input, "the chat ended before them");
                    return Ending::Left;
                }
                Woke::Ended => {
                    self.not_sent(queue, input, "the session closed");
                    return Ending::Left;
                }
                Woke::Input(None) => {
                    input_open = false;
                    if self.interactive {
                        return Ending::Left;
                    }
                }
                Woke::Input(Some(Input::Line(line))) if self.interactive => {
                    if let Flow::Leave = self.handle(&line).await {
                        return Ending::Left;
                    }
                }
                Woke::Input(Some(Input::Line(line))) => queue.push_back(line),
            }
        }
    }

    /// A script's lines that will not be sent, counted: those queued and those read already.
    fn not_sent(&self, queue: VecDeque<String>, input: &mut mpsc::Receiver<Input>, why: &str) {
        if self.interactive {
            return;
        }
        let mut lines: Vec<String> = queue.into_iter().collect();
        while let Ok(Input::Line(line)) = input.try_recv() {
            lines.push(line);
        }
        lines.retain(|line| commands::parse(line) != Line::Nothing);
        if let [first, ..] = lines.as_slice() {
            let n = lines.len();
            let (s, first) = (if n == 1 { "" } else { "s" }, clean::line(first));
            let first = if first.chars().count() > 40 {
                format!("{}…", first.chars().take(39).collect::<String>())
            } else {
                first
            };
            self.terminal
                .answer(Style::Dim, &format!("({n} line{s} not sent, from `{first}`: {why})"));
        }
    }

    /// Ctrl-C: interrupts the reply; true when it is the second within [`DOUBLE_CTRL_C`].
    fn ctrl_c(&mut self) -> bool {
        let now = Instant::now();
        if self.last_ctrl_c.is_some_and(|last| now.duration_since(last) <= DOUBLE_CTRL_C) {
            return true;
        }
        self.last_ctrl_c = Some(now);
        if self.reply.is_some() || self.opened.session.speaking() {
            // `interrupt` returns once the speech is done, which a blocking tool can delay:
            // it runs on its own so the chat goes on reading.
            let session = self.opened.session.clone();
            tokio::spawn(async move { session.interrupt().await });
        } else {
            self.terminal
                .answer(Style::Dim, "(nothing to interrupt: Ctrl-C again or /quit to leave)");
        }
        false
    }

    /// Acts on one line.
    async fn handle(&mut self, line: &str) -> Flow {
        let parsed = commands::parse(line);
        if !self.interactive && parsed != Line::Nothing {
            // A script's transcript shows what was said; a user turn's echo waits, like the
            // line itself, for the agent's open line to end.
            let echo = format!("you › {}", clean::line(line.trim()));
            match parsed {
                Line::Say(_) => self.terminal.line(Style::Dim, &echo),
                _ => self.terminal.answer(Style::Dim, &echo),
            }
        }
        match parsed {
            Line::Nothing => Flow::Go,
            Line::Quit => Flow::Leave,
            Line::Say(text) => {
                let queued = !self.interactive;
                let turn = self.opened.session.user_turn(text, queued, self.terminal);
                match tokio::time::timeout(COMMAND_WAIT, turn).await {
                    Ok(Ok(reply)) => {
                        self.reply = Some(reply);
                        Flow::Go
                    }
                    Ok(Err(TurnRefused::Closed)) => Flow::Leave, // the agent ended the call
                    Ok(Err(TurnRefused::Lost(why))) => {
                        self.terminal.answer(Style::Error, &format!("error ! {why}"));
                        Flow::Leave
                    }
                    Ok(Err(TurnRefused::Failed(why))) => {
                        self.terminal.answer(Style::Error, &format!("error ! {why}"));
                        Flow::Go
                    }
                    Err(_) => {
                        let wait = COMMAND_WAIT.as_secs();
                        self.terminal.answer(
                            Style::Error,
                            &format!("(the session did not take the line within {wait} s)"),
                        );
                        Flow::Go
                    }
                }
            }
            Line::New => {
                self.start_over().await;
                Flow::Go
            }
            command => {
                let opened = &self.opened;
                let run = run_command(opened, command, self.seen, self.terminal);
                let text = match tokio::time::timeout(COMMAND_WAIT, run).await {
                    Ok(text) => text,
                    Err(_) => {
                        format!("(the session did not answer within {} s)", COMMAND_WAIT.as_secs())
                    }
                };
                if !text.is_empty() {
                    self.terminal.answer(Style::Dim, &text);
                }
                Flow::Go
            }
        }
    }

    /// `/new`: closes the session (within [`CLOSE_WAIT`], as quitting does) and starts
    /// another with the same agent and model, its history empty.
    async fn start_over(&mut self) {
        let (Some(local), Some(agent)) = (self.llm.as_ref(), self.opened.agent.clone()) else {
            self.terminal.answer(
                Style::Dim,
                "(/new starts over in a local chat only: /quit, then `colloquy chat --nats` \
                 again for a new session on the cluster)",
            );
            return;
        };
        self.reply = None;
        let old = &self.opened.session;
        let closing = async {
            cancel_cancellable(old).await;
            old.close().await;
        };
        if tokio::time::timeout(CLOSE_WAIT, closing).await.is_ok() {
            let printer = &mut self.opened.printer;
            let _ = tokio::time::timeout(CLOSE_WAIT, printer).await;
        }
        self.terminal.finish();
        let servers = std::mem::take(&mut self.opened.servers);
        match open_local(local, agent, servers, self.terminal, self.seen).await {
            Ok(opened) => {
                let id = clean::line(opened.session.id());
                self.opened = opened;
                self.terminal
                    .answer(Style::Dim, &format!("── new session {id}: the history is empty ──"));
            }
            Err(e) => {
                let why = match e {
                    ChatError::Session(e) => e.to_string(),
                    ChatError::Usage(why) | ChatError::Store(why) => why,
                    ChatError::Cluster(e) | ChatError::Lost(e) => e.to_string(),
                };
                self.terminal.answer(Style::Error, &format!("error ! cannot start over: {why}"));
            }
        }
    }
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Cancels the calls running that can be cancelled.
async fn cancel_cancellable(session: &ChatSession) {
    if session.is_running() {
        for call in session.running_tool_calls().await.unwrap_or_default() {
            if call.cancellable {
                let _ = session.cancel_tool_call(call.call_id).await;
            }
        }
    }
}

/// Closes within [`CLOSE_WAIT`]: cancellable calls are cancelled, the others get what is
/// left of it; another Ctrl-C, SIGINT, SIGTERM or SIGHUP meanwhile stops waiting. False when
/// the session did not finish closing (the program then exits without it: its runtime's
/// shutdown drops what was left, MCP server processes included).
async fn shutdown(
    session: &ChatSession,
    terminal: &Terminal,
    signals: &mut Signals,
    input: &mut mpsc::Receiver<Input>,
) -> bool {
    let closing = async {
        cancel_cancellable(session).await;
        session.close().await;
    };
    let interrupted = async {
        while let Some(read) = input.recv().await {
            if read == Input::Interrupt {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    let closed = tokio::select! {
        biased;
        _ = signals.recv() => false,
        () = interrupted => false,
        closed = tokio::time::timeout(CLOSE_WAIT, closing) => closed.is_ok(),
    };
    if !closed {
        let wait = CLOSE_WAIT.as_secs();
        terminal.line(
            Style::Dim,
            &format!("(left without waiting longer than {wait} s for tools still running)"),
        );
    }
    closed
}

/// Shows a local session's events until it closes; its agent's text is the sink's to show.
async fn print_events(
    mut events: colloquy::events::EventStream,
    terminal: Terminal,
    seen: Arc<Mutex<Vec<SessionEvent>>>,
    mut lines: EventLines,
    speeches: watch::Sender<Speeches>,
) {
    while let Some(event) = events.recv().await {
        if let EventKind::AgentText { .. } = event.kind {
            speeches.send_modify(|s| s.note(&event.kind));
            continue;
        }
        show_event(event, &mut lines, &terminal, &seen, &speeches);
    }
    speeches.send_modify(Speeches::end);
}

/// An event's lines, the event kept for `/timeline`, and what it says of the speeches.
fn show_event(
    event: SessionEvent,
    lines: &mut EventLines,
    terminal: &Terminal,
    seen: &Mutex<Vec<SessionEvent>>,
    speeches: &watch::Sender<Speeches>,
) {
    for (style, text) in lines.lines(&event.kind) {
        terminal.line(style, &text);
    }
    speeches.send_modify(|s| s.note(&event.kind));
    if let Ok(mut seen) = seen.lock() {
        seen.push(event);
    }
}
