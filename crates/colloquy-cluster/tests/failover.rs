//! A lost node's session resumed on another (docs/cluster.md#resume): nodes that keep their
//! sessions' journals on the NATS server (`JetStreamStore`), one of them lost, and a host
//! resuming its session on the other — history kept, the next turn answered there, its
//! events numbered on after the last one stored.

mod common;

use std::sync::Arc;
use std::time::Duration;

use colloquy_cluster::{
    Cluster, ClusterError, JetStreamStore, NodeHandle, RemoteEvents, StartOptions,
};
use colloquy_model::{ChatItem, EventKind};
use colloquy_store::SessionStore;
use common::{BOUND, LOST_AFTER, NatsServer, REPLY, eventually, node_builder};

/// A node that keeps its sessions' journals on the server, as a process of its own would
/// (a store opened for it alone).
async fn durable_node(server: &NatsServer, name: &str) -> NodeHandle {
    let url = server.url();
    let store = tokio::task::spawn_blocking(move || JetStreamStore::connect(url));
    let store: Arc<dyn SessionStore> = Arc::new(store.await.unwrap().expect("the store opens"));
    node_builder(&server.url(), name)
        .lost_after(LOST_AFTER)
        .store(store)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_nodes_session_resumes_on_another_with_its_history_and_events() {
    let server = NatsServer::start();
    let n1 = durable_node(&server, "n1").await;
    let _n2 = durable_node(&server, "n2").await;
    let host = Cluster::builder(server.url()).lost_after(LOST_AFTER).connect().await.unwrap();
    eventually(BOUND, "both nodes announce themselves durable", || async {
        let nodes = host.nodes().await.ok()?;
        (nodes.iter().filter(|n| n.durable).count() == 2).then_some(())
    })
    .await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let id = session.id().to_owned();
    let mut events = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // A live session is not taken from its node.
    let refused = host.resume_session(&id).await.unwrap_err();
    assert!(matches!(refused, ClusterError::StartFailed { .. }), "{refused}");

    drop(n1);
    let before = read_until(&mut events, |_| false).await;
    let last_index = before.iter().map(|(i, _)| *i).max().expect("events before the loss");
    eventually(BOUND, "the host sees n1 lost", || async { session.is_node_lost().then_some(()) })
        .await;

    let moved = host.resume_session(&id).await.expect("it resumes on n2");
    assert_eq!(moved.id(), id);
    assert_eq!(moved.node(), "n2");
    let history = moved.history().await.unwrap();
    assert_eq!(texts(&history), ["Where is my order?", REPLY], "the journal's history");
    moved.user_turn("And the invoice?").await.unwrap();
    moved.wait_for_idle().await.unwrap();
    let history = moved.history().await.unwrap();
    assert_eq!(texts(&history)[2..], ["And the invoice?".to_owned(), REPLY.to_owned()]);

    // Its events go on after the last one n1 stored, past n1's loss marker: no index again.
    let cursor = colloquy_cluster::EventCursor { seq: 0, index: last_index };
    let mut after = moved.subscribe_from(cursor).await.unwrap();
    let seen = read_until(&mut after, |k| matches!(k, EventKind::SessionResumed { .. })).await;
    let first = seen.first().expect("events after the resume");
    assert_eq!(first.0, last_index + 1, "{seen:?}");
    assert!(matches!(seen.last(), Some((_, EventKind::SessionResumed { .. }))), "{seen:?}");
    tokio::time::timeout(Duration::from_secs(10), moved.close()).await.unwrap().unwrap();
}
