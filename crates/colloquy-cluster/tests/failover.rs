//! A lost node's sessions move to another (docs/cluster.md#moves): nodes that keep their
//! sessions' journals on the NATS server (`JetStreamStore`), one of them lost, and the session
//! moved by its host with nothing to call — history kept, the next turn answered there, one
//! event stream numbered on through `x_session_moved`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use colloquy_cluster::{
    Cluster, ClusterError, JetStreamStore, NodeHandle, RemoteEvents, StartOptions,
};
use colloquy_model::{ChatItem, EventKind};
use colloquy_store::SessionStore;
use common::{BOUND, LOST_AFTER, NatsServer, REPLY, eventually, node_builder};

/// A node as the builder makes it by default: durable, its journals on the server.
async fn durable_node(server: &NatsServer, name: &str) -> NodeHandle {
    node_builder(&server.url(), name)
        .durable(true)
        .lost_after(LOST_AFTER)
        .start()
        .await
        .unwrap_or_else(|e| panic!("node {name} starts: {e}"))
}

/// The events read until `wanted` is seen (or the bound), each with its index.
async fn read_until(
    events: &mut RemoteEvents,
    wanted: impl Fn(&EventKind) -> bool,
) -> Vec<(u64, EventKind)> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + BOUND;
    while let Ok(Some(item)) = tokio::time::timeout_at(deadline, events.recv()).await {
        let Ok(event) = item else { continue };
        let done = wanted(&event.event.kind);
        seen.push((event.index, event.event.kind));
        if done {
            break;
        }
    }
    seen
}

fn texts(history: &[ChatItem]) -> Vec<String> {
    history.iter().filter_map(|i| i.as_message().map(|m| m.text.clone())).collect()
}

/// Both nodes durable, and a host that sees them so.
async fn two_durable_nodes(server: &NatsServer) -> (NodeHandle, NodeHandle, Cluster) {
    let n1 = durable_node(server, "n1").await;
    let n2 = durable_node(server, "n2").await;
    let host = Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.unwrap();
    eventually(BOUND, "both nodes announce themselves durable", || async {
        let nodes = host.nodes().await.ok()?;
        (nodes.iter().filter(|n| n.durable).count() == 2).then_some(())
    })
    .await;
    (n1, n2, host)
}

/// The indices read are 1, 2, 3… with no gap and no duplicate.
fn assert_numbered(seen: &[(u64, EventKind)]) {
    let indices: Vec<u64> = seen.iter().map(|(i, _)| *i).collect();
    let expected: Vec<u64> = (1..=indices.len() as u64).collect();
    assert_eq!(indices, expected, "{seen:?}");
}

