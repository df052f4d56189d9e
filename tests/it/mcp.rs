//! MCP toolsets against a real server nobody here wrote: the MCP project's reference server
//! `@modelcontextprotocol/server-everything` (a pinned version from the npm registry, installed
//! under `target/mcp/` on first use). Real child processes: the real clock, bounded waits.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use colloquy::events::{ReplyStatus, ToolCallStatus};
use colloquy::mcp::McpToolset;
use colloquy::prelude::*;
use colloquy::tools::{DuplicateScope, OnDuplicate};
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

/// Call `id`'s output in the history: its text and whether it is an error.
async fn output(h: &Harness, id: &str) -> Option<(String, bool)> {
    h.session.history().await.unwrap().into_iter().find_map(|item| match item {
        ChatItem::FunctionCallOutput(o) if o.call_id == id => Some((o.output, o.is_error)),
        _ => None,
    })
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
    // No throttle: every notification is an update.
    let server = server().progress_interval(Duration::ZERO).connect().await.expect("server");
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

/// The tests' Python server over streamable HTTP (`args` after the port), once it listens;
/// killed when the child is dropped. Its URL.
async fn http_server(args: &[&str]) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let port_arg = port.to_string();
    let all: Vec<&str> =
        ["http", port_arg.as_str()].into_iter().chain(args.iter().copied()).collect();
    let child = python(&all).kill_on_drop(true).spawn().expect("python");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the Python server never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn a_python_sdk_server_over_streamable_http() {
    let (mut child, url) = http_server(&[]).await;
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
    // The crash, then an `add` a turn until the restarted server answers one.
    let mut script = vec![call("c1", "crash", "{}"), text("It broke.")];
    for n in 2..40 {
        script.push(call(&format!("c{n}"), "add", r#"{"a": 1, "b": 1}"#));
        script.push(text("Tried."));
    }
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("crash it").await;
    until(&mut h, "the crash", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Error));
    // The first restart waits half a second; the server then takes its time to start (a loaded
    // machine may take seconds): bounded, not timed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for n in 2..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        h.turn("again").await;
        let id = format!("c{n}");
        until(&mut h, "the call's end", |e| ended(e, &id).is_some()).await;
        let (said, _) = output(&h, &id).await.expect("an output");
        if said.contains("1 + 1 = 2") {
            h.close().await;
            return;
        }
        assert!(said.contains("restarted"), "{said}");
        assert!(tokio::time::Instant::now() < deadline, "the server was not restarted: {said}");
    }
    panic!("the server was not restarted");
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

#[tokio::test]
async fn a_result_over_the_size_limit_ends_the_call_with_an_error_giving_its_size() {
    let server = McpToolset::stdio("py", python(&["stdio"])).connect().await.expect("connects");
    let calls = ScriptedResponse::calls([
        ScriptedCall::new("c1", "big", r#"{"mib": 2}"#),
        ScriptedCall::new("c2", "big", r#"{"mib": 0.5}"#),
    ]);
    let mut h = Harness::start(agent().toolset(server.toolset()), vec![calls, text("ok")]).await;
    h.turn("big").await;
    until(&mut h, "both ends", |e| ended(e, "c1").is_some() && ended(e, "c2").is_some()).await;
    let (said, error) = output(&h, "c1").await.expect("an output");
    assert!(error, "{said}");
    assert!(said.contains("2097152 bytes") && said.contains("1048576 bytes"), "{said}");
    // Under the default 1 MiB: the model reads it.
    let (said, error) = output(&h, "c2").await.expect("an output");
    assert!(!error && said.len() == 512 * 1024);
    h.close().await;
    // The limit is the host's to set.
    let small = McpToolset::stdio("py", python(&["stdio"])).max_result_bytes(100);
    let server = small.connect().await.expect("connects");
    let script = vec![call("c1", "big", r#"{"mib": 0.001}"#), text("ok")];
    let mut h = Harness::start(agent().toolset(server.toolset()), script).await;
    h.turn("big").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    let (said, error) = output(&h, "c1").await.expect("an output");
    assert!(error && said.contains("1048 bytes") && said.contains("limit of 100 bytes"), "{said}");
    h.close().await;
}

#[tokio::test]
async fn an_answer_the_transport_drops_ends_its_call_with_an_error_and_the_server_goes_on() {
    let server = McpToolset::stdio("py", python(&["stdio"])).connect().await.expect("connects");
    let said = big_then_add(server.toolset(), "stdio").await;
    assert!(said.contains("over the 16 MiB") && said.contains("dropped"), "{said}");
    let bytes: usize = said
        .split(" bytes")
        .next()
        .and_then(|s| s.rsplit(' ').next()?.parse().ok())
        .expect("the size");
    assert!(bytes > 17 * 1024 * 1024, "{said}");
}

/// Calls `big` (a 17 MiB answer) then `add` on `toolset`: `big` ends with an error and `add`
/// still answers. Returns what the model read for `big`.
async fn big_then_add(toolset: Toolset, what: &str) -> String {
    let script = vec![
        call("c1", "big", r#"{"mib": 17}"#),
        text("Too big."),
        call("c2", "add", r#"{"a": 1, "b": 2}"#),
        text("3."),
    ];
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("big").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Error), "{what}");
    let (said, _) = output(&h, "c1").await.expect("an output");
    h.turn("again").await;
    until(&mut h, "the next call's end", |e| ended(e, "c2").is_some()).await;
    assert_eq!(output(&h, "c2").await.map(|o| o.0).as_deref(), Some("1 + 2 = 3"), "{what}");
    h.close().await;
    said
}

/// A server that lists the 10,000-deep `deep` beside `add`: `connect()` reports `deep` skipped,
/// and a supervised session on `supervised` calls `add` without seeing `deep`.
async fn the_deep_tool_is_skipped(connected: McpToolset, supervised: Toolset, what: &str) {
    let server = tokio::time::timeout(Duration::from_secs(20), connected.connect())
        .await
        .expect("the listing ends")
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let skipped = server.skipped();
    assert_eq!(skipped.len(), 1, "{what}: {skipped:?}");
    assert!(skipped[0].starts_with("`deep`: its schema is nested too deep"), "{skipped:?}");
    let script = vec![call("c1", "add", r#"{"a": 2, "b": 2}"#), text("4.")];
    let mut h = Harness::start(agent().toolset(supervised), script).await;
    h.turn("2 + 2?").await;
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    let names = tools_of(&h, 0);
    assert!(
        names.contains(&"add".to_string()) && !names.contains(&"deep".to_string()),
        "{what}: {names:?}"
    );
    assert_eq!(output(&h, "c1").await.map(|o| o.0).as_deref(), Some("2 + 2 = 4"));
    h.close().await;
}

#[tokio::test]
async fn a_tool_whose_schema_cannot_be_read_is_skipped_and_the_others_load() {
    let deep = || McpToolset::stdio("py", python(&["stdio", "--deep", "10000"]));
    the_deep_tool_is_skipped(deep(), deep().build(), "stdio").await;
}

#[tokio::test]
async fn over_http_a_tool_whose_schema_cannot_be_read_is_skipped_and_the_others_load() {
    // The Python SDK answers as an SSE stream by default, as a JSON body with `--json`.
    for mode in [&["--deep", "10000"][..], &["--json", "--deep", "10000"]] {
        let (mut child, url) = http_server(mode).await;
        let deep = || McpToolset::http("py", url.clone());
        the_deep_tool_is_skipped(deep(), deep().build(), &format!("{mode:?}")).await;
        let _ = child.kill().await;
    }
}

#[tokio::test]
async fn over_http_an_answer_over_the_size_limit_ends_its_call_and_the_server_goes_on() {
    for mode in [&[][..], &["--json"]] {
        let (mut child, url) = http_server(mode).await;
        let server = McpToolset::http("py", url).connect().await.expect("connects");
        let said = big_then_add(server.toolset(), &format!("{mode:?}")).await;
        // rmcp stops reading at the limit (a JSON body, an SSE event), so the size is not known.
        assert!(
            said.starts_with("the MCP server's answer was over the 16 MiB")
                && said.ends_with("it was dropped"),
            "{mode:?}: {said}"
        );
        let _ = child.kill().await;
    }
}

#[tokio::test]
async fn a_flood_of_progress_costs_a_handful_of_updates_and_the_result_comes_last() {
    let server = McpToolset::stdio("py", python(&["stdio"])).connect().await.expect("connects");
    let script = vec![call("c1", "flood", r#"{"n": 10000}"#), text("Flooding."), text("Done.")];
    let mut h = Harness::start(agent().toolset(server.toolset()), script).await;
    h.session.user_turn("flood").await.unwrap();
    until(&mut h, "the call's end", |e| ended(e, "c1").is_some()).await;
    h.session.wait_for_idle().await.expect("idle");
    let updates: Vec<String> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallUpdated { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    // The first at once, then at most one a second while the server floods.
    assert!(!updates.is_empty() && updates.len() <= 15, "{} updates: {updates:?}", updates.len());
    assert_eq!(updates[0], "note 1");
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::Done));
    let hist = h.hist().await;
    assert!(hist.iter().any(|i| i.contains("c1_final") && i.contains("flooded 10000")), "{hist:?}");
    // No update after the result.
    let last_update = hist.iter().rposition(|i| i.contains("c1_update_"));
    let final_at = hist.iter().position(|i| i.contains("c1_final")).expect("the final");
    assert!(last_update.is_none_or(|u| u < final_at), "{hist:?}");
    assert!(h.requests().len() <= 20, "{} requests", h.requests().len());
    h.close().await;
}

#[tokio::test]
async fn dropping_a_connected_toolset_stops_its_server() {
    let mark = std::env::temp_dir().join(format!("colloquy-mcp-drop-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let mark_arg = mark.to_string_lossy().into_owned();
    let server = McpToolset::stdio("py", python(&["stdio", "--mark", &mark_arg]))
        .connect()
        .await
        .expect("connects");
    let pid = read_pid(&mark).await;
    assert!(!gone(pid));
    drop(server); // no session, no close
    wait_gone(pid, "after its toolset was dropped").await;
    let _ = std::fs::remove_file(&mark);
}

/// The process id a server wrote to `mark` as it started (bounded wait).
async fn read_pid(mark: &std::path::Path) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(pid) = std::fs::read_to_string(mark).ok().and_then(|p| p.trim().parse().ok()) {
            return pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "the server never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until process `pid` has gone.
async fn wait_gone(pid: u32, when: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(tokio::time::Instant::now() < deadline, "process {pid} still runs {when}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Set on the helper below when a test runs it as a child process: how it should end.
const HELPER: &str = "COLLOQUY_MCP_HELPER";

/// Not a test: a host the tests below run as a child process, with an environment of their
/// own (a secret in it). It starts a supervised server (its pid in the mark file), has it
/// start a grandchild and report its environment, prints both, starts a call that never
/// answers (not cancellable), prints `READY`, then exits at once (`exit`) or waits to be
/// killed (`kill`).
#[tokio::test]
#[ignore = "a child process of the tests below"]
async fn helper_host_with_a_server() {
    let Ok(mode) = std::env::var(HELPER) else { return };
    let mark = std::env::var("COLLOQUY_MCP_HELPER_MARK").expect("a mark file");
    let mut command = python(&["stdio", "--mark", &mark]);
    command.env("COLLOQUY_PASSED", "explicit");
    let toolset = McpToolset::stdio("py", command).inherit_env(["COLLOQUY_INHERITED"]).build();
    let both = ScriptedResponse::calls([
        ScriptedCall::new("c1", "grandchild", "{}"),
        ScriptedCall::new("c2", "env", "{}"),
    ]);
    let script = vec![both, text("ok"), call("c3", "hang", "{}"), text("waiting")];
    let mut h = Harness::start(agent().toolset(toolset), script).await;
    h.turn("go").await;
    until(&mut h, "both ends", |e| ended(e, "c1").is_some() && ended(e, "c2").is_some()).await;
    println!("GRANDCHILD {}", output(&h, "c1").await.expect("a pid").0);
    println!("ENV {}", output(&h, "c2").await.expect("an environment").0);
    h.session.user_turn("hang").await.unwrap();
    until(&mut h, "the hanging call", |e| {
        e.iter().any(
            |e| matches!(&e.kind, EventKind::ToolCallStarted { call_id, .. } if call_id == "c3"),
        )
    })
    .await;
    println!("READY");
    if mode == "exit" {
        std::process::exit(0); // no destructor runs
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// The helper's run: the process, the server's pid, its grandchild's, its environment.
struct Helped {
    process: tokio::process::Child,
    server: u32,
    grandchild: u32,
    env: serde_json::Map<String, serde_json::Value>,
}

async fn run_helper(mode: &str) -> Helped {
    use tokio::io::AsyncBufReadExt;
    let mark =
        std::env::temp_dir().join(format!("colloquy-mcp-helper-{mode}-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let _ = servers(); // installed by this process, not raced by the helper
    let mut process = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["mcp::helper_host_with_a_server", "--exact", "--ignored", "--nocapture"])
        .env(HELPER, mode)
        .env("COLLOQUY_MCP_HELPER_MARK", &mark)
        .env("OPENAI_API_KEY", "sk-colloquy-test-secret")
        .env("COLLOQUY_INHERITED", "inherited")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the helper starts");
    let mut lines = tokio::io::BufReader::new(process.stdout.take().expect("stdout")).lines();
    let (mut grandchild, mut env) = (None, None);
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(pid) = line.strip_prefix("GRANDCHILD ") {
                grandchild = pid.trim().parse().ok();
            } else if let Some(json) = line.strip_prefix("ENV ") {
                env = serde_json::from_str(json).ok();
            } else if line.trim() == "READY" {
                return true;
            }
        }
        false
    };
    let ready = tokio::time::timeout(Duration::from_secs(30), read).await;
    assert_eq!(ready.ok(), Some(true), "the helper never got ready");
    let server = read_pid(&mark).await;
    let _ = std::fs::remove_file(&mark);
    Helped {
        process,
        server,
        grandchild: grandchild.expect("the grandchild's pid"),
        env: env.expect("the server's environment"),
    }
}

#[tokio::test]
async fn a_stdio_server_gets_an_allow_listed_environment_and_dies_when_its_host_exits() {
    let mut helped = run_helper("exit").await;
    let env = &helped.env;
    assert!(env.get("PATH").is_some(), "{env:?}");
    assert_eq!(env.get("COLLOQUY_PASSED").and_then(|v| v.as_str()), Some("explicit"));
    assert_eq!(env.get("COLLOQUY_INHERITED").and_then(|v| v.as_str()), Some("inherited"));
    assert!(env.get("OPENAI_API_KEY").is_none(), "a secret reached the server: {env:?}");
    assert!(env.get("CARGO_MANIFEST_DIR").is_none(), "{env:?}");
    // The host exited (a call it could not cancel still running): the whole group goes.
    let status = tokio::time::timeout(Duration::from_secs(20), helped.process.wait()).await;
    assert!(status.is_ok_and(|s| s.is_ok()), "the helper exits");
    wait_gone(helped.server, "after its host exited").await;
    wait_gone(helped.grandchild, "after its host exited").await;
}

#[tokio::test]
async fn a_stdio_server_and_its_children_die_when_the_host_is_killed() {
    let mut helped = run_helper("kill").await;
    assert!(!gone(helped.server) && !gone(helped.grandchild));
    helped.process.start_kill().expect("SIGKILL"); // kill -9: nothing of colloquy runs
    let _ = tokio::time::timeout(Duration::from_secs(10), helped.process.wait()).await;
    wait_gone(helped.server, "after its host was killed").await;
    wait_gone(helped.grandchild, "after its host was killed").await;
}

#[tokio::test]
async fn clashing_tool_names_get_their_server_s_name_and_never_stop_a_session() {
    // Two servers with the same tools, and a tool of the agent's own named like one of theirs.
    let first = McpToolset::stdio("py1", python(&["stdio"])).build();
    let second = McpToolset::stdio("py2", python(&["stdio"])).build();
    let own = FunctionTool::new("add", "Adds.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>("the agent's own add")
    });
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "add", "{}"),
            ScriptedCall::new("c2", "py1_add", r#"{"a": 1, "b": 2}"#),
            ScriptedCall::new("c3", "py2_add", r#"{"a": 2, "b": 2}"#),
        ]),
        text("Added."),
    ];
    let mut h = Harness::start(agent().tool(own).toolset(first).toolset(second), script).await;
    h.turn("add").await;
    until(&mut h, "the calls' ends", |e| ["c1", "c2", "c3"].iter().all(|c| ended(e, c).is_some()))
        .await;
    let tools = tools_of(&h, 0);
    // The first to list a name keeps it; the others get their server's name before it.
    for name in ["add", "py1_add", "py2_add", "pid", "py2_pid"] {
        assert!(tools.contains(&name.to_string()), "{name} missing from {tools:?}");
    }
    assert!(!tools.contains(&"py1_pid".to_string()), "{tools:?}");
    // The snapshot lists each toolset's learned tools under the names the model sees.
    let snap = h.session.inspect().await.unwrap();
    let listed = |id: &str| snap.tree.find(id).and_then(|n| n.tools.clone()).unwrap_or_default();
    assert!(listed("toolset:py1").contains(&"pid".to_string()), "{snap}");
    assert!(listed("toolset:py2").contains(&"py2_pid".to_string()), "{snap}");
    assert_eq!(output(&h, "c1").await, Some(("the agent's own add".into(), false)));
    assert!(output(&h, "c2").await.unwrap().0.contains("1 + 2 = 3"));
    assert!(output(&h, "c3").await.unwrap().0.contains("2 + 2 = 4"));
    h.close().await;
}

#[tokio::test]
async fn a_server_call_past_its_deadline_ends_timed_out_and_the_server_goes_on() {
    let toolset =
        McpToolset::stdio("py", python(&["stdio"])).deadline(Some(Duration::from_millis(500)));
    let script = vec![
        call("c1", "hang", "{}"),
        text("It hung."),
        call("c2", "add", r#"{"a": 1, "b": 1}"#),
        text("2."),
    ];
    let mut h = Harness::start(agent().toolset(toolset.build()), script).await;
    h.turn("hang").await;
    until(&mut h, "the time-out", |e| ended(e, "c1").is_some()).await;
    assert_eq!(ended(h.events(), "c1"), Some(ToolCallStatus::TimedOut));
    let why = "Tool `hang` timed out after 0.5 s".to_string();
    assert_eq!(output(&h, "c1").await, Some((why, true)));
    h.turn("add").await;
    until(&mut h, "the next call", |e| ended(e, "c2").is_some()).await;
    assert!(output(&h, "c2").await.unwrap().0.contains("1 + 1 = 2"));
    h.close().await;
}
