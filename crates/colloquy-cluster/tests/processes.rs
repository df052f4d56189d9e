//! Nodes in processes of their own, killed or stopped as a machine fails
//! (docs/cluster.md#failure): two node processes and a host (this test), sessions on both;
//! `kill -9` of one, and only its sessions report `x_node_lost` within `lost_after` and a
//! margin, the other's carry on, nothing of the killed one is left running; `SIGSTOP` of one
//! past `lost_after` with work under way, and once continued it stops the sessions its hosts
//! gave up without a word: nothing of theirs is published after the loss marker.
//!
//! A node process is this test binary run again on its ignored test [`node_process`] with the
//! node's settings in its environment: no other binary to build, and a node with a scripted
//! model, as in the other tests. Linux only: the checks read `/proc`.
#![cfg(target_os = "linux")]

mod common;
#[path = "common/group.rs"]
mod group;
#[path = "common/node_process.rs"]
mod node_process;

use std::time::{Duration, Instant};

use colloquy_cluster::{Cluster, ClusterError, RemoteEvents, RemoteSession, StartOptions};
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse, ToolChoice};
use colloquy_model::{Agent, EventKind, FunctionTool, RunContext, ToolError};
use common::{
    AT_ONCE, BOUND, LOST_AFTER, MARGIN, NatsServer, eventually, node_builder, raw_events, raw_type,
};
use group::group_members;
use nix::sys::signal::Signal;
use node_process::NodeProcess;
use serde_json::Value;

const NATS_VAR: &str = "COLLOQUY_TEST_NODE_NATS";
const NAME_VAR: &str = "COLLOQUY_TEST_NODE_NAME";
const LOST_AFTER_VAR: &str = "COLLOQUY_TEST_NODE_LOST_AFTER_MS";

/// The node process: runs a node until it is drained or killed. Does nothing when run by
/// hand (`--ignored`) without its environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the node process the tests below start"]
async fn node_process() {
    let (Ok(url), Ok(name), Ok(lost_after)) =
        (std::env::var(NATS_VAR), std::env::var(NAME_VAR), std::env::var(LOST_AFTER_VAR))
    else {
        return;
    };
    let lost_after = Duration::from_millis(lost_after.parse().expect("milliseconds"));
    // No journals: these tests are about a session lost with its node.
    let report = node_builder(&url, &name)
        .durable(false)
        .lost_after(lost_after)
        .agent("busy", busy)
        .session(
            |builder, start| if start.agent == "busy" { builder.llm(busy_llm()) } else { builder },
        )
        .run()
        .await
        .expect("the node runs");
    eprintln!("node drained: {report:?}");
}

/// An agent always at work: its model calls `lookup` at every step it may (three a turn),
/// and each call takes 700 ms.
fn busy() -> Agent {
    let lookup =
        FunctionTool::new("lookup", "Looks the order up.", |_ctx: RunContext, _: Value| async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            Ok::<_, ToolError>("still looking".to_owned())
        });
    Agent::new("busy", "You look orders up.").tool(lookup)
}

fn busy_llm() -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(|index, request| {
        let reply = ScriptedResponse::text("Looking.");
        if request.tool_choice == Some(ToolChoice::None) {
            return reply;
        }
        reply.with_call(ScriptedCall::new(format!("c{index}"), "lookup", "{}"))
    })
}

/// Node `name`, a process of its own on `server`.
fn spawn_node(server: &NatsServer, name: &str) -> NodeProcess {
    NodeProcess::start(
        "node_process",
        &[
            (NATS_VAR, server.url()),
            (NAME_VAR, name.to_owned()),
            (LOST_AFTER_VAR, LOST_AFTER.as_millis().to_string()),
        ],
    )
}

async fn host(server: &NatsServer) -> Cluster {
    Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.expect("the host")
}

async fn both_nodes_live(host: &Cluster) {
    eventually(BOUND, "both nodes announce themselves", || async {
        let nodes = host.nodes().await.ok()?;
        (nodes.iter().filter(|n| n.lease > 0).count() == 2).then_some(())
    })
    .await;
}

/// Two sessions on `node`, each with a reader.
async fn sessions_on(host: &Cluster, node: &str) -> Vec<(RemoteSession, RemoteEvents)> {
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let session = host.start_session_on(node, "support", StartOptions::new()).await.unwrap();
        let events = session.subscribe().await.unwrap();
        answers(&session).await;
        sessions.push((session, events));
    }
    sessions
}

async fn answers(session: &RemoteSession) {
    session.user_turn("Where is my order?").await.expect("a turn");
    session.wait_for_idle().await.expect("idle");
}