/// The session's next turn is answered on n2 with its history from n1, and its one event
/// stream, read from its start, numbers every event once through the move: its events.
async fn goes_on_at_n2(
    session: &colloquy_cluster::RemoteSession,
    events: &mut RemoteEvents,
) -> Vec<(u64, EventKind)> {
    session.user_turn("And the invoice?").await.expect("the turn reaches the moved session");
    eventually(BOUND, "the host sees the session on n2", || async {
        (session.node() == "n2").then_some(())
    })
    .await;
    assert!(!session.is_node_lost());
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    assert_eq!(texts(&history), ["Where is my order?", REPLY, "And the invoice?", REPLY]);
    let done = |k: &EventKind| matches!(k, EventKind::SpeechDone { .. });
    let seen = [read_until(events, done).await, read_until(events, done).await].concat();
    assert_numbered(&seen);
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_nodes_session_moves_by_itself_and_its_handle_keeps_working() {
    let server = NatsServer::start();
    let (n1, _n2, host) = two_durable_nodes(&server).await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let id = session.id().to_owned();
    let mut events = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // A live session is not taken from its node.
    let refused = host.resume_session(&id).await.unwrap_err();
    assert!(matches!(refused, ClusterError::StartFailed { .. }), "{refused}");

    drop(n1);
    eventually(BOUND, "the host finds n1 lost", || async {
        (session.is_moving() || session.node() == "n2").then_some(())
    })
    .await;
    // Nothing new to call: the next turn waits for the move and is answered on n2.
    let seen = goes_on_at_n2(&session, &mut events).await;
    let moved = seen.iter().find_map(|(_, k)| match k {
        EventKind::SessionMoved { from, to, calls_in_doubt } => Some((from, to, calls_in_doubt)),
        _ => None,
    });
    let (from, to, in_doubt) = moved.unwrap_or_else(|| panic!("x_session_moved in {seen:?}"));
    assert_eq!((from.as_str(), to.as_str()), ("n1", "n2"));
    assert!(in_doubt.is_empty(), "{in_doubt:?}");
    assert!(
        !seen.iter().any(|(_, k)| matches!(k, EventKind::SessionResumed { .. })),
        "a moved session says so once: {seen:?}"
    );
    let url = server.url();
    let store = tokio::task::spawn_blocking(move || JetStreamStore::connect(url));
    let store = Arc::new(store.await.unwrap().expect("the journals"));
    let listed = |store: &Arc<JetStreamStore>| {
        let store = Arc::clone(store);
        async move { tokio::task::spawn_blocking(move || store.list()).await.unwrap().unwrap() }
    };
    assert!(listed(&store).await.iter().any(|s| s.id == id), "its journal is on the server");
    tokio::time::timeout(Duration::from_secs(10), session.close()).await.unwrap().unwrap();
    // Closed for good: its journal leaves the server (its history stays in its events).
    eventually(BOUND, "the closed session's journal is deleted", || async {
        listed(&store).await.iter().all(|s| s.id != id).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_nobody_drove_moves_when_a_host_finds_its_node_lost() {
    let server = NatsServer::start();
    let (n1, _n2, first) = two_durable_nodes(&server).await;
    let session = first.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let id = session.id().to_owned();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // Its host goes (its lease on the session outlives the test) and then its node.
    drop((session, first));
    drop(n1);
    // A host that did not start it finds it by id, and its node lost: it moves it.
    let other = Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.unwrap();
    let found = eventually(BOUND, "n1's entry expires", || async {
        let found = other.session(&id).await.ok()?;
        (found.is_moving() || found.node() == "n2").then_some(found)
    })
    .await;
    found.user_turn("And the invoice?").await.expect("the moved session takes the turn");
    assert_eq!(found.node(), "n2");
    found.wait_for_idle().await.unwrap();
    let history = found.history().await.unwrap();
    assert_eq!(texts(&history), ["Where is my order?", REPLY, "And the invoice?", REPLY]);
    tokio::time::timeout(Duration::from_secs(10), found.close()).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_hands_its_sessions_to_another_node_and_closes_none() {
    let server = NatsServer::start();
    let (n1, _n2, host) = two_durable_nodes(&server).await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();

    let report = tokio::time::timeout(BOUND, n1.drain()).await.expect("the drain ends");
    assert_eq!((report.moved, report.closed, report.ended), (1, 0, 0), "{report:?}");
    // The handle follows the session's record to n2; no loss, no close.
    let seen = goes_on_at_n2(&session, &mut events).await;
    assert!(
        seen.iter().any(|(_, k)| matches!(k, EventKind::SessionMoved { from, to, .. }
            if from == "n1" && to == "n2")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|(_, k)| matches!(k, EventKind::SessionClosed { .. })), "{seen:?}");
    tokio::time::timeout(Duration::from_secs(10), session.close()).await.unwrap().unwrap();
}

/// An agent whose model looks each question up with `lookup` (taking `took`) before it
/// answers "Found it.".
fn looking_node(server: &NatsServer, name: &str, took: Duration) -> colloquy_cluster::NodeBuilder {
    use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
    use colloquy_model::{Agent, FunctionTool, RunContext, ToolError};
    let agent = move || {
        let lookup = FunctionTool::new(
            "lookup",
            "Looks the order up.",
            move |_ctx: RunContext, _: serde_json::Value| async move {
                tokio::time::sleep(took).await;
                Ok::<_, ToolError>("shipped".to_owned())
            },
        );
        Agent::new("support", "You look orders up.").tool(lookup)
    };
    let llm = ScriptedLlm::new([]).with_fallback(|index, request| {
        let answered =
            request.items.items().last().is_some_and(|i| i.as_function_call_output().is_some());
        match answered {
            true => ScriptedResponse::text("Found it."),
            false => ScriptedResponse::text("Looking.").with_call(ScriptedCall::new(
                format!("c{index}"),
                "lookup",
                "{}",
            )),
        }
    });
    node_builder(&server.url(), name)
        .durable(true)
        .lost_after(LOST_AFTER)
        .agent("support", agent)
        .llm(llm)
}

/// `n1` and a quick n2 started, and a session on n1 whose `lookup` runs.
async fn a_call_running_on(
    server: &NatsServer,
    n1: colloquy_cluster::NodeBuilder,
) -> (NodeHandle, NodeHandle, colloquy_cluster::RemoteSession, RemoteEvents) {
    let n1 = n1.start().await.unwrap();
    // n2's lookups are quick: the conversation goes on there.
    let n2 = looking_node(server, "n2", Duration::from_millis(50)).start().await.unwrap();
    let host = Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.unwrap();
    eventually(BOUND, "both nodes announce themselves", || async {
        (host.nodes().await.ok()?.iter().filter(|n| n.durable).count() == 2).then_some(())
    })
    .await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    read_until(&mut events, |k| matches!(k, EventKind::ToolCallStarted { .. })).await;
    (n1, n2, session, events)
}

/// A drain with a call running: `drain_timeout` decides whether the call ends on n1 first or
/// is in doubt when n2 resumes the session. Returns the move's calls in doubt.
async fn drain_with_a_call_running(took: Duration, drain_timeout: Duration) -> Vec<String> {
    let server = NatsServer::start();
    let n1 = looking_node(&server, "n1", took).drain_timeout(drain_timeout);
    let (n1, _n2, session, mut events) = a_call_running_on(&server, n1).await;

    let report = tokio::time::timeout(BOUND, n1.drain()).await.expect("the drain ends");
    assert_eq!((report.moved, report.closed), (1, 0), "{report:?}");
    let seen = read_until(&mut events, |k| matches!(k, EventKind::SessionMoved { .. })).await;
    let Some((_, EventKind::SessionMoved { from, to, calls_in_doubt })) = seen.last() else {
        panic!("x_session_moved in {seen:?}");
    };
    assert_eq!((from.as_str(), to.as_str()), ("n1", "n2"));
    assert!(!seen.iter().any(|(_, k)| matches!(k, EventKind::SessionClosed { .. })), "{seen:?}");
    // The conversation goes on there.
    session.user_turn("Thanks. And the invoice?").await.expect("n2 takes the turn");
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    assert_eq!(texts(&history).last().map(String::as_str), Some("Found it."), "{history:?}");
    tokio::time::timeout(Duration::from_secs(10), session.close()).await.unwrap().unwrap();
    calls_in_doubt.iter().map(|c| format!("{} {:?}", c.name, c.outcome)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_a_running_call_end_before_it_moves_the_session() {
    let in_doubt = drain_with_a_call_running(Duration::from_millis(500), BOUND).await;
    assert!(in_doubt.is_empty(), "{in_doubt:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_running_at_the_drain_timeout_is_in_doubt_on_the_next_node() {
    let in_doubt = drain_with_a_call_running(Duration::from_secs(30), Duration::ZERO).await;
    assert_eq!(in_doubt, ["lookup Failed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_under_way_when_its_node_is_lost_is_answered_by_the_next_node() {
    let server = NatsServer::start();
    let n1 = looking_node(&server, "n1", Duration::from_secs(60));
    let (n1, _n2, session, _events) = a_call_running_on(&server, n1).await;
    // Quiet only once the minute-long call ends: under way when n1 goes.
    let waiting = tokio::spawn({
        let session = session.clone();
        async move { session.wait_for_quiet().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(n1);
    // A wait may run twice: it is sent again to n2, where the call is in doubt and ends.
    let waited = tokio::time::timeout(BOUND, waiting).await.expect("the wait ends").unwrap();
    waited.expect("the wait is answered by n2");
    assert_eq!(session.node(), "n2");
    tokio::time::timeout(Duration::from_secs(10), session.close()).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sent_again_after_a_move_is_answered_by_the_next_node_without_running() {
    let server = NatsServer::start();
    let (n1, _n2, host) = two_durable_nodes(&server).await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let turn = session.with_command_id("turn-1");
    turn.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    drop(n1);
    // Its answer lost, say: the host sends it again, with its id, wherever the session is now.
    // n2 read the id in the journal with the message: taken, not run again.
    turn.user_turn("Where is my order?").await.expect("answered by n2");
    assert_eq!(session.node(), "n2");
    session.wait_for_idle().await.unwrap();
    assert_eq!(texts(&session.history().await.unwrap()), ["Where is my order?", REPLY]);
    // Another id is another command.
    session.with_command_id("turn-2").user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let expected = ["Where is my order?", REPLY, "Where is my order?", REPLY];
    assert_eq!(texts(&session.history().await.unwrap()), expected);
    tokio::time::timeout(Duration::from_secs(10), session.close()).await.unwrap().unwrap();
}
