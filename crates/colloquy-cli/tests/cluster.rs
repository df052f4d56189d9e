//! `colloquy node`, `colloquy nodes` and `colloquy chat --nats` as processes against a real
//! nats-server on 127.0.0.1 (the pinned binary of `scripts/install-nats.sh`, started by each
//! test), the nodes on the scripted model. Real processes and sockets: the real clock, every
//! wait bounded.

mod common;
// The cluster crate's harness: one way to start a nats-server for every test that needs one.
#[cfg(target_os = "linux")]
#[path = "../../colloquy-cluster/tests/common/group.rs"]
mod group;
#[path = "../../colloquy-cluster/tests/common/server.rs"]
mod nats;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Output;
use nats::NatsServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// The bound on anything a test waits for.
const BOUND: Duration = Duration::from_secs(20);

/// A `colloquy node` process; what it writes is collected as it comes.
struct NodeProcess {
    child: tokio::process::Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The tasks reading them, done once the pipes close.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl NodeProcess {
    /// Starts node `name` on `server`'s URL with `extra` flags and waits for its ready line.
    async fn start(server: &NatsServer, name: &str, extra: &[&str]) -> Self {
        let node = Self::spawn(&server.url(), name, extra, &[]);
        node.wait_for(&format!("node {name} ready")).await;
        node
    }

    fn spawn(url: &str, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = common::colloquy();
        command.args(["node", "--nats", url, "--name", name]).args(extra);
        command.env_remove("COLLOQUY_NATS_TOKEN").envs(env.iter().copied());
        // A group of its own: whatever it started is found, and killed, with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = common::spawn(command);
        let (stdout, out_reader) = collect(child.stdout.take().expect("stdout is piped"));
        let (stderr, err_reader) = collect(child.stderr.take().expect("stderr is piped"));
        let readers = vec![out_reader, err_reader];
        Self { child, stdout, stderr, readers }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits (bounded) until the node has written `text`.
    async fn wait_for(&self, text: &str) {
        let start = Instant::now();
        while !self.stdout().contains(text) {
            assert!(
                start.elapsed() < BOUND,
                "`{text}` not written within {BOUND:?}:\n{}\n{}",
                self.stdout(),
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("the node runs") as i32)
    }

    fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("the signal is sent");
    }

    /// Waits (at most `bound`) for the node to exit: its status and what it wrote.
    async fn exit(mut self, bound: Duration) -> (Option<i32>, String, String) {
        let status = tokio::time::timeout(bound, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!("the node did not exit within {bound:?}:\n{}", self.stdout())
            })
            .expect("the node ran");
        // Everything it wrote is read once its pipes close (anything it started shares them).
        for reader in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(BOUND, reader).await;
        }
        (status.code(), self.stdout(), self.stderr.lock().unwrap().clone())
    }
}

/// Reads `pipe` into a string, in a task (which ends when the pipe closes).
fn collect(
    pipe: impl AsyncRead + Unpin + Send + 'static,
) -> (Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let into = Arc::clone(&text);
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = into.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    (text, reader)
}

/// Runs `colloquy ARGS` with `input` on stdin and `env` set, to its end (bounded).
async fn colloquy(args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
    let mut command = common::colloquy();
    command.args(args).env_remove("COLLOQUY_NATS_TOKEN").envs(env.iter().copied());
    common::piped(command, input, BOUND).await
}

/// `GET path` on `addr` over HTTP/1.0: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("the metrics server listens");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
}

