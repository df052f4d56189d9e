//! `colloquy chat`: a conversation in the terminal with an agent whose tools run in the
//! background. One user turn a line; the next line is read once the reply to the previous
//! one has finished speaking, so piped input works as a script. Tool activity and errors
//! show as lines between the agent's streamed text; Ctrl-C interrupts the current reply.

pub mod commands;
pub mod llm;
pub mod terminal;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy::prelude::*;
use colloquy::toolsets::EndCallTool;
use colloquy::{ChatItem, McpToolset, SessionEvent};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::ChatArgs;
use crate::demo::{booking_tool, weather_tool};
use commands::{HELP, Line};
use terminal::{EventLines, Style, Terminal, TerminalSink};

/// How long closing waits for calls that cannot be cancelled.
pub const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Why the chat could not run.
#[derive(Debug)]
pub enum ChatError {
    /// A usage problem (no key, say): exit status 2.
    Usage(String),
    /// The session failed.
    Session(SessionError),
}

/// The chat's agent: a travel assistant with the demo's weather and booking tools (the
/// booking narrates its progress and can be cancelled) and end_call.
pub fn agent() -> Agent {
    Agent::new(
        "assistant",
        "You are a friendly travel assistant in a terminal chat. Use get_weather for forecasts \
         and book_flight to book; booking runs in the background and reports its progress, so \
         keep talking while it works. When the user says goodbye, say goodbye and call end_call.",
    )
    .tool(weather_tool(Duration::from_millis(300)))
    .tool(booking_tool(Duration::from_millis(1500)).cancellable())
    .toolset(EndCallTool::new().toolset())
}

/// How long a server given with `--mcp` has to start and list its tools.
const MCP_START: Duration = Duration::from_secs(10);

/// `agent` with the tools of each `--mcp` server (a command run over stdio, split into words
/// as a shell would, never run through one). A server that does not start or list its tools
/// in time is reported and left out; the chat goes on without it.
async fn with_mcp_servers(mut agent: Agent, commands: &[String], terminal: &Terminal) -> Agent {
    for (i, command) in commands.iter().enumerate() {
        let words = match shell_words::split(command) {
            Ok(words) if !words.is_empty() => words,
            _ => {
                terminal.line(Style::Error, &format!("mcp: cannot read the command `{command}`"));
                continue;
            }
        };
        let mut process = tokio::process::Command::new(&words[0]);
        process.args(&words[1..]);
        let connect = McpToolset::stdio(format!("mcp{}", i + 1), process).connect();
        match tokio::time::timeout(MCP_START, connect).await {
            Ok(Ok(server)) => {
                let toolset = server.toolset();
                let count = toolset.routed().len();
                terminal.line(Style::Dim, &format!("mcp: {count} tools from `{command}`"));
                agent = agent.toolset(toolset);
            }
            Ok(Err(e)) => terminal.line(Style::Error, &format!("mcp: {e}")),
            Err(_) => terminal.line(
                Style::Error,
                &format!("mcp: `{command}` listed no tools within {} s", MCP_START.as_secs()),
            ),
        }
    }
    agent
}

/// Runs the chat on `input` lines, writing to `out`, until `/quit`, the end of input, or the
/// agent ending the call.
pub async fn run(
    args: &ChatArgs,
    input: impl tokio::io::AsyncBufRead + Unpin + Send + 'static,
    out: Box<dyn Write + Send>,
    color: bool,
) -> Result<(), ChatError> {
    let (llm, about) = llm::choose(args).map_err(ChatError::Usage)?;
    let terminal = Terminal::new(out, color);
    terminal.line(
        Style::Dim,
        &format!("colloquy chat with {about}: /help for commands, /quit to leave"),
    );
    let agent = with_mcp_servers(agent(), &args.mcp, &terminal).await;
    let mut builder = Session::builder().llm(llm).speech_sink(TerminalSink(terminal.clone()));
    let events = builder.subscribe();
    let session = builder.start(agent.clone()).await.map_err(ChatError::Session)?;
    let seen: Arc<Mutex<Vec<SessionEvent>>> = Arc::default();
    let printer = tokio::spawn(print_events(events, terminal.clone(), Arc::clone(&seen)));
    let lines = read_lines(input);
    let result = converse(&session, &agent, lines, &terminal, &seen).await;
    if shutdown(&session, &terminal).await {
        // The event stream ends once the session has closed: every line is out after this.
        let _ = printer.await;
    }
    terminal.finish();
    result
}

