//! `colloquy serve` as a process on 127.0.0.1 (port 0): its URL line, one user turn over HTTP
//! and the WebSocket, its stop on SIGTERM, and with `--store` a session that outlives a
//! `kill -9`. Real sockets: the real clock, every wait bounded.

mod common;
#[path = "../../colloquy-cluster/tests/common/server.rs"]
mod nats;

use std::time::Duration;

use colloquy_protocol::{Reply, ServerMessage, SessionStarted};
use futures_util::{SinkExt, StreamExt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

/// The bound on anything the test waits for.
const BOUND: Duration = Duration::from_secs(20);

/// A `colloquy serve` process and its page's URL, once it printed its ready line.
async fn start(args: &[&str]) -> (tokio::process::Child, String) {
    let mut command = common::colloquy();
    command.arg("serve").args(args).env_remove("COLLOQUY_NATS_TOKEN");
    let mut child = common::spawn(command);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let ready = tokio::time::timeout(BOUND, lines.next_line()).await.expect("a ready line");
    let ready = ready.unwrap().expect("serve prints a line");
    let url = ready
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in `{ready}`"))
        .trim_end_matches(':')
        .to_owned();
    (child, url)
}

/// A session a test started and ran a turn on.
struct Turned {
    socket: Socket,
    node: Option<String>,
    session_id: String,
    /// The number of the last event read.
    last_seq: u64,
}

/// Starts a session at `url` and runs one turn over its WebSocket.
async fn one_turn(url: &str) -> Turned {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().timeout(BOUND).build().unwrap();
    let page = http.get(url).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let started: SessionStarted = http
        .post(format!("{url}v1/sessions"))
        .body(r#"{"v":1}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(started.agent, "demo");
    let ws =
        format!("{}v1/sessions/{}/ws", url.replacen("http://", "ws://", 1), started.session_id);
    let (mut socket, _) = tokio_tungstenite::connect_async(ws).await.expect("the socket opens");
    let frames = converse(&mut socket, "Hello").await;
    let last_seq = frames.iter().filter_map(event_seq).max().expect("events");
    Turned { socket, node: started.node, session_id: started.session_id, last_seq }
}

/// Sends `text` as a user turn (request 1), then waits for idle (request 2) once it is taken:
/// every frame read until the agent answered and is idle.
async fn converse(socket: &mut Socket, text: &str) -> Vec<ServerMessage> {
    let turn = serde_json::json!({"v": 1, "id": 1, "type": "user_turn", "text": text});
    socket.send(Message::text(turn.to_string())).await.unwrap();
    let (mut turn, mut idle, mut said) = (false, false, false);
    let mut frames = Vec::new();
    while !(idle && said) {
        let frame = tokio::time::timeout(BOUND, socket.next()).await.expect("a frame in time");
        let Some(Ok(Message::Text(text))) = frame else { panic!("the socket closed: {frame:?}") };
        let frame = ServerMessage::decode(&text).unwrap();
        match &frame {
            ServerMessage::Reply { id: Some(1), reply } => {
                turn = *reply == Reply::Ok;
                assert!(turn, "the turn is taken");
                // Requests run concurrently (docs/protocol.md#ordering): sent together, the
                // wait could reach the session before the turn and find it idle.
                let wait = r#"{"v":1,"id":2,"type":"wait_for_idle"}"#;
                socket.send(Message::text(wait)).await.unwrap();
            }
            ServerMessage::Reply { id: Some(2), .. } => idle = turn,
            ServerMessage::Event { event, .. } => {
                let event = serde_json::to_value(event).unwrap();
                said |= event["type"] == "x_conversation_item_added"
                    && event["item"]["role"] == "assistant";
            }
            _ => {}
        }
        frames.push(frame);
    }
    frames
}

/// The session's history (request 3).
async fn history(socket: &mut Socket) -> Vec<colloquy::chat::ChatItem> {
    socket.send(Message::text(r#"{"v":1,"id":3,"type":"history"}"#)).await.unwrap();
    loop {
        let frame = tokio::time::timeout(BOUND, socket.next()).await.expect("a frame in time");
        let Some(Ok(Message::Text(text))) = frame else { panic!("the socket closed: {frame:?}") };
        if let ServerMessage::Reply { id: Some(3), reply: Reply::History { items } } =
            ServerMessage::decode(&text).unwrap()
        {
            return items;
        }
    }
}

/// Sends SIGKILL and waits for the process to die.
async fn kill_9(mut child: tokio::process::Child) {
    let pid = Pid::from_raw(child.id().expect("running") as i32);
    kill(pid, Signal::SIGKILL).unwrap();
    tokio::time::timeout(BOUND, child.wait()).await.expect("it dies").unwrap();
}

/// An event frame's number.
fn event_seq(frame: &ServerMessage) -> Option<u64> {
    match frame {
        ServerMessage::Event { seq, .. } => Some(*seq),
        _ => None,
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends SIGTERM and checks the socket hears `server_shutdown` and the process exits 0.
async fn stop(mut child: tokio::process::Child, mut socket: Socket) {
    let pid = Pid::from_raw(child.id().expect("running") as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let mut closing = None;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout(BOUND, socket.next()).await {
        if let Message::Text(text) = frame
            && let Ok(ServerMessage::Closing { reason }) = ServerMessage::decode(&text)
        {
            closing = Some(reason);
        }
    }
    assert_eq!(closing.map(colloquy_protocol::ClosingReason::as_str), Some("server_shutdown"));
    let status = tokio::time::timeout(BOUND, child.wait()).await.expect("it stops").unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_its_url_runs_a_turn_and_stops_on_sigterm() {
    let (child, url) = start(&["--addr", "127.0.0.1:0"]).await;
    let turned = one_turn(&url).await;
    assert_eq!(turned.node, None);
    stop(child, turned.socket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_counts_its_sessions_on_its_own_port_and_a_metrics_address() {
    let mut command = common::colloquy();
    command.args(["serve", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]);
    let mut child = common::spawn(command);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let ready = tokio::time::timeout(BOUND, lines.next_line()).await.expect("a ready line");
    let ready = ready.unwrap().expect("serve prints a line");
    let urls: Vec<&str> = ready.split_whitespace().filter(|w| w.starts_with("http://")).collect();
    let (page, metrics) = match urls[..] {
        [page, metrics] => (page.trim_end_matches(':'), metrics),
        _ => panic!("a page and a metrics URL in `{ready}`"),
    };
    assert!(metrics.ends_with("/metrics"), "{ready}");
    let socket = one_turn(page).await.socket;
    let http = reqwest::Client::builder().timeout(BOUND).build().unwrap();
    let text = http.get(metrics).send().await.unwrap().text().await.unwrap();
    let started = text.lines().find(|l| l.starts_with("colloquy_sessions_started_total"));
    assert_eq!(started, Some("colloquy_sessions_started_total 1"), "{text}");
    let healthz = metrics.replace("/metrics", "/healthz");
    assert_eq!(http.get(&healthz).send().await.unwrap().status().as_u16(), 200);
    // The same figures on the serve port.
    let own = http.get(format!("{page}metrics")).send().await.unwrap().text().await.unwrap();
    assert!(own.lines().any(|l| l == "colloquy_sessions_started_total 1"), "{own}");
    stop(child, socket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_nats_places_sessions_on_a_node() {
    let nats = nats::NatsServer::start();
    let node = colloquy::cluster::Node::builder()
        .nats(nats.url())
        .name("n1")
        .llm(colloquy::llm::ScriptedLlm::new([]))
        .agent("demo", || colloquy::agent::Agent::new("demo", "You help."))
        .start()
        .await
        .expect("the node starts");
    let (child, url) = start(&["--addr", "127.0.0.1:0", "--nats", &nats.url()]).await;
    let turned = one_turn(&url).await;
    assert_eq!(turned.node.as_deref(), Some("n1"));
    stop(child, turned.socket).await;
    node.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_store_resumes_a_session_killed_with_sigkill_and_numbers_on() {
    let dir = std::env::temp_dir().join(format!("colloquy-serve-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sessions.db");
    let args = ["--addr", "127.0.0.1:0", "--store", file.to_str().unwrap()];
    let (child, url) = start(&args).await;
    let turned = one_turn(&url).await;
    // The reply's records are appended off the session's task, within milliseconds of it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_9(child).await;
    drop(turned.socket);

    let (child, url) = start(&args).await;
    let stored = stored_sessions(&url).await;
    let session = stored.iter().find(|s| s.session_id == turned.session_id).expect("listed");
    assert_eq!((session.closed.as_deref(), session.live), (None, false), "{session:?}");
    let ws = format!(
        "{}v1/sessions/{}/ws?after={}",
        url.replacen("http://", "ws://", 1),
        turned.session_id,
        turned.last_seq
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(ws).await.expect("it resumes");
    let frames = converse(&mut socket, "Hello again").await;
    assert!(matches!(frames.first(), Some(ServerMessage::Hello { .. })), "{frames:#?}");
    assert!(!frames.iter().any(|f| matches!(f, ServerMessage::Error(_))), "{frames:#?}");
    let numbers: Vec<u64> = frames.iter().filter_map(event_seq).collect();
    assert_eq!(numbers.first(), Some(&(turned.last_seq + 1)), "numbered on: {frames:#?}");
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "no gap: {numbers:?}");
    // The history kept: the turn before the kill, then this one.
    let items = history(&mut socket).await;
    let users: Vec<&str> = items
        .iter()
        .filter_map(|item| item.as_message())
        .filter(|m| m.role == colloquy::chat::Role::User)
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(users, ["Hello", "Hello again"]);
    stop(child, socket).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_at_a_sigkill_runs_again_and_ends_once_after_the_restart() {
    let dir = std::env::temp_dir().join(format!("colloquy-serve-doubt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sessions.db");
    let args = ["--addr", "127.0.0.1:0", "--store", file.to_str().unwrap()];
    let (child, url) = start(&args).await;
    let mut turned = one_turn(&url).await;
    // `book_flight` runs in the background for 3 s: killed in the middle of it.
    let frames = converse(&mut turned.socket, "Book me a flight to Paris").await;
    let last_seq = frames.iter().filter_map(event_seq).max().expect("events");
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_9(child).await;
    drop(turned.socket);

    let (child, url) = start(&args).await;
    let stored = stored_sessions(&url).await;
    assert_eq!(stored[0].calls_in_doubt, 1, "{stored:?}");
    let ws = format!(
        "{}v1/sessions/{}/ws?after={last_seq}",
        url.replacen("http://", "ws://", 1),
        turned.session_id
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(ws).await.expect("it resumes");
    let frames = converse(&mut socket, "Hello again").await;
    let events: Vec<serde_json::Value> = frames
        .iter()
        .filter_map(|frame| match frame {
            ServerMessage::Event { event, .. } => Some(serde_json::to_value(event).unwrap()),
            _ => None,
        })
        .collect();
    let resumed = events.iter().find(|e| e["type"] == "x_session_resumed").expect("resumed");
    let in_doubt = resumed["in_doubt"].as_array().unwrap();
    assert_eq!(in_doubt.len(), 1, "{resumed}");
    assert_eq!(
        (in_doubt[0]["name"].as_str(), in_doubt[0]["outcome"].as_str()),
        (Some("book_flight"), Some("rerun"))
    );
    let call = in_doubt[0]["call_id"].as_str().unwrap().to_owned();
    // The booking runs again (`rerun`, under its idempotency key) and ends once.
    let mut ended = events.iter().any(|e| is_end_of(e, &call));
    while !ended {
        let frame = tokio::time::timeout(BOUND, socket.next()).await.expect("a frame in time");
        let Some(Ok(Message::Text(text))) = frame else { panic!("the socket closed: {frame:?}") };
        if let ServerMessage::Event { event, .. } = ServerMessage::decode(&text).unwrap() {
            ended = is_end_of(&serde_json::to_value(event).unwrap(), &call);
        }
    }
    let items = history(&mut socket).await;
    let finals: Vec<_> = items
        .iter()
        .filter_map(|item| match item {
            colloquy::chat::ChatItem::FunctionCallOutput(output) => Some(output),
            _ => None,
        })
        .filter(|output| output.call_id == format!("{call}_final"))
        .collect();
    assert_eq!(finals.len(), 1, "{finals:#?}");
    assert!(!finals[0].is_error && finals[0].output.contains("confirmation"), "{finals:#?}");
    stop(child, socket).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The stored sessions the server at `url` lists.
async fn stored_sessions(url: &str) -> Vec<colloquy_protocol::StoredSession> {
    let http = reqwest::Client::builder().timeout(BOUND).build().unwrap();
    let listed: colloquy_protocol::SessionList =
        http.get(format!("{url}v1/sessions")).send().await.unwrap().json().await.unwrap();
    listed.stored.expect("the stored sessions are listed")
}

/// Whether `event` is the `tool_call_ended` of call `call`.
fn is_end_of(event: &serde_json::Value, call: &str) -> bool {
    event["type"] == "tool_call_ended" && event["call_id"] == call
}

#[tokio::test]
async fn serve_refuses_a_public_address_without_a_token() {
    let mut command = common::colloquy();
    command.args(["serve", "--addr", "0.0.0.0:0"]);
    let out = common::piped(command, "", BOUND).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("token"), "{}", out.stderr);
    let mut command = common::colloquy();
    command.args(["serve", "--token-env", "COLLOQUY_TEST_UNSET_TOKEN"]);
    command.env_remove("COLLOQUY_TEST_UNSET_TOKEN");
    let out = common::piped(command, "", BOUND).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("COLLOQUY_TEST_UNSET_TOKEN"), "{}", out.stderr);
    // Every web page is not an origin.
    let mut command = common::colloquy();
    command.args(["serve", "--addr", "127.0.0.1:0", "--allow-origin", "*"]);
    let out = common::piped(command, "", BOUND).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--allow-origin `*`"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    // An empty token opens nothing; one a browser cannot send is refused, and not shown.
    for (token, says) in [("", "empty"), ("s3cret with spaces", "letters, digits")] {
        let mut command = common::colloquy();
        command.args(["serve", "--addr", "0.0.0.0:0", "--token-env", "COLLOQUY_TEST_TOKEN"]);
        command.env("COLLOQUY_TEST_TOKEN", token);
        let out = common::piped(command, "", BOUND).await;
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stderr.contains(says), "{}", out.stderr);
        assert!(token.is_empty() || !out.stderr.contains(token), "{}", out.stderr);
    }
}
