//! `colloquy chat`: a conversation in the terminal with an agent whose tools run in the
//! background. One user turn a line. Lines are read at all times, so nothing the agent, a
//! model or a tool does can keep `/quit` from being read: in a terminal every line acts at
//! once (a plain line interrupts the agent as speech would); piped input is a script, each
//! line sent once the previous reply has finished, except that `/quit` and the end of input
//! end the chat within [`SCRIPT_QUIT_WAIT`] however long the reply takes. Ctrl-C interrupts
//! the reply, twice within [`DOUBLE_CTRL_C`] quits; SIGTERM and SIGHUP quit. Tool activity
//! and errors show as lines between the agent's streamed text.

pub mod clean;
pub mod commands;
pub mod llm;
mod remote;
mod session;
pub mod terminal;

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy::chat::ChatItem;
use colloquy::cluster::ClusterError;
use colloquy::events::SessionEvent;
use colloquy::mcp::McpToolset;
use colloquy::prelude::*;
use colloquy::tools::ToolSource;
use colloquy::toolsets::EndCallTool;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cluster::DEFAULT_AGENT;
use crate::demo::{booking_tool, weather_tool};
use crate::{ChatArgs, Provider, ServedAgentArgs};
use commands::{HELP, Line};
use session::{ChatSession, Reply, TurnRefused};
use terminal::{EventLines, Style, Terminal, TerminalSink};

/// How long closing waits for calls that cannot be cancelled (and for the session's actors
/// to stop); past it the chat exits without them.
pub const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Two Ctrl-C within this window quit.
pub const DOUBLE_CTRL_C: Duration = Duration::from_secs(1);

/// Piped input: how long `/quit` or the end of input waits for the reply in progress (and
/// the lines queued behind it) before the chat closes anyway.
pub const SCRIPT_QUIT_WAIT: Duration = Duration::from_secs(10);

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

/// Where the chat reads and writes.
pub struct Console {
    /// The input, a line at a time; the channel closing is the end of input.
    pub lines: mpsc::Receiver<String>,
    /// Where everything is written.
    pub out: Box<dyn Write + Send>,
    /// ANSI colours.
    pub color: bool,
    /// The input is a terminal: a prompt, and every line acts at once. Otherwise the input is
    /// a script.
    pub interactive: bool,
}