async fn converse(
    session: &SessionHandle,
    agent: &Agent,
    mut lines: mpsc::Receiver<String>,
    terminal: &Terminal,
    seen: &Mutex<Vec<SessionEvent>>,
) -> Result<(), ChatError> {
    loop {
        let line = tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => {
                terminal.line(Style::Dim, "(nothing to interrupt: /quit to leave)");
                continue;
            }
            line = lines.recv() => line,
        };
        let Some(line) = line else { return Ok(()) };
        match commands::parse(&line) {
            Line::Nothing => {}
            Line::Quit => return Ok(()),
            Line::Say(text) => {
                if session.user_turn(text).await.is_err() || !reply_finished(session).await {
                    return Ok(()); // the agent ended the call
                }
            }
            command => run_command(session, agent, command, terminal, seen).await,
        }
        if !session.is_running() {
            return Ok(());
        }
    }
}

/// Waits until the reply has finished speaking; Ctrl-C interrupts it. False once the session
/// has closed.
async fn reply_finished(session: &SessionHandle) -> bool {
    loop {
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => { let _ = session.interrupt().await; }
            idle = session.wait_for_idle() => return idle.is_ok(),
        }
    }
}

async fn run_command(
    session: &SessionHandle,
    agent: &Agent,
    command: Line,
    terminal: &Terminal,
    seen: &Mutex<Vec<SessionEvent>>,
) {
    let text = match command {
        Line::Help => HELP.to_string(),
        Line::Invalid(why) => why,
        Line::Tools => tools(session, agent).await,
        Line::Cancel(id) => match session.cancel_tool_call(id.clone()).await {
            Ok(()) => format!("cancelling {id}"),
            Err(e) => format!("cannot cancel {id}: {e}"),
        },
        Line::Inspect => match session.inspect().await {
            Ok(snapshot) => serde_json::to_string_pretty(&snapshot).unwrap_or_default(),
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
        Line::Say(_) | Line::Nothing | Line::Quit => return,
    };
    terminal.line(Style::Dim, &text);
}

async fn tools(session: &SessionHandle, agent: &Agent) -> String {
    let mut lines = vec!["tools:".to_string()];
    for tool in agent.all_tools() {
        lines.push(format!("  {} — {}", tool.name(), tool.description().trim()));
    }
    match session.running_tool_calls().await {
        Ok(running) if running.is_empty() => lines.push("no call running".into()),
        Ok(running) => {
            lines.push("running:".into());
            for call in running {
                let cancel = if call.cancellable { " (cancellable)" } else { "" };
                lines.push(format!("  {} {} {}{cancel}", call.call_id, call.name, call.arguments));
            }
        }
        Err(e) => lines.push(format!("cannot list running calls: {e}")),
    }
    lines.join("\n")
}

fn history_line(item: &ChatItem) -> Option<String> {
    Some(match item {
        ChatItem::Message(m) => {
            let cut = if m.interrupted { " [interrupted]" } else { "" };
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "agent",
                Role::System | Role::Developer => "system",
            };
            format!("{role}: {}{cut}", m.text)
        }
        ChatItem::FunctionCall(c) => format!("call {} {}({})", c.call_id, c.name, c.arguments),
        ChatItem::FunctionCallOutput(o) => format!("output {}: {}", o.call_id, o.output),
        ChatItem::AgentHandoff(h) => format!("agent: {}", h.new_agent),
        _ => return None,
    })
}

/// Closes promptly: cancellable calls are cancelled, the others get [`CLOSE_WAIT`]. False
/// when some were left running (the program then exits without waiting for them).
async fn shutdown(session: &SessionHandle, terminal: &Terminal) -> bool {
    if session.is_running() {
        for call in session.running_tool_calls().await.unwrap_or_default() {
            if call.cancellable {
                let _ = session.cancel_tool_call(call.call_id).await;
            }
        }
    }
    if tokio::time::timeout(CLOSE_WAIT, session.close()).await.is_err() {
        terminal.line(Style::Dim, "(tools still running after 3 s were left behind)");
        return false;
    }
    true
}

/// Lines of `input`, read in a task so a slow reader never holds the chat.
fn read_lines(
    input: impl tokio::io::AsyncBufRead + Unpin + Send + 'static,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut lines = input.lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    rx
}

async fn print_events(
    mut events: colloquy::EventStream,
    terminal: Terminal,
    seen: Arc<Mutex<Vec<SessionEvent>>>,
) {
    let mut lines = EventLines::default();
    while let Some(event) = events.recv().await {
        if let Some((style, text)) = lines.line(&event.kind) {
            terminal.line(style, &text);
        }
        if let Ok(mut seen) = seen.lock() {
            seen.push(event);
        }
    }
}
