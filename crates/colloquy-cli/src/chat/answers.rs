//! What a slash command answers (`/tools`, `/cancel`, `/approve`, `/reject`, `/inspect`,
//! `/timeline`, `/history`), as the lines the chat shows; the commands themselves are parsed in
//! `commands.rs`.

use std::sync::Mutex;

use colloquy::chat::ChatItem;
use colloquy::events::SessionEvent;
use colloquy::prelude::*;

use super::Opened;
use super::clean;
use super::commands::{HELP, Line};
use super::event_lines::{self, Calls};
use super::session::ChatSession;
use super::terminal::{Style, Terminal};

/// A command's answer, as the lines to show.
pub(super) async fn run_command(
    opened: &Opened,
    command: Line,
    seen: &Mutex<Vec<SessionEvent>>,
    terminal: &Terminal,
) -> String {
    let session = &opened.session;
    match command {
        Line::Help => HELP.to_string(),
        Line::Invalid(why) => why,
        Line::Tools => tools(opened).await,
        Line::Cancel(typed) => {
            let act = |id| async move { session.cancel_tool_call(id).await };
            on_call(opened, &typed, ("cancelling", "cancel"), terminal, act).await
        }
        Line::Approve(typed) => {
            let act = |id| async move { session.approve(id).await };
            on_call(opened, &typed, ("approving", "approve"), terminal, act).await
        }
        Line::Reject { id: typed, reason } => {
            let act = |id| async move { session.reject(id, reason).await };
            on_call(opened, &typed, ("rejecting", "reject"), terminal, act).await
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
        Line::Say(_) | Line::Nothing | Line::Quit | Line::New => String::new(),
    }
}

/// Acts on the call a user named (`#3`, its id, or a unique prefix of it). A call the chat
/// saw start is acknowledged first, so the lines its events cause come after.
async fn on_call<F, Fut>(
    opened: &Opened,
    typed: &str,
    (doing, verb): (&str, &str),
    terminal: &Terminal,
    act: F,
) -> String
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let id = match opened.calls.resolve(typed) {
        Ok(id) => id,
        Err(why) => return format!("cannot {verb} {}: {why}", clean::line(typed)),
    };
    let shown = opened.calls.label(&id);
    let seen_running = opened.calls.is_running(&id);
    if seen_running {
        terminal.answer(Style::Dim, &format!("{doing} {shown}"));
    }
    match act(id).await {
        Ok(()) if seen_running => String::new(),
        Ok(()) => format!("{doing} {shown}"),
        Err(e) => format!("cannot {verb} {shown}: {}", clean::line(&e)),
    }
}

/// The agent's tools (the MCP servers' as listed now) and the calls running. A node's agent
/// is not listed: the session protocol has no command for its tools.
async fn tools(opened: &Opened) -> String {
    let Opened { session, agent, servers, calls, .. } = opened;
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
        return running_calls(session, calls, lines).await;
    };
    let learned: Vec<FunctionTool> =
        servers.iter().flat_map(|s| s.source.tools().iter().cloned().collect::<Vec<_>>()).collect();
    for tool in agent.all_tools().into_iter().chain(&learned) {
        let (name, about) = (clean::line(tool.name()), clean::line(tool.description().trim()));
        lines.push(format!("  {name} — {about}"));
    }
    running_calls(session, calls, lines).await
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
async fn running_calls(session: &ChatSession, calls: &Calls, mut lines: Vec<String>) -> String {
    match session.running_tool_calls().await {
        Ok(running) if running.is_empty() => lines.push("no call running".into()),
        Ok(running) => {
            lines.push("running:".into());
            for call in running {
                let cancel = if call.cancellable { " (cancellable)" } else { "" };
                let waits = if call.awaiting_approval { " (awaiting approval)" } else { "" };
                let (short, id) = (calls.label(&call.call_id), clean::line(&call.call_id));
                let (name, arguments) =
                    (clean::line(&call.name), event_lines::field(&call.arguments));
                lines.push(format!("  {short} {name} {arguments}{cancel}{waits} ({id})"));
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