/// The lines of `input`, read on a thread of their own: a read that blocks (a terminal no
/// one types in) never holds the chat, nor the runtime's shutdown. Bytes that are not UTF-8
/// are replaced, not a reason to stop reading.
pub fn read_lines(input: impl BufRead + Send + 'static) -> mpsc::Receiver<String> {
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
                    if tx.blocking_send(text).is_err() {
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

/// The chat's agent: a travel assistant with the demo's weather and booking tools (the
/// booking narrates its progress and can be cancelled) and end_call; `instructions` replace
/// the travel assistant's. The tools `approval` names wait for `/approve` or `/reject`.
pub fn agent(instructions: Option<&str>, approval: &[String]) -> Agent {
    let travel = "You are a friendly travel assistant in a terminal chat. Use get_weather for \
                  forecasts and book_flight to book; booking runs in the background and \
                  reports its progress, so keep talking while it works. When the user says \
                  goodbye, say goodbye and call end_call.";
    let approved = |tool: FunctionTool| match approval.iter().any(|name| name == tool.name()) {
        true => tool.requires_approval(),
        false => tool,
    };
    Agent::new("assistant", instructions.unwrap_or(travel))
        .tool(approved(weather_tool(Duration::from_millis(300))))
        .tool(approved(booking_tool(Duration::from_millis(1500)).cancellable()))
        .toolset(EndCallTool::new().toolset())
}

/// An MCP server of `--mcp`: its command and its supervised tool source.
pub(crate) struct McpServer {
    command: String,
    source: Arc<dyn ToolSource>,
}

/// `agent` with a supervised toolset for each `--mcp` server (a command run over stdio, split
/// into words as a shell would, never run through one): started with the agent, restarted
/// with backoff when it dies, its tools refreshed when it says they changed. A command that
/// cannot be read is reported and left out.
pub(crate) fn with_mcp_servers(
    mut agent: Agent,
    commands: &[String],
    terminal: &Terminal,
) -> (Agent, Vec<McpServer>) {
    let mut servers = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        let words = match shell_words::split(command) {
            Ok(words) if !words.is_empty() => words,
            _ => {
                let command = clean::line(command);
                terminal.line(Style::Error, &format!("mcp: cannot read the command `{command}`"));
                continue;
            }
        };
        let mut process = tokio::process::Command::new(&words[0]);
        process.args(&words[1..]);
        // The user may stop any call with /cancel: a chat does not know the tools in advance.
        let toolset = McpToolset::stdio(format!("mcp{}", i + 1), process).cancellable_all().build();
        for (source, _, _) in toolset.routed_sources() {
            servers.push(McpServer { command: command.clone(), source: Arc::clone(source) });
        }
        agent = agent.toolset(toolset);
    }
    (agent, servers)
}

/// What `colloquy serve` and `colloquy node` serve: the chat's agent with its `--mcp` servers,
/// on the model `--provider` names (the scripted one by default), under each `--agent` name
/// (`demo` if none).
pub(crate) struct Served {
    pub(crate) llm: Arc<dyn Llm>,
    /// The model, as the banner names it.
    pub(crate) about: String,
    pub(crate) agent: Agent,
    pub(crate) servers: Vec<McpServer>,
    pub(crate) names: Vec<String>,
}

impl Served {
    /// The agent `args` describe; a model that cannot be set up is a usage error.
    pub(crate) fn new(args: &ServedAgentArgs, terminal: &Terminal) -> Result<Self, String> {
        let provider = args.provider.unwrap_or(Provider::Scripted);
        let (llm, about) = llm::choose(provider, &args.agent)?;
        let (agent, servers) = with_mcp_servers(
            self::agent(args.agent.instructions.as_deref(), &args.agent.require_approval),
            &args.agent.mcp,
            terminal,
        );
        let names = match args.agent_names.is_empty() {
            true => vec![DEFAULT_AGENT.to_owned()],
            false => args.agent_names.clone(),
        };
        Ok(Self { llm, about, agent, servers, names })
    }
}

/// Says, for each server, how many tools it listed or why it listed none, as soon as it
/// knows (each waits at most the server's start timeout).
pub(crate) fn report_mcp_servers(servers: &[McpServer], terminal: &Terminal) {
    for server in servers {
        let (source, terminal) = (Arc::clone(&server.source), terminal.clone());
        let command = clean::line(&server.command);
        tokio::spawn(async move {
            match source.ready().await {
                Ok(()) => {
                    let count = source.tools().len();
                    terminal.line(Style::Dim, &format!("mcp: {count} tools from `{command}`"));
                }
                Err(why) => terminal.line(Style::Error, &format!("mcp: {}", clean::line(&why))),
            }
        });
    }
}

/// Runs the chat on `console` until `/quit`, the end of input, Ctrl-C twice, SIGTERM or
/// SIGHUP, or the agent ending the call; then closes the session, within [`CLOSE_WAIT`]. With
/// `--nats`, the session runs on a node of the cluster (`chat/remote.rs`).
pub async fn run(args: &ChatArgs, console: Console) -> Result<Ending, ChatError> {
    let place = match &args.nats {
        Some(url) => Err(remote::Placement::from_args(args, url).map_err(ChatError::Usage)?),
        None => Ok(llm::choose(args.provider, &args.agent).map_err(ChatError::Usage)?),
    };
    let terminal = Terminal::new(console.out, console.color, console.interactive);
    let mut signals = Signals::new().map_err(|e| ChatError::Usage(e.to_string()))?;
    let seen: Arc<Mutex<Vec<SessionEvent>>> = Arc::default();
    let opened = match place {
        Ok((llm, about)) => open_local(args, llm, &about, &terminal, &seen).await?,
        Err(placement) => placement.open(&terminal, &seen).await.map_err(ChatError::Cluster)?,
    };
    let mut chat = Chat {
        session: &opened.session,
        agent: opened.agent.as_ref(),
        servers: &opened.servers,
        terminal: &terminal,
        seen: &seen,
        interactive: console.interactive,
        reply: None,
        last_ctrl_c: None,
    };
    let ending = chat.converse(console.lines, &mut signals).await;
    terminal.waiting(false);
    if shutdown(&opened.session, &terminal, &mut signals).await {
        // The event stream ends once the session has closed: every line is out after this.
        let _ = tokio::time::timeout(CLOSE_WAIT, opened.printer).await;
    }
    terminal.finish();
    Ok(ending)
}

/// The session the chat talks to, and the task that shows its events.
struct Opened {
    session: ChatSession,
    /// The agent, for `/tools`, when it runs here.
    agent: Option<Agent>,
    servers: Vec<McpServer>,
    printer: tokio::task::JoinHandle<()>,
}

/// Starts the session in this process, its agent with the `--mcp` servers' tools.
async fn open_local(
    args: &ChatArgs,
    llm: Arc<dyn colloquy::llm::Llm>,
    about: &str,
    terminal: &Terminal,
    seen: &Arc<Mutex<Vec<SessionEvent>>>,
) -> Result<Opened, ChatError> {
    terminal.line(
        Style::Dim,
        &format!("colloquy chat with {about}: /help for commands, /quit to leave"),
    );
    let (agent, servers) = with_mcp_servers(
        agent(args.agent.instructions.as_deref(), &args.agent.require_approval),
        &args.agent.mcp,
        terminal,
    );
    let mut builder = Session::builder().llm(llm).speech_sink(TerminalSink(terminal.clone()));
    let events = builder.subscribe();
    let session = builder.start(agent.clone()).await.map_err(ChatError::Session)?;
    report_mcp_servers(&servers, terminal);
    let printer = tokio::spawn(print_events(events, terminal.clone(), Arc::clone(seen)));
    Ok(Opened { session: ChatSession::Local(session), agent: Some(agent), servers, printer })
}

/// What woke the chat.
enum Woke {
    Signal(Signal),
    /// The reply finished (true) or the session closed (false).
    Replied(bool),
    /// The session closed without the chat asking (its node drained).
    Ended,
    /// Piped input's quit wait is over.
    Late,
    /// A line, or the end of input.
    Line(Option<String>),
}

/// What to do after a line.
enum Flow {
    Go,
    Leave,
}

struct Chat<'a> {
    session: &'a ChatSession,
    /// The agent, when it runs here.
    agent: Option<&'a Agent>,
    servers: &'a [McpServer],
    terminal: &'a Terminal,
    seen: &'a Mutex<Vec<SessionEvent>>,
    interactive: bool,
    /// Set while a reply is in progress.
    reply: Option<Reply>,
    last_ctrl_c: Option<Instant>,
}