/// Reads `events` until `NodeLost` or their end; whether it was `NodeLost`.
async fn reads_to_node_lost(events: &mut RemoteEvents, bound: Duration) -> bool {
    let read = async {
        while let Some(item) = events.recv().await {
            if let Err(ClusterError::NodeLost { .. }) = item {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(bound, read).await.unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_node_loses_its_sessions_only_and_leaves_nothing_running() {
    let server = NatsServer::start();
    let host = host(&server).await;
    let mut doomed = spawn_node(&server, "doomed");
    let mut spared = spawn_node(&server, "spared");
    both_nodes_live(&host).await;
    let mut lost = sessions_on(&host, "doomed").await;
    let mut kept = sessions_on(&host, "spared").await;
    let group = doomed.pid();
    assert_eq!(group_members(group.as_raw()), [group.as_raw()], "the node process runs alone");

    let killed = Instant::now();
    doomed.signal(Signal::SIGKILL);
    for (session, events) in &mut lost {
        assert!(reads_to_node_lost(events, LOST_AFTER + MARGIN).await, "{}", session.id());
        eprintln!("x_node_lost {:?} after kill -9 (lost_after {LOST_AFTER:?})", killed.elapsed());
        let asked = Instant::now();
        let err = session.history().await.unwrap_err();
        assert_eq!(err, ClusterError::NodeLost { node: "doomed".into() });
        assert!(asked.elapsed() < AT_ONCE, "{:?}", asked.elapsed());
    }
    assert!(killed.elapsed() < LOST_AFTER + MARGIN, "{:?}", killed.elapsed());
    assert!(!doomed.wait().success());
    assert!(group_members(group.as_raw()).is_empty(), "nothing of the killed node runs");

    for (session, events) in &mut kept {
        assert!(!session.is_node_lost());
        answers(session).await;
        assert!(!reads_to_node_lost(events, Duration::from_millis(200)).await);
    }
    // Its sessions done, the spared node drains on request, and its process ends.
    for (session, _) in &kept {
        session.close().await.unwrap();
    }
    host.drain_node("spared").await.unwrap();
    assert!(spared.wait().success());
    assert!(group_members(spared.pid().as_raw()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_that_continues_stops_the_sessions_its_hosts_gave_up() {
    let server = NatsServer::start();
    let host = host(&server).await;
    let stalled = spawn_node(&server, "stalled");
    let _other = spawn_node(&server, "other");
    both_nodes_live(&host).await;
    let lease = host.nodes().await.unwrap().into_iter().find(|n| n.name == "stalled").unwrap();
    let mut sessions = sessions_on(&host, "stalled").await;
    // Work under way when the node stops: a turn whose tool calls run for seconds.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let session = host.start_session_on("stalled", "busy", StartOptions::new()).await.unwrap();
        let mut events = session.subscribe().await.unwrap();
        session.user_turn("Where is my order?").await.unwrap();
        tool_running(&mut events).await;
        busy.push((session, events));
    }
    sessions.extend(busy);

    stalled.signal(Signal::SIGSTOP);
    for (session, events) in &mut sessions {
        assert!(reads_to_node_lost(events, LOST_AFTER + MARGIN).await, "{}", session.id());
    }
    stalled.signal(Signal::SIGCONT);

    // Back: it registers under a new lease and holds none of the sessions it was given up on.
    eventually(BOUND, "the node registers again with no session", || async {
        let nodes = host.nodes().await.ok()?;
        let back = nodes.into_iter().find(|n| n.name == "stalled" && n.lease > lease.lease)?;
        (back.sessions == 0).then_some(())
    })
    .await;
    // Whatever it still had under way would have landed by now: its tools' waits ran out
    // while it was stopped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (session, _) in &sessions {
        // Nothing of the session after the host's marker: no tool result, no reply, no close.
        let raw = raw_events(&server.url(), session.id()).await;
        let types: Vec<&str> = raw.iter().map(raw_type).collect();
        let marker = types.iter().position(|t| *t == "x_node_lost").expect("the marker");
        assert_eq!(marker + 1, types.len(), "events after the marker: {types:?}");
        let err = session.user_turn("hello?").await.unwrap_err();
        assert_eq!(err, ClusterError::NodeLost { node: "stalled".into() });
        let found = host.session(session.id()).await.expect("a lost session is still found");
        assert!(found.is_node_lost());
    }
}

/// Reads `events` until a tool call has started.
async fn tool_running(events: &mut RemoteEvents) {
    let read = async {
        while let Some(Ok(event)) = events.recv().await {
            if matches!(event.event.kind, EventKind::ToolCallStarted { .. }) {
                return;
            }
        }
        panic!("the events ended before a tool call started");
    };
    tokio::time::timeout(BOUND, read).await.expect("a tool call starts");
}
