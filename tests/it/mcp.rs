//! MCP toolsets against a real server nobody here wrote: the MCP project's reference server
//! `@modelcontextprotocol/server-everything` (a pinned version from the npm registry, installed
//! under `target/mcp/` on first use). Real child processes: the real clock, bounded waits.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use colloquy::prelude::*;
use colloquy::{DuplicateScope, McpToolset, OnDuplicate, ReplyStatus, ToolCallStatus};
use tokio::process::Command;

use crate::common::*;

#[path = "../../examples/mcp.rs"]
#[allow(dead_code)] // its main is for `cargo run --example mcp`
mod example;

/// `target/mcp/`, with the servers `scripts/mcp-test-servers.sh` installs there (pinned,
/// once); a test that cannot get them fails saying so.
fn servers() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let status = std::process::Command::new("bash")
            .arg(root.join("scripts/mcp-test-servers.sh"))
            .status()
            .unwrap_or_else(|e| panic!("cannot run scripts/mcp-test-servers.sh: {e}"));
        assert!(status.success(), "scripts/mcp-test-servers.sh could not install the MCP servers");
        root.join("target/mcp")
    })
}

/// The MCP project's reference server, over stdio.
fn everything() -> PathBuf {
    servers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// The command that runs the reference server over stdio.
fn everything_command() -> Command {
    let mut node = Command::new("node");
    node.arg(everything()).arg("stdio");
    node
}

/// The tests' own server on the official Python SDK (`tests/it/mcp_server.py`).
fn python(args: &[&str]) -> Command {
    let mut python = Command::new(servers().join("venv/bin/python"));
    python.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_server.py"));
    python.args(args);
    python
}

fn server() -> McpToolset {
    let node = everything_command();
    McpToolset::stdio("everything", node).cancellable(["trigger-long-running-operation"])
}

/// Waits (bounded) until `f` holds for the events so far.
async fn until(h: &mut Harness, what: &str, f: impl Fn(&[SessionEvent]) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f(h.events()) {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ended(events: &[SessionEvent], id: &str) -> Option<ToolCallStatus> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::ToolCallEnded { call_id, status, .. } if call_id == id => Some(*status),
        _ => None,
    })
}

#[tokio::test]
async fn a_server_tool_is_called_and_its_result_is_the_output() {
    let server = tokio::time::timeout(Duration::from_secs(30), server().connect())
        .await
        .expect("the server answers within 30 s")
        .expect("the server starts and lists its tools");
    let agent = agent().toolset(server.toolset());
    let script = vec![call("c1", "get-sum", r#"{"a": 2, "b": 40}"#), text("It is 42.")];
    let mut h = Harness::start(agent, script).await;
    h.turn("what is 2 + 40?").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Done));
    let hist = h.hist().await;
    assert!(hist.iter().any(|i| i.starts_with("out(#c1,") && i.contains("42")), "{hist:?}");
    let names = h.requests()[0].tools.clone();
    assert!(
        names.contains(&"echo".to_string()) && names.contains(&"get-sum".to_string()),
        "{names:?}"
    );
    h.close().await;
}

#[tokio::test]
async fn progress_notifications_become_updates_and_the_result_a_deferred_reply() {
    let server = server().connect().await.expect("server");
    let agent = agent().toolset(server.toolset());
    let args = r#"{"duration": 1, "steps": 2}"#;
    let script = vec![
        call("c1", "trigger-long-running-operation", args),
        text("Working on it."),
        text("Done."),
    ];
    let mut h = Harness::start(agent, script).await;
    h.session.user_turn("run it").await.unwrap();
    until(&mut h, "the final pair", |e| {
        e.iter().any(|e| {
            matches!(&e.kind, EventKind::ToolReplyUpdated { status: ReplyStatus::Completed, .. })
        })
    })
    .await;
    let updates: Vec<String> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallUpdated { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    // Every step's progress, in order (the server sends "i/steps").
    assert_eq!(updates, ["1/2", "2/2"]);
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Done));
    let hist = h.hist().await;
    assert!(
        hist.iter()
            .any(|i| i.contains("c1_final") && i.contains("Long running operation completed")),
        "{hist:?}"
    );
    h.close().await;
}

#[tokio::test]
async fn a_cancelled_server_call_ends_cancelled() {
    let server = server().connect().await.expect("server");
    let agent = agent().toolset(server.toolset());
    let args = r#"{"duration": 30, "steps": 30}"#;
    let script =
        vec![call("c1", "trigger-long-running-operation", args), text("Started."), text("ok")];
    let mut h = Harness::start(agent, script).await;
    h.session.user_turn("run it").await.unwrap();
    until(&mut h, "the first update", |e| {
        e.iter().any(|e| matches!(&e.kind, EventKind::ToolCallUpdated { .. }))
    })
    .await;
    h.session.cancel_tool_call("c1").await.expect("cancellable");
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Cancelled));
    h.close().await;
}

#[tokio::test]
async fn a_python_sdk_server_over_streamable_http() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child =
        python(&["http", &port.to_string()]).kill_on_drop(true).spawn().expect("python");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the Python server never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server = McpToolset::http("py", url).prefix("py").connect().await.expect("connects");
    let agent = agent().toolset(server.toolset());
    let script = vec![
        call("c1", "py_add", r#"{"a": 2, "b": 3}"#),
        call("c2", "py_fail", "{}"),
        text("Done."),
    ];
    let mut h = Harness::start(agent, script).await;
    h.turn("add").await;
    until(&mut h, "both ends", |e| ended(e, "c1").is_some() && ended(e, "c2").is_some()).await;
    let hist = h.hist().await;
    assert!(hist.iter().any(|i| i.starts_with("out(#c1,") && i.contains("2 + 3 = 5")), "{hist:?}");
    // An isError result is an error output the model reads.
    assert!(
        hist.iter().any(|i| i.starts_with("out(#c2,")
            && i.contains("the disk is full")
            && i.contains("ERR")),
        "{hist:?}"
    );
    h.close().await;
    let _ = child.kill().await;
}

