//! `colloquy chat` driven through its standard input, as a script would: the scripted model,
//! and real OpenAI and Anthropic wire streams from a replay server on 127.0.0.1. Real
//! processes and sockets, so the real clock with bounded waits (docs/testing.md).

mod common;

use common::{Driven, assert_lines_in_order, run as colloquy, streamed};

use std::time::Duration;

use colloquy_replay::{ReplayServer, Reply};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

fn recorded(provider: &str, name: &str) -> Reply {
    let path = format!("{}/../../tests/it/wire/{provider}/{name}.sse", env!("CARGO_MANIFEST_DIR"));
    Reply::sse(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_model_chats_through_piped_input_and_end_of_input_closes() {
    let page = std::env::temp_dir().join(format!("colloquy-chat-{}.html", std::process::id()));
    let input = format!(
        "hello\nwhat's the weather in Rome?\n/tools\n/history\n/cancel nope\n/dance\n/inspect\n/inspect json\n/timeline {}\n",
        page.display()
    );
    let out = colloquy(&["chat", "--provider", "scripted"], &input).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains('\x1b'), "no colour when stdout is not a terminal");
    assert_lines_in_order(
        &out.stdout,
        &[
            "colloquy chat with the scripted model",
            "you › hello\n",
            "agent › You said \"hello\".",
            "you › what's the weather in Rome?\n",
            "agent › Let me check the weather in Rome.",
            "agent › Here is what I have: Rome: day 1: sunny, 24°C",
            "tools:\n  get_weather — Get the weather forecast for a city.",
            "no call running",
            "user: what's the weather in Rome?",
            "call call_w3 get_weather({\"city\": \"Rome\"})",
            "cannot cancel nope",
            "unknown command /dance",
            "session ",
            " · agent assistant (listening) · user listening",
            "\n  session · session · running\n    activity:assistant · activity · running · agent assistant\n      toolset:agent:assistant · toolset · running · agent scope · tools: get_weather, book_flight, end_call",
            "\"kind\": \"session\"",
            "timeline written to",
            "── session closed: close ──",
        ],
    );
    assert_lines_in_order(
        &out.stdout,
        &[
            "  tool ▸ get_weather #1 started (call_w3)",
            "  tool ✓ get_weather #1 done: Rome: day 1: sunny, 24°C",
            "── session closed: close ──",
        ],
    );
    let html = std::fs::read_to_string(&page).expect("the timeline page was written");
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("get_weather"));
    let _ = std::fs::remove_file(&page);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quit_cancels_a_running_background_booking_and_exits_at_once() {
    let out =
        colloquy(&["chat", "--provider", "scripted"], "book me a flight\n/quit\nnever read\n")
            .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &[
            "  tool ▸ book_flight #1 started",
            "  tool … book_flight #1: Searching Saturday flights from London to Paris…",
            "  tool ✗ book_flight #1 cancelled",
            "── session closed",
        ],
    );
    // The line after /quit is counted, not sent.
    assert!(!out.stdout.contains("you › never read"), "{}", out.stdout);
    assert!(out.stdout.contains("(1 line not sent, from `never read`: "), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_or_a_server_it_says_what_to_set_and_exits_2() {
    for provider in ["openai", "anthropic"] {
        let out = colloquy(&["chat", "--provider", provider], "").await;
        assert_eq!(out.code, Some(2));
        let variable = if provider == "openai" { "OPENAI_API_KEY" } else { "ANTHROPIC_API_KEY" };
        assert!(out.stderr.contains(variable), "{}", out.stderr);
        assert!(out.stderr.contains("--provider scripted"), "{}", out.stderr);
        assert!(out.stdout.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_against_an_openai_compatible_server_runs_the_call_it_asks_for() {
    let replies =
        vec![recorded("openai", "one_call_many_chunks"), recorded("openai", "sunny_in_paris")];
    let server = ReplayServer::start(replies).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out =
        colloquy(&["chat", "--base-url", &base, "--model", "local-model"], "weather in Paris?\n")
            .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &[
            "colloquy chat with openai local-model at http://127.0.0.1:",
            "agent › It's sunny in Paris.",
        ],
    );
    assert_lines_in_order(
        &out.stdout,
        &[
            "  tool ▸ get_weather #1 started (call_Wx8Pq2)",
            "  tool ✓ get_weather #1 done: Paris: day 1: sunny, 24°C",
        ],
    );
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body["model"], "local-model");
    assert_eq!(received[0].header("authorization"), None, "no key, no header");
    let messages = received[1].body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["tool_calls"][0]["id"], "call_Wx8Pq2");
    assert_eq!(
        messages[n - 1],
        serde_json::json!({"role": "tool", "tool_call_id": "call_Wx8Pq2", "content": "Paris: day 1: sunny, 24°C"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_against_anthropics_api_runs_the_call_it_asks_for() {
    let replies = vec![
        recorded("anthropic", "one_call_many_chunks"),
        recorded("anthropic", "sunny_in_paris"),
    ];
    let server = ReplayServer::start(replies).await.unwrap();
    let args = ["chat", "--provider", "anthropic", "--base-url", &server.base_url()];
    let out = colloquy(&args, "weather in Paris?\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(&out.stdout, &["agent › It's sunny in Paris."]);
    assert_lines_in_order(
        &out.stdout,
        &["  tool ✓ get_weather #1 done: Paris: day 1: sunny, 24°C"],
    );
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/v1/messages");
    let messages = received[1].body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"][0],
        serde_json::json!({"type": "tool_result", "tool_use_id": "toolu_01Wx8", "content": "Paris: day 1: sunny, 24°C"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_the_reply_and_not_the_program() {
    let server = ReplayServer::start(vec![recorded("openai", "slow_text")]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let mut chat = Driven::start(&["chat", "--base-url", &base]).await;
    chat.send("when does it leave?").await;
    chat.close_input(); // end of input: the chat ends once the reply is over
    chat.wait_for("The flight leaves").await;
    // Our own child's pid, which `child` keeps from being reaped.
    let pid = Pid::from_raw(chat.child.id().expect("the chat is running") as i32);
    kill(pid, Signal::SIGINT).expect("SIGINT sent");
    let (code, text) = chat.end().await;
    assert_eq!(code, Some(0), "{text}");
    assert_lines_in_order(&text, &["agent › The flight leaves [interrupted]", "── session closed"]);
    assert!(!text.contains("gate 12"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_has_help_and_there_is_a_version() {
    for sub in [&["--help"][..], &["demo", "--help"], &["run", "--help"], &["chat", "--help"]] {
        let out = colloquy(sub, "").await;
        assert_eq!(out.code, Some(0), "{sub:?}: {}", out.stderr);
        assert!(out.stdout.contains("Usage: colloquy"), "{sub:?}: {}", out.stdout);
    }
    let chat_help = colloquy(&["chat", "--help"], "").await.stdout;
    assert!(chat_help.contains("--provider <PROVIDER>") && chat_help.contains("scripted"));
    let version = colloquy(&["--version"], "").await;
    assert_eq!(version.stdout.trim(), format!("colloquy {}", env!("CARGO_PKG_VERSION")));
    let bad = colloquy(&["chat", "--provder", "x"], "").await;
    assert_eq!(bad.code, Some(2));
    assert!(bad.stderr.contains("--provider"), "a suggestion: {}", bad.stderr);
}

/// The MCP project's reference server, installed (pinned, once) by the project's script.
fn everything_server() -> String {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let status = std::process::Command::new("bash")
        .arg(format!("{root}/scripts/mcp-test-servers.sh"))
        .status()
        .expect("scripts/mcp-test-servers.sh runs");
    assert!(status.success(), "scripts/mcp-test-servers.sh could not install the MCP servers");
    format!(
        "{root}/target/mcp/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_are_supervised_and_a_bad_one_does_not_stop_the_chat() {
    let server = format!("node {} stdio", everything_server());
    let args = [
        "chat",
        "--provider",
        "scripted",
        "--no-color",
        "--mcp",
        "no-such-mcp-server --flag",
        "--mcp",
        &server,
    ];
    let mut chat = Driven::start(&args).await;
    chat.wait_for("cannot start MCP server `mcp1`").await;
    chat.wait_for("tools from `node ").await;
    chat.send("/tools").await;
    chat.wait_for("no call running").await;
    chat.send("/quit").await;
    let (code, all) = chat.end().await;
    assert_eq!(code, Some(0), "{all}");
    assert_lines_in_order(&all, &["tools:", "  get-sum — ", "no call running"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_with_the_same_tools_start_together() {
    let server = format!("node {} stdio", everything_server());
    let args = ["chat", "--provider", "scripted", "--no-color", "--mcp", &server, "--mcp", &server];
    let mut chat = Driven::start(&args).await;
    chat.wait_for_n("tools from `node ", 2).await;
    chat.send("/inspect").await;
    // The second server's tools keep theirs under its name: `mcp2_get-sum`.
    chat.wait_for("mcp2_get-sum").await;
    chat.send("/quit").await;
    let (code, all) = chat.end().await;
    assert_eq!(code, Some(0), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_needs_approval_waits_for_approve_and_reject_tells_the_agent_why() {
    let args = ["chat", "--provider", "scripted", "--require-approval", "get_weather"];
    let mut chat = Driven::start(&args).await;
    chat.send("what's the weather in Rome?").await;
    chat.wait_for("waits for your approval: /approve #1 or /reject #1 REASON").await;
    chat.wait_for("agent › Here is what I have: `get_weather` needs approval before it runs").await;
    let text = chat.text();
    let started = "tool ▸ get_weather #1 started (";
    let at = text.find(started).expect("the started line") + started.len();
    let id = text[at..].split(')').next().expect("a call id").to_string();
    chat.send("/tools").await;
    chat.wait_for("awaiting approval").await;
    // A prefix of the provider's id names the call as well as its short id.
    chat.send(&format!("/approve {}", &id[..id.len() - 1])).await;
    chat.wait_for("  tool ✓ get_weather #1 done: Rome: day 1: sunny, 24°C").await;
    chat.send("/approve #1").await;
    chat.wait_for(&format!("cannot approve #1: Tool call {id} not found")).await;
    chat.send("/approve #7").await;
    chat.wait_for("cannot approve #7: no call #7").await;
    chat.send("and the weather in Oslo?").await;
    chat.wait_for(r#"get_weather #2 ({"city": "Oslo"}) waits for your approval: /approve #2"#)
        .await;
    chat.send("/reject #2 not today").await;
    chat.wait_for("  tool ✗ `get_weather` was not approved: not today (#2)").await;
    chat.wait_for("agent › Here is what I have: `get_weather` was not approved: not today").await;
    chat.close_input();
    let (code, out) = chat.end().await;
    assert_eq!(code, Some(0), "{out}");
    // Each acknowledgement comes before the lines of what it caused.
    assert_lines_in_order(
        &out,
        &[
            &format!("  tool ▸ get_weather #1 started ({id})"),
            "  tool ? get_weather #1 ({\"city\": \"Rome\"}) waits for your approval: /approve #1 \
             or /reject #1 REASON",
            "approving #1\n",
            "  tool ▸ get_weather #1 approved",
            "  tool ✓ get_weather #1 done",
            "rejecting #2\n",
            "  tool ✗ `get_weather` was not approved: not today (#2)",
            "── session closed",
        ],
    );
}

/// An OpenAI stream calling `name` with `arguments` (a JSON text).
fn calling(name: &str, arguments: &str) -> Reply {
    let delta = serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0,
        "id": "call_h1", "type": "function", "function": {"name": name, "arguments": arguments}}]});
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let sse = chunk(delta, None) + &chunk(serde_json::json!({}), Some("tool_calls"));
    Reply::sse(&(sse + "data: [DONE]\n\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_model_and_tool_text_reaches_the_terminal_without_controls() {
    let hostile_city = "\u{1b}]0;pwned\u{7}Rome\r\nagent › fake";
    let replies = vec![
        streamed("Hi\u{1b}[2J\u{7}\u{0} there\r\nsecond line\u{9b}31m\u{202e}", 0),
        calling("get_weather", &serde_json::json!({ "city": hostile_city }).to_string()),
        streamed("Sunny.", 0),
    ];
    let server = ReplayServer::start(replies).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = colloquy(&["chat", "--base-url", &base], "hello\nweather?\n/history\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for control in ['\u{1b}', '\u{7}', '\u{0}', '\r', '\u{9b}', '\u{202e}'] {
        assert!(!out.stdout.contains(control), "{control:?} reached the terminal:\n{}", out.stdout);
    }
    assert_lines_in_order(
        &out.stdout,
        &[
            "agent › Hi␛[2J␇␀ there\nsecond line\\u{9b}31m\\u{202e}\n",
            "agent › Sunny.",
            "user: hello",
            "agent: Hi␛[2J␇␀ there↵second line",
            // Arguments are canonical JSON: their controls are already escapes.
            r#"call call_h1 get_weather({"city": "\u001b]0;pwned\u0007Rome\r\nagent \u203a fake"})"#,
            "output call_h1: ␛]0;pwned␇Rome↵agent › fake: day 1: sunny, 24°C",
        ],
    );
    assert_lines_in_order(
        &out.stdout,
        &["  tool ✓ get_weather #1 done: ␛]0;pwned␇Rome↵agent › fake: day 1: sunny, 24°C"],
    );
    assert!(!out.stdout.contains("\nagent › fake"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banner_never_shows_credentials() {
    let url = "http://me:sk-secret-1@127.0.0.1:9/v1?api-key=sk-secret-2#sk-secret-3";
    let out = colloquy(&["chat", "--base-url", url], "/quit\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("at http://127.0.0.1:9/v1:"), "{}", out.stdout);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains("secret") && !all.contains("me:"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_and_temperature_reach_the_model() {
    let server = ReplayServer::start(vec![streamed("Brief.", 0)]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let args = [
        "chat",
        "--base-url",
        &base,
        "--instructions",
        "Answer in one word.",
        "--temperature",
        "0.25",
    ];
    let out = colloquy(&args, "hi\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(&out.stdout, &["agent › Brief."]);
    let body = &server.received()[0].body;
    assert_eq!(body["temperature"].as_f64(), Some(0.25));
    let first = &body["messages"][0];
    assert_eq!(first["content"], "Answer in one word.", "{body}");
    assert!(!body.to_string().contains("travel assistant"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_length_warning_follows_the_text_it_is_about() {
    let server = ReplayServer::start(vec![recorded("openai", "length")]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = colloquy(&["chat", "--base-url", &base], "tell me\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &[
            "agent › This answer is cut\n",
            "  (the model's reply was cut short: it reached its output token limit (length))",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_quit_ends_the_chat_even_when_the_reply_never_finishes() {
    // The reply pauses for 30 s mid-stream; /quit waits for it SCRIPT_QUIT_WAIT (10 s) only.
    let server = ReplayServer::start(vec![streamed("Let me think", 30_000)]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let mut chat = Driven::start(&["chat", "--base-url", &base]).await;
    chat.send("tell me").await;
    chat.wait_for("agent › Let me think").await;
    chat.send("/quit").await;
    chat.send("never read").await;
    let (code, text) = chat.end().await;
    assert_eq!(code, Some(0), "{text}");
    assert_lines_in_order(&text, &["agent › Let me think", "── session closed"]);
    assert!(!text.contains("…and more") && !text.contains("never read"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_end_of_input_ends_the_chat_even_when_the_reply_never_finishes() {
    let server = ReplayServer::start(vec![streamed("Let me think", 30_000)]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let mut chat = Driven::start(&["chat", "--base-url", &base]).await;
    chat.send("tell me").await;
    chat.wait_for("agent › Let me think").await;
    chat.close_input();
    let (code, text) = chat.end().await;
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("…and more"), "{text}");
}

/// The MCP Python SDK's interpreter, installed (pinned, once) by the project's script.
fn mcp_python() -> String {
    everything_server(); // installs both
    format!("{}/../../target/mcp/venv/bin/python", env!("CARGO_MANIFEST_DIR"))
}

/// Whether process `pid` still exists (a zombie counts as gone: it no longer runs).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's closing parenthesis: `Z` is a zombie.
    stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_within_a_bound_and_no_mcp_server_outlives_the_chat() {
    let python = mcp_python();
    let mark = std::env::temp_dir().join(format!("colloquy-hang-{}.pid", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let script = format!("{}/tests/hang_server.py", env!("CARGO_MANIFEST_DIR"));
    let server_command = format!("{python} {script} {}", mark.display());
    let replies = vec![calling("wait_forever", "{}"), streamed("Waiting for it.", 0)];
    let model = ReplayServer::start(replies).await.unwrap();
    let base = format!("{}/v1", model.base_url());
    let mut chat = Driven::start(&["chat", "--base-url", &base, "--mcp", &server_command]).await;
    chat.wait_for("tools from").await;
    chat.send("wait for it").await;
    chat.wait_for("tool ▸ wait_forever #1 started").await;
    let server_pid: i32 =
        std::fs::read_to_string(&mark).expect("the server wrote its pid").trim().parse().unwrap();
    let pid = Pid::from_raw(chat.child.id().expect("the chat runs") as i32);
    // Our own child's pid, which `chat` keeps from being reaped.
    kill(pid, Signal::SIGTERM).expect("SIGTERM sent");
    let (code, text) = chat.end().await;
    assert_eq!(code, Some(128 + Signal::SIGTERM as i32), "{text}");
    let _ = std::fs::remove_file(&mark);
    // The server's process group dies with the chat (the MCP toolset's guard), whatever its
    // call was doing.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(server_pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = alive(server_pid);
    if left {
        // The process group the test's server leads.
        let _ = killpg(Pid::from_raw(server_pid), Signal::SIGKILL);
    }
    assert!(!left, "the MCP server outlived the chat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piped_script_runs_to_its_last_line_however_slow_the_model() {
    // Four replies of 3 s each: more than SCRIPT_QUIT_WAIT (10 s) in all, read at once as a
    // file is, the end of input first.
    let pause = Duration::from_secs(3);
    let replies =
        (1..=4).map(|n| streamed(&format!("Answer {n}."), 0).pause_first(pause)).collect();
    let server = ReplayServer::start(replies).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = colloquy(&["chat", "--base-url", &base], "one\ntwo\nthree\nfour\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &[
            "you › one\n",
            "agent › Answer 1.\n",
            "you › two\n",
            "agent › Answer 2.\n",
            "you › three\n",
            "agent › Answer 3.\n",
            "you › four\n",
            "agent › Answer 4.\n",
            "── session closed: close ──",
        ],
    );
    assert!(!out.stdout.contains("[interrupted]") && !out.stdout.contains("not sent"));
    assert_eq!(server.received().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_waits_for_a_model_that_thinks_past_the_quiet_bound_on_its_last_line() {
    // The last line's model takes 11 s to its first token (a long prompt on a small machine):
    // the agent is thinking, so the end of input does not give up after SCRIPT_QUIT_WAIT.
    let replies = vec![streamed("Slow answer.", 0).pause_first(Duration::from_secs(11))];
    let server = ReplayServer::start(replies).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = colloquy(&["chat", "--base-url", &base], "only line\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(&out.stdout, &["you › only line\n", "agent › Slow answer.\n"]);
    assert!(!out.stdout.contains("showed nothing"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_fails_does_not_hold_the_lines_after_it() {
    let refused = Reply::status(400, r#"{"error": {"message": "bad request", "type": "x"}}"#);
    let server = ReplayServer::start(vec![refused, streamed("Second answer.", 0)]).await.unwrap();
    let base = format!("{}/v1", server.base_url());
    let out = colloquy(&["chat", "--base-url", &base], "first\nsecond\n").await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &["you › first\n", "error ! llm: ", "you › second\n", "agent › Second answer."],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_starts_over_with_an_empty_history() {
    let input = "hello\n/new\n/history\nagain\n/clear\n/quit\n";
    let out = colloquy(&["chat", "--provider", "scripted"], input).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_lines_in_order(
        &out.stdout,
        &[
            "agent › You said \"hello\".",
            "── session closed: close ──",
            "── new session ",
            ": the history is empty ──",
            "you › /history\n",
            "agent: assistant\n",
            "you › again\n",
            "agent › You said \"again\".",
            "── new session ",
        ],
    );
    let history = &out.stdout[out.stdout.find("you › /history").unwrap()..];
    let history = &history[..history.find("you › again").unwrap()];
    assert!(!history.contains("hello"), "{history}");
}