impl Chat<'_> {
    /// Reads lines and signals until it is time to leave.
    async fn converse(
        &mut self,
        mut lines: mpsc::Receiver<String>,
        signals: &mut Signals,
    ) -> Ending {
        // Piped input: lines waiting for the reply in progress; and when to leave anyway.
        let mut queue: VecDeque<String> = VecDeque::new();
        let mut leave_by: Option<Instant> = None;
        let mut input_open = true;
        loop {
            while self.reply.is_none()
                && let Some(line) = queue.pop_front()
            {
                if let Flow::Leave = self.handle(&line).await {
                    return Ending::Left;
                }
            }
            if !self.session.is_running() {
                return Ending::Left;
            }
            self.terminal.waiting(self.reply.is_none());
            let reply = &mut self.reply;
            let woke = tokio::select! {
                biased;
                signal = signals.recv() => Woke::Signal(signal),
                open = async {
                    match reply {
                        Some(reply) => reply.await,
                        None => std::future::pending().await,
                    }
                } => Woke::Replied(open),
                () = self.session.ended() => Woke::Ended,
                () = sleep_until(leave_by) => Woke::Late,
                line = lines.recv(), if input_open => Woke::Line(line),
            };
            match woke {
                Woke::Signal(Signal::Interrupt) if self.ctrl_c() => return Ending::Left,
                Woke::Signal(Signal::Interrupt) => {}
                Woke::Signal(Signal::Terminate) => return Ending::Signal(15),
                Woke::Signal(Signal::Hangup) => return Ending::Signal(1),
                Woke::Replied(open) => {
                    self.reply = None;
                    if !open {
                        return Ending::Left; // the agent ended the call
                    }
                }
                Woke::Late | Woke::Ended => return Ending::Left,
                Woke::Line(line) => {
                    self.terminal.entered();
                    let script = !self.interactive && (self.reply.is_some() || !queue.is_empty());
                    match line {
                        None if script => {
                            input_open = false;
                            queue.push_back("/quit".into());
                            leave_by.get_or_insert(Instant::now() + SCRIPT_QUIT_WAIT);
                        }
                        None => return Ending::Left,
                        Some(line) if script => {
                            if commands::parse(&line) == Line::Quit {
                                leave_by.get_or_insert(Instant::now() + SCRIPT_QUIT_WAIT);
                            }
                            queue.push_back(line);
                        }
                        Some(line) => {
                            if let Flow::Leave = self.handle(&line).await {
                                return Ending::Left;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Ctrl-C: interrupts the reply; true when it is the second within [`DOUBLE_CTRL_C`].
    fn ctrl_c(&mut self) -> bool {
        let now = Instant::now();
        if self.last_ctrl_c.is_some_and(|last| now.duration_since(last) <= DOUBLE_CTRL_C) {
            return true;
        }
        self.last_ctrl_c = Some(now);
        if self.reply.is_some() {
            // `interrupt` returns once the speech is done, which a blocking tool can delay:
            // it runs on its own so the chat goes on reading.
            let session = self.session.clone();
            tokio::spawn(async move { session.interrupt().await });
        } else {
            self.terminal
                .answer(Style::Dim, "(nothing to interrupt: Ctrl-C again or /quit to leave)");
        }
        false
    }

    /// Acts on one line.
    async fn handle(&mut self, line: &str) -> Flow {
        match commands::parse(line) {
            Line::Nothing => Flow::Go,
            Line::Quit => Flow::Leave,
            Line::Say(text) => {
                let turn = tokio::time::timeout(COMMAND_WAIT, self.session.user_turn(text)).await;
                match turn {
                    Ok(Ok(())) => {
                        self.reply = Some(self.session.reply(self.terminal));
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
            command => {
                let run = run_command(self.session, self.agent, self.servers, command, self.seen);
                let text = match tokio::time::timeout(COMMAND_WAIT, run).await {
                    Ok(text) => text,
                    Err(_) => {
                        format!("(the session did not answer within {} s)", COMMAND_WAIT.as_secs())
                    }
                };
                self.terminal.answer(Style::Dim, &text);
                Flow::Go
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

/// The signals the chat (and a node) answers.
pub(crate) enum Signal {
    Interrupt,
    Terminate,
    Hangup,
}

/// SIGINT, SIGTERM and SIGHUP, as a stream. Once listened for, a signal no longer ends the
/// process by itself: the chat closes its session first.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            biased;
            Some(()) = self.terminate.recv() => Signal::Terminate,
            Some(()) = self.hangup.recv() => Signal::Hangup,
            Some(()) = self.interrupt.recv() => Signal::Interrupt,
            else => std::future::pending().await,
        }
    }
}

/// A command's answer, as the lines to show.
async fn run_command(
    session: &ChatSession,
    agent: Option<&Agent>,
    servers: &[McpServer],
    command: Line,
    seen: &Mutex<Vec<SessionEvent>>,
) -> String {
    match command {
        Line::Help => HELP.to_string(),
        Line::Invalid(why) => why,
        Line::Tools => tools(session, agent, servers).await,
        Line::Cancel(id) => {
            let shown = clean::line(&id);
            match session.cancel_tool_call(id).await {
                Ok(()) => format!("cancelling {shown}"),
                Err(e) => format!("cannot cancel {shown}: {}", clean::line(&e)),
            }
        }
        Line::Approve(id) => {
            let shown = clean::line(&id);
            match session.approve(id).await {
                Ok(()) => format!("approved {shown}"),
                Err(e) => format!("cannot approve {shown}: {}", clean::line(&e)),
            }
        }
        Line::Reject { id, reason } => {
            let shown = clean::line(&id);
            match session.reject(id, reason).await {
                Ok(()) => format!("rejected {shown}"),
                Err(e) => format!("cannot reject {shown}: {}", clean::line(&e)),
            }
        }
        Line::Inspect { json } => match session.inspect().await {
            Ok(snapshot) if json => serde_json::to_string_pretty(&snapshot)
                .unwrap_or_else(|e| format!("cannot write the snapshot as JSON: {e}")),
            // The runtime draws the tree; names from tools and agents are made safe to print.
            Ok(snapshot) => clean::text(snapshot.to_string().trim_end()),
            Err(e) => format!("cannot inspect: {e}"),
        },
        Line::Timeline(file) => {
            let events = seen.lock().map(|e| e.clone()).unwrap_or_default();
            let page = colloquy::timeline::render_html(&events, "colloquy chat");
            match std::fs::write(&file, page) {
                Ok(()) => format!("timeline written to {file}"),
                Err(e) => format!("cannot write {file}: {e}"),
            }
        }
        Line::History => match session.history().await {
            Ok(items) => items.iter().filter_map(history_line).collect::<Vec<_>>().join("\n"),
            Err(e) => format!("cannot read the history: {e}"),
        },
        Line::Say(_) | Line::Nothing | Line::Quit => String::new(),
    }
}

/// The agent's tools (the MCP servers' as listed now) and the calls running. A node's agent
/// is not listed: the session protocol has no command for its tools.
async fn tools(session: &ChatSession, agent: Option<&Agent>, servers: &[McpServer]) -> String {
    let mut lines = vec!["tools:".to_string()];
    let Some(agent) = agent else {
        // A node's agent is not in this process: its tools are the ones its toolsets route, as
        // the session's snapshot lists them (names only: descriptions do not travel).
        match session.inspect().await {
            Ok(snapshot) => {
                lines[0] = "tools (on the node):".into();
                let mut names = Vec::new();
                routed_tools(&snapshot.tree, &mut names);
                lines.extend(names.iter().map(|name| format!("  {}", clean::line(name))));
            }
            Err(e) => lines[0] = format!("tools: not listed ({})", clean::line(&e)),
        }
        return running_calls(session, lines).await;
    };
    let learned: Vec<FunctionTool> =
        servers.iter().flat_map(|s| s.source.tools().iter().cloned().collect::<Vec<_>>()).collect();
    for tool in agent.all_tools().into_iter().chain(&learned) {
        let (name, about) = (clean::line(tool.name()), clean::line(tool.description().trim()));
        lines.push(format!("  {name} — {about}"));
    }
    running_calls(session, lines).await
}

/// Every tool name the toolsets under `node` route, once each, in tree order.
fn routed_tools(node: &ActorNode, names: &mut Vec<String>) {
    for name in node.tools.iter().flatten() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    for child in &node.children {
        routed_tools(child, names);
    }
}

/// `lines`, then the calls running now.
async fn running_calls(session: &ChatSession, mut lines: Vec<String>) -> String {
    match session.running_tool_calls().await {
        Ok(running) if running.is_empty() => lines.push("no call running".into()),
        Ok(running) => {
            lines.push("running:".into());
            for call in running {
                let cancel = if call.cancellable { " (cancellable)" } else { "" };
                let waits = if call.awaiting_approval { " (awaiting approval)" } else { "" };
                let (id, name) = (clean::line(&call.call_id), clean::line(&call.name));
                let arguments = clean::line(&call.arguments);
                lines.push(format!("  {id} {name} {arguments}{cancel}{waits}"));
            }
        }
        Err(e) => lines.push(format!("cannot list running calls: {e}")),
    }
    lines.join("\n")
}

/// One history item on one line, cleaned.
fn history_line(item: &ChatItem) -> Option<String> {
    Some(match item {
        ChatItem::Message(m) => {
            let cut = if m.interrupted { " [interrupted]" } else { "" };
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "agent",
                Role::System | Role::Developer => "system",
            };
            format!("{role}: {}{cut}", clean::line(&m.text))
        }
        ChatItem::FunctionCall(c) => {
            let (id, name) = (clean::line(&c.call_id), clean::line(&c.name));
            format!("call {id} {name}({})", clean::line(&c.arguments))
        }
        ChatItem::FunctionCallOutput(o) => {
            format!("output {}: {}", clean::line(&o.call_id), clean::line(&o.output))
        }
        ChatItem::AgentHandoff(h) => format!("agent: {}", clean::line(&h.new_agent)),
        _ => return None,
    })
}

/// Closes within [`CLOSE_WAIT`]: cancellable calls are cancelled, the others get what is
/// left of it; another SIGINT, SIGTERM or SIGHUP meanwhile stops waiting. False when the
/// session did not finish closing (the program then exits without it: its runtime's shutdown
/// drops what was left, MCP server processes included).
async fn shutdown(session: &ChatSession, terminal: &Terminal, signals: &mut Signals) -> bool {
    let closing = async {
        if session.is_running() {
            for call in session.running_tool_calls().await.unwrap_or_default() {
                if call.cancellable {
                    let _ = session.cancel_tool_call(call.call_id).await;
                }
            }
        }
        session.close().await;
    };
    let closed = tokio::select! {
        biased;
        _ = signals.recv() => false,
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

async fn print_events(
    mut events: colloquy::events::EventStream,
    terminal: Terminal,
    seen: Arc<Mutex<Vec<SessionEvent>>>,
) {
    let mut lines = EventLines::default();
    while let Some(event) = events.recv().await {
        show_event(event, &mut lines, &terminal, &seen);
    }
}

/// An event's lines, and the event kept for `/timeline`.
fn show_event(
    event: SessionEvent,
    lines: &mut EventLines,
    terminal: &Terminal,
    seen: &Mutex<Vec<SessionEvent>>,
) {
    for (style, text) in lines.lines(&event.kind) {
        terminal.line(style, &text);
    }
    if let Ok(mut seen) = seen.lock() {
        seen.push(event);
    }
}