#[tokio::test]
async fn a_server_that_dies_mid_call_ends_the_call_with_an_error_and_the_session_goes_on() {
    let server = McpToolset::stdio("py", python(&["stdio"])).connect().await.expect("connects");
    let agent = agent().toolset(server.toolset());
    let script = vec![call("c1", "crash", "{}"), text("It broke."), text("Still here.")];
    let mut h = Harness::start(agent, script).await;
    h.turn("crash it").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Error));
    h.turn("are you there?").await;
    let hist = h.hist().await;
    assert_eq!(hist.last().map(String::as_str), Some("asst(Still here.)"), "{hist:?}");
    h.close().await;
}

#[tokio::test]
async fn the_mcp_example_adds_with_the_reference_server() {
    let node = everything_command();
    let said = example::run(node).await.expect("the example runs");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("tool: ") && said[0].contains("42"), "{said:?}");
    assert_eq!(said[1], "19 and 23 make 42.");
}

/// Tool names of the `n`-th LLM request.
fn tools_of(h: &Harness, n: usize) -> Vec<String> {
    h.requests()[n].tools.clone()
}

#[tokio::test]
async fn a_supervised_server_lists_its_tools_before_the_first_request() {
    let node = everything_command();
    let toolset = McpToolset::stdio("everything", node).build();
    let script = vec![call("c1", "get-sum", r#"{"a": 1, "b": 2}"#), text("3.")];
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("1 + 2?").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert!(tools_of(&h, 0).contains(&"get-sum".to_string()), "{:?}", tools_of(&h, 0));
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Done));
    h.close().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_is_an_error_event_and_the_session_goes_on() {
    let toolset = McpToolset::stdio("ghost", Command::new("no-such-mcp-server")).build();
    let mut h = Harness::start(agent().toolset(toolset), vec![text("Hello.")]).await;
    h.turn("hi").await;
    let errors = error_messages(h.events());
    assert!(errors.iter().any(|m| m.contains("cannot start MCP server `ghost`")), "{errors:?}");
    assert_eq!(h.hist().await.last().map(String::as_str), Some("asst(Hello.)"));
    h.close().await;
}

#[tokio::test]
async fn a_supervised_server_that_dies_is_restarted() {
    let toolset = McpToolset::stdio("py", python(&["stdio"])).build();
    let script = vec![
        call("c1", "crash", "{}"),
        text("It broke."),
        call("c2", "add", r#"{"a": 1, "b": 1}"#),
        text("Back."),
    ];
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("crash it").await;
    until(&mut h, "the crash", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Error));
    // The first restart waits half a second; give it a few.
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.turn("again").await;
    until(&mut h, "the call after the restart", |e| ended(e, "c2").is_some()).await;
    let hist = h.hist().await;
    assert!(hist.iter().any(|i| i.starts_with("out(#c2,") && i.contains("1 + 1 = 2")), "{hist:?}");
    h.close().await;
}

#[tokio::test]
async fn a_changed_tool_list_shows_in_the_next_request() {
    let toolset = McpToolset::stdio("py", python(&["stdio"])).build();
    let script = vec![call("c1", "grow", "{}"), text("Grown."), text("Sure.")];
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("grow").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert!(!tools_of(&h, 0).contains(&"extra".to_string()));
    // The refresh is one round trip after the notification.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        h.turn("and now?").await;
        let last = h.requests().len() - 1;
        if tools_of(&h, last).contains(&"extra".to_string()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`extra` never listed: {:?}",
            tools_of(&h, last)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    h.close().await;
}

/// Whether process `pid` has gone (or is a zombie its parent has yet to reap).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn closing_the_session_stops_the_server_process() {
    let toolset = McpToolset::stdio("py", python(&["stdio"]))
        .on_duplicate("pid", OnDuplicate::Reject, DuplicateScope::Name)
        .build();
    let both = ScriptedResponse::calls([
        ScriptedCall::new("c1", "pid", "{}"),
        ScriptedCall::new("c2", "pid", "{}"),
    ]);
    let mut h = Harness::start(agent().toolset(toolset), vec![both, text("Got it.")]).await;
    h.turn("pid?").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    let hist = h.hist().await;
    // `reject` (a per-tool option): the second call, made while the first runs, is answered
    // without running, so it has no lifecycle events.
    assert!(hist.iter().any(|i| i.starts_with("out(#c2,")), "{hist:?}");
    assert_eq!(ended(h.events(), "c2"), None);
    let out = hist.iter().find(|i| i.starts_with("out(#c1,")).expect("an output");
    let pid: u32 = out.split('"').nth(1).and_then(|p| p.parse().ok()).expect("a pid");
    assert!(!gone(pid), "the server runs while the session does");
    h.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(tokio::time::Instant::now() < deadline, "server {pid} still runs after close");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_supervised_server_starts_with_the_session_and_stops_with_it() {
    let mark = std::env::temp_dir().join(format!("colloquy-mcp-mark-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let mark_arg = mark.to_string_lossy().into_owned();
    let toolset = McpToolset::stdio("py", python(&["stdio", "--mark", &mark_arg])).build();
    let h = Harness::start(agent().toolset(toolset), vec![]).await;
    // No turn: the server starts with the toolset's actor.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&mark).ok().and_then(|p| p.parse().ok()) {
            break pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "the server never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!gone(pid));
    h.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(tokio::time::Instant::now() < deadline, "server {pid} still runs after close");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_file(&mark);
}