/// The value of the sample `name` (no labels) in an OpenMetrics text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_are_listed_and_a_piped_chat_runs_its_turn_on_the_one_named() {
    let server = NatsServer::start();
    let url = server.url();
    let n1 = NodeProcess::start(&server, "n1", &[]).await;
    let n2 = NodeProcess::start(&server, "n2", &["--agent", "demo", "--agent", "travel"]).await;
    assert!(n2.stdout().contains(&format!("node n2 ready on {url}: agents demo, travel")));

    let listed = colloquy(&["nodes", "--nats", &url, "--json"], "", &[]).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let nodes: serde_json::Value = serde_json::from_str(&listed.stdout).expect("JSON");
    let names: Vec<&str> =
        nodes.as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["n1", "n2"], "{}", listed.stdout);
    assert_eq!(nodes[1]["agents"], serde_json::json!(["demo", "travel"]));
    let table = colloquy(&["nodes", "--nats", &url], "", &[]).await;
    assert!(table.stdout.starts_with("NODE  AGENTS"), "{}", table.stdout);

    let chat = colloquy(
        &["chat", "--nats", &url, "--node", "n2", "--agent", "travel"],
        "hello\nwhat's the weather in Rome?\n/tools\n",
        &[],
    )
    .await;
    assert_eq!(chat.code, Some(0), "{}", chat.stderr);
    let expected = [
        "colloquy chat with agent travel on node n2 (",
        "agent › You said \"hello\".",
        "agent › Let me check the weather in Rome.",
        "  tool ▸ get_weather #1 started",
        "  tool ✓ get_weather #1 done: Rome: day 1: sunny, 24°C",
        "agent › Here is what I have: Rome: day 1: sunny, 24°C",
        "tools (on the node):",
        "  get_weather",
        "no call running",
        "── session closed: close ──",
    ];
    let mut rest = chat.stdout.as_str();
    for line in expected {
        let at = rest.find(line).unwrap_or_else(|| panic!("`{line}` missing in:\n{}", chat.stdout));
        rest = &rest[at + line.len()..];
    }
    n2.wait_for("closed: close").await;
    assert!(n2.stdout().contains("started"), "{}", n2.stdout());
    assert!(!n1.stdout().contains("session "), "n1 took no session:\n{}", n1.stdout());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_node_which_closes_its_sessions_and_exits_0_within_the_bound() {
    let server = NatsServer::start();
    let url = server.url();
    let node = NodeProcess::start(&server, "n1", &["--drain-timeout", "1s"]).await;
    // A chat holds a session on the node: its input stays open.
    let mut command = common::colloquy();
    command.args(["chat", "--nats", &url]);
    let mut chat = common::spawn(command);
    let mut input = chat.stdin.take().expect("stdin is piped");
    input.write_all(b"hello\n").await.unwrap();
    node.wait_for("started").await;
    // The chat's first reply came through the session's command and event subjects, so the
    // node serves the session and counts it live ("started" is printed as it starts, before).
    let mut lines = BufReader::new(chat.stdout.take().expect("stdout is piped")).lines();
    let mut text = String::new();
    let first_reply = async {
        while let Some(line) = lines.next_line().await.expect("the chat's output reads") {
            text.push_str(&line);
            text.push('\n');
            if line.contains("agent ›") {
                return;
            }
        }
    };
    tokio::time::timeout(BOUND, first_reply).await.expect("the chat's first reply");

    let signalled = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, stdout, stderr) = node.exit(BOUND).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // The drain timeout, then the close and the last events: well within the bound.
    assert!(signalled.elapsed() < Duration::from_secs(10), "{:?}", signalled.elapsed());
    let drained = [
        "node n1 draining: 1 live",
        "closed: node_draining",
        // Alone: no other node takes its session, which is closed.
        "node n1 drained: 0 moved to other nodes, 0 ended by themselves, 1 closed",
    ];
    for line in drained {
        assert!(stdout.contains(line), "`{line}` missing in:\n{stdout}");
    }
    // The chat sees its session close and leaves by itself.
    let rest = async {
        while let Some(line) = lines.next_line().await.expect("the chat's output reads") {
            text.push_str(&line);
            text.push('\n');
        }
    };
    tokio::time::timeout(BOUND, rest).await.expect("the chat ends once its session is closed");
    let out = tokio::time::timeout(BOUND, chat.wait_with_output())
        .await
        .expect("the chat ends once its session is closed")
        .expect("the chat ran");
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("── session closed: node_draining ──"), "{text}");
    drop(input);
    let listed = colloquy(&["nodes", "--nats", &url, "--json"], "", &[]).await;
    assert_eq!(listed.stdout.trim(), "[]", "a drained node leaves the bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_clearly_and_never_printed() {
    const TOKEN: &str = "s3cret-t0ken";
    const WRONG: &str = "wr0ng-t0ken";
    let server = NatsServer::start_with(&["--auth", TOKEN]);
    let url = server.url();

    let node = NodeProcess::spawn(&url, "n1", &["--nats-token-env", "TOKEN"], &[("TOKEN", WRONG)]);
    let (code, stdout, stderr) = node.exit(BOUND).await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains(WRONG) && !text.contains(TOKEN), "{text}");
    }

    let listed = colloquy(&["nodes", "--nats", &url], "", &[("COLLOQUY_NATS_TOKEN", WRONG)]).await;
    assert_eq!(listed.code, Some(1));
    assert!(listed.stderr.contains("refused the credentials"), "{}", listed.stderr);
    assert!(!listed.stderr.contains(WRONG));
    let chat =
        colloquy(&["chat", "--nats", &url], "hello\n", &[("COLLOQUY_NATS_TOKEN", WRONG)]).await;
    assert_eq!(chat.code, Some(1));
    assert!(chat.stderr.contains("refused the credentials") && !chat.stderr.contains(WRONG));

    // A token in the URL is refused before anything connects, and not repeated.
    let in_url = url.replace("nats://", &format!("nats://{TOKEN}@"));
    let refused = colloquy(&["nodes", "--nats", &in_url], "", &[]).await;
    assert_eq!(refused.code, Some(2));
    assert!(refused.stderr.contains("--nats-token-env") && !refused.stderr.contains(TOKEN));

    // The right token, from the default variable.
    let node = NodeProcess::spawn(&url, "n1", &[], &[("COLLOQUY_NATS_TOKEN", TOKEN)]);
    node.wait_for("node n1 ready").await;
    assert!(!node.stdout().contains(TOKEN));
    let listed = colloquy(&["nodes", "--nats", &url], "", &[("COLLOQUY_NATS_TOKEN", TOKEN)]).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(listed.stdout.contains("n1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_from_the_environment_reach_nats_and_never_show() {
    const PASSWORD: &str = "s3cret-pa55";
    const WRONG: &str = "wr0ng-pa55";
    let server = NatsServer::start_with(&["--user", "node", "--pass", PASSWORD]);
    let url = server.url();
    let user = ["--nats-user", "node", "--nats-password-env", "NATS_PASSWORD"];

    let node = NodeProcess::spawn(&url, "n1", &user, &[("NATS_PASSWORD", PASSWORD)]);
    node.wait_for("node n1 ready").await;
    let args = ["nodes", "--nats", &url, user[0], user[1], user[2], user[3]];
    let listed = colloquy(&args, "", &[("NATS_PASSWORD", PASSWORD)]).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(listed.stdout.contains("n1") && !listed.stdout.contains(PASSWORD));

    let refused = colloquy(&args, "", &[("NATS_PASSWORD", WRONG)]).await;
    assert_eq!(refused.code, Some(1));
    assert!(refused.stderr.contains("refused the credentials"), "{}", refused.stderr);
    assert!(!refused.stderr.contains(WRONG) && !refused.stderr.contains(PASSWORD));
    // A user without the variable that holds its password is a usage error.
    let unset = colloquy(&args, "", &[]).await;
    assert_eq!(unset.code, Some(2), "{}", unset.stderr);
    assert!(unset.stderr.contains("NATS_PASSWORD"), "{}", unset.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_addr_serves_metrics_and_health_and_counts_each_session_started() {
    let server = NatsServer::start();
    let url = server.url();
    let node = NodeProcess::start(&server, "n1", &["--metrics-addr", "127.0.0.1:0"]).await;
    let ready = node.stdout();
    let addr = ready
        .split("metrics on http://")
        .nth(1)
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address in: {ready}"))
        .to_owned();
    let (status, body) = get(&addr, "/healthz");
    assert!(status.contains("200"), "{status}");
    assert_eq!(body, "ok");
    let started = "colloquy_sessions_started_total";
    let (_, text) = get(&addr, "/metrics");
    assert_eq!(sample(&text, started), Some(0.0), "{text}");

    let chat = colloquy(&["chat", "--nats", &url], "what's the weather in Paris?\n", &[]).await;
    assert_eq!(chat.code, Some(0), "{}", chat.stderr);
    node.wait_for("closed: close").await;
    let (_, text) = get(&addr, "/metrics");
    assert_eq!(sample(&text, started), Some(1.0), "{text}");
    // The call came in the session's first turn: watched from its start, it has its tool.
    let tool = r#"colloquy_tool_calls_ended_total{tool="get_weather",status="done"} 1"#;
    assert!(text.contains(tool), "{text}");
    assert!(text.contains(r#"colloquy_sessions_closed_total{reason="close"} 1"#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_nodes_says_so_and_exits_1_within_the_bound() {
    let start = Instant::now();
    // Port 1: nothing listens there.
    let out = colloquy(&["nodes", "--nats", "nats://127.0.0.1:1"], "", &[]).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("cannot connect to NATS at nats://127.0.0.1:1"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    assert!(start.elapsed() < Duration::from_secs(11), "{:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_shows_each_reply_once_whether_the_node_streams_its_text_or_not() {
    let server = NatsServer::start();
    let url = server.url();
    let _streams = NodeProcess::start(&server, "streams", &[]).await;
    let _whole = NodeProcess::start(&server, "whole", &["--no-agent-text"]).await;
    for node in ["streams", "whole"] {
        let input = "hello\nwhat's the weather in Rome?\n";
        let chat = colloquy(&["chat", "--nats", &url, "--node", node], input, &[]).await;
        assert_eq!(chat.code, Some(0), "{}", chat.stderr);
        let agent: Vec<String> =
            chat.stdout.lines().filter(|l| l.contains("agent ›")).map(String::from).collect();
        assert_eq!(
            agent,
            [
                "agent › You said \"hello\". I am the scripted model: ask me about the weather, \
                 to book a flight, or say bye.",
                "agent › Let me check the weather in Rome.",
                "agent › Here is what I have: Rome: day 1: sunny, 24°C",
            ],
            "{node}:\n{}",
            chat.stdout
        );
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_node_process_loses_its_sessions_only_and_leaves_nothing_running() {
    use colloquy::cluster::{Cluster, ClusterError, RemoteEvents, RemoteSession, StartOptions};
    use group::group_members;

    const LOST_AFTER: Duration = Duration::from_secs(2);
    const MARGIN: Duration = Duration::from_secs(2);
    let server = NatsServer::start();
    // No journals: their sessions are lost with them (a durable node's move: below).
    let lost_after = ["--lost-after", "2s", "--no-durable"];
    let doomed = NodeProcess::start(&server, "doomed", &lost_after).await;
    let spared = NodeProcess::start(&server, "spared", &lost_after).await;
    let host = Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.unwrap();
    let mut sessions: Vec<(RemoteSession, RemoteEvents)> = Vec::new();
    for node in ["doomed", "doomed", "spared", "spared"] {
        let session = host.start_session_on(node, "demo", StartOptions::new()).await.unwrap();
        let events = session.subscribe().await.unwrap();
        session.user_turn("hello").await.unwrap();
        session.wait_for_idle().await.unwrap();
        sessions.push((session, events));
    }
    let (mut lost, mut kept) = (sessions, Vec::new());
    kept.extend(lost.drain(2..));
    let group = doomed.pid();
    assert_eq!(group_members(group.as_raw()), [group.as_raw()], "the node process runs alone");

    let killed = Instant::now();
    doomed.signal(Signal::SIGKILL);
    for (session, events) in &mut lost {
        let read = async {
            while let Some(item) = events.recv().await {
                if let Err(ClusterError::NodeLost { node }) = item {
                    return Some(node);
                }
            }
            None
        };
        let node = tokio::time::timeout(LOST_AFTER + MARGIN, read).await;
        assert_eq!(node.ok().flatten().as_deref(), Some("doomed"), "{}", session.id());
        let err = session.history().await.unwrap_err();
        assert_eq!(err, ClusterError::NodeLost { node: "doomed".into() });
    }
    assert!(killed.elapsed() < LOST_AFTER + MARGIN, "{:?}", killed.elapsed());
    let (code, _, _) = doomed.exit(BOUND).await;
    assert_eq!(code, None, "killed by a signal");
    assert!(group_members(group.as_raw()).is_empty(), "nothing of the killed node runs");

    for (session, _) in &kept {
        assert!(!session.is_node_lost());
        session.user_turn("hello again").await.expect("the spared node answers");
        session.wait_for_idle().await.unwrap();
        session.close().await.unwrap();
    }
    let group = spared.pid();
    spared.signal(Signal::SIGTERM);
    let (code, out, _) = spared.exit(BOUND).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(group_members(group.as_raw()).is_empty(), "nothing of the spared node runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_node_is_lost_says_so_and_exits_1() {
    let server = NatsServer::start();
    let url = server.url();
    let node = NodeProcess::start(&server, "n1", &["--lost-after", "2s", "--no-durable"]).await;
    // A chat holds a session on the node: its input stays open.
    let mut command = common::colloquy();
    command.args(["chat", "--nats", &url, "--lost-after", "2s"]);
    let mut chat = common::spawn(command);
    let mut input = chat.stdin.take().expect("stdin is piped");
    input.write_all(b"hello\n").await.unwrap();
    node.wait_for("started").await;
    node.signal(Signal::SIGKILL);
    let out = tokio::time::timeout(BOUND, chat.wait_with_output())
        .await
        .expect("the chat ends once its node is lost")
        .expect("the chat ran");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("colloquy chat: the session is lost: node `n1` is lost"), "{stderr}");
    drop(input);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_durable_node_is_killed_says_it_moved_and_goes_on() {
    let server = NatsServer::start();
    let args = ["--lost-after", "2s"];
    let n1 = NodeProcess::start(&server, "n1", &args).await;
    let _n2 = NodeProcess::start(&server, "n2", &args).await;
    let url = server.url();
    let chat_args = ["chat", "--nats", &url, "--lost-after", "2s", "--node", "n1"];
    let mut chat = common::Driven::start(&chat_args).await;
    chat.send("hello").await;
    chat.wait_for("You said").await;
    // The reply is on the server before the kill (docs/durability.md#when-a-record-is-durable).
    tokio::time::sleep(Duration::from_millis(500)).await;
    n1.signal(Signal::SIGKILL);
    chat.wait_for("── moved from n1 to n2 ──").await;
    chat.send("what's the weather in Rome?").await;
    chat.wait_for("Rome: day 1: sunny").await;
    chat.close_input();
    let (code, out) = chat.end().await;
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("is lost"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_of_both_nodes_moves_the_chat_and_closes_nothing() {
    let server = NatsServer::start();
    let n1 = NodeProcess::start(&server, "n1", &[]).await;
    let n2 = NodeProcess::start(&server, "n2", &[]).await;
    let url = server.url();
    let mut chat = common::Driven::start(&["chat", "--nats", &url, "--node", "n1"]).await;
    chat.send("hello").await;
    chat.wait_for("You said").await;

    // n1 is deployed again: drained (its session moves to n2), then back.
    n1.signal(Signal::SIGTERM);
    let (code, stdout, stderr) = n1.exit(BOUND).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("node n1 drained: 1 moved to other nodes"), "{stdout}");
    chat.wait_for("── moved from n1 to n2 ──").await;
    chat.send("what's the weather in Rome?").await;
    chat.wait_for("Rome: day 1: sunny").await;
    let _n1 = NodeProcess::start(&server, "n1", &[]).await;

    // Then n2: the session moves back to the new n1.
    n2.signal(Signal::SIGTERM);
    let (code, stdout, stderr) = n2.exit(BOUND).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("node n2 drained: 1 moved to other nodes"), "{stdout}");
    chat.wait_for("── moved from n2 to n1 ──").await;
    chat.send("what's the weather in Paris?").await;
    chat.wait_for("Here is what I have: Paris").await;
    chat.close_input();
    let (code, out) = chat.end().await;
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("session closed: node_draining"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_nodes_session_survives_its_kill_9_on_another_durable_node() {
    use colloquy::chat::ChatItem;
    use colloquy::cluster::{Cluster, StartOptions};

    let server = NatsServer::start();
    let args = ["--lost-after", "2s"];
    let doomed = NodeProcess::start(&server, "doomed", &args).await;
    let _spared = NodeProcess::start(&server, "spared", &args).await;
    let host =
        Cluster::builder(server.url()).lost_after(Duration::from_secs(2)).connect().await.unwrap();
    let nodes = host.nodes().await.unwrap();
    assert!(nodes.len() == 2 && nodes.iter().all(|n| n.durable), "{nodes:?}");
    let session = host.start_session_on("doomed", "demo", StartOptions::new()).await.unwrap();
    session.user_turn("hello").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let id = session.id().to_owned();
    // The reply on the server before the kill: a crash loses the last few milliseconds of a
    // journal (docs/durability.md#when-a-record-is-durable), which this test is not about.
    let (url, journal) = (server.url(), id.clone());
    let stored = tokio::task::spawn_blocking(move || {
        use colloquy::store::SessionStore;
        let store = colloquy::cluster::JetStreamStore::connect(url).expect("the journals");
        let stored_by = Instant::now() + BOUND;
        while Instant::now() < stored_by {
            let entries = store.load(&journal).unwrap_or_default();
            if serde_json::to_string(&entries).unwrap().contains("You said") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    assert!(stored.await.unwrap(), "the reply reached the journal");

    doomed.signal(Signal::SIGKILL);
    // Nothing to call: the host finds the node lost and moves the session.
    let moved_by = Instant::now() + BOUND;
    while session.node() != "spared" {
        assert!(!session.is_node_lost(), "the session was lost with its node");
        assert!(Instant::now() < moved_by, "the host never moved the session");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let moved = session;
    moved.user_turn("what's the weather in Rome?").await.unwrap();
    moved.wait_for_idle().await.unwrap();
    let history = moved.history().await.unwrap();
    let texts: Vec<String> =
        history.iter().filter_map(ChatItem::as_message).map(|m| m.text.clone()).collect();
    assert_eq!(texts[0], "hello", "{texts:?}");
    assert!(texts[1].starts_with("You said \"hello\"."), "the first node's reply: {texts:?}");
    let last = texts.last().map(String::as_str);
    assert_eq!(last, Some("Here is what I have: Rome: day 1: sunny, 24°C"), "{texts:?}");
    moved.close().await.unwrap();
}
