//! Losing a node, in one process against a real nats-server (docs/cluster.md#failure): a node
//! that stops without a drain is lost within `lost_after` (its sessions' readers get
//! `x_node_lost`, their calls `NodeLost`, on every host); a node cut off from NATS stops its
//! sessions by itself and registers again under a new lease; a drain is no loss; a name whose
//! entry expired can be taken again. The nodes keep no journals (a durable node's sessions
//! move: `tests/failover.rs`). Nodes are lost after 2 s here: at 1 s a loaded machine
//! misses enough heartbeats for a healthy node to fence itself.

mod common;

use std::time::{Duration, Instant};

use colloquy_cluster::{
    Cluster, ClusterError, NodeHandle, NodeInfo, RemoteEvents, RemoteSession, StartOptions,
};
use colloquy_model::EventKind;
use common::{
    AT_ONCE, BOUND, LOST_AFTER, MARGIN, NatsServer, eventually, node_builder, raw_events, raw_type,
};
use futures_util::StreamExt;

/// A node that keeps no journals: its sessions are lost with it (a durable node's move,
/// `tests/failover.rs`).
async fn node(server: &NatsServer, name: &str, lost_after: Duration) -> NodeHandle {
    node_builder(&server.url(), name)
        .durable(false)
        .lost_after(lost_after)
        .start()
        .await
        .unwrap_or_else(|e| panic!("node {name} starts: {e}"))
}

async fn cluster(server: &NatsServer, lost_after: Duration) -> Cluster {
    Cluster::builder(server.url()).lost_after(lost_after).connect().await.expect("a host")
}

/// Reads `events` to their end; the last item, and when it came.
async fn last_item(events: &mut RemoteEvents) -> (Result<EventKind, ClusterError>, Instant) {
    let mut last = None;
    while let Some(item) = tokio::time::timeout(BOUND, events.recv()).await.expect("an end") {
        last = Some(item.map(|e| e.event.kind));
    }
    (last.expect("at least one item"), Instant::now())
}

async fn answers(session: &RemoteSession) {
    session.user_turn("Where is my order?").await.expect("a turn");
    session.wait_for_idle().await.expect("idle");
}

async fn live_node(cluster: &Cluster, name: &str, check: impl Fn(&NodeInfo) -> bool) -> NodeInfo {
    eventually(BOUND, &format!("{name} is announced as expected"), || async {
        cluster.nodes().await.ok()?.into_iter().find(|n| n.name == name && check(n))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_without_a_drain_is_lost_on_every_host() {
    let server = NatsServer::start();
    let n1 = node(&server, "n1", LOST_AFTER).await;
    let _n2 = node(&server, "n2", LOST_AFTER).await;
    let host = cluster(&server, LOST_AFTER).await;
    let other = cluster(&server, LOST_AFTER).await;
    let on_n1 = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let on_n2 = host.start_session_on("n2", "support", StartOptions::new()).await.unwrap();
    let mut events = on_n1.subscribe().await.unwrap();
    answers(&on_n1).await;
    // Another host drives the same session.
    let seen_elsewhere = other.session(on_n1.id()).await.unwrap();
    let mut elsewhere = seen_elsewhere.subscribe().await.unwrap();

    let stopped = Instant::now();
    drop(n1);
    let (last, at) = last_item(&mut events).await;
    assert_eq!(last, Err(ClusterError::NodeLost { node: "n1".into() }));
    let detected = at - stopped;
    eprintln!("x_node_lost {detected:?} after the node stopped (lost_after {LOST_AFTER:?})");
    assert!(detected < LOST_AFTER + MARGIN, "{detected:?}");
    assert!(detected > LOST_AFTER / 2, "not before the entry can expire: {detected:?}");
    let (last, _) = last_item(&mut elsewhere).await;
    assert_eq!(last, Err(ClusterError::NodeLost { node: "n1".into() }));

    // Calls fail at once, on both hosts; the other node carries on.
    let asked = Instant::now();
    let err = on_n1.user_turn("hello?").await.unwrap_err();
    assert_eq!(err, ClusterError::NodeLost { node: "n1".into() });
    assert!(asked.elapsed() < AT_ONCE, "{:?}", asked.elapsed());
    eventually(BOUND, "the other host sees the loss", || async {
        seen_elsewhere.is_node_lost().then_some(())
    })
    .await;
    assert!(matches!(seen_elsewhere.history().await, Err(ClusterError::NodeLost { .. })));
    answers(&on_n2).await;
    assert!(!on_n2.is_node_lost());

    // The marker is stored once, after the session's events; a host that comes later finds
    // the session lost and reads its events to the marker.
    let raw = raw_events(&server.url(), on_n1.id()).await;
    let types: Vec<&str> = raw.iter().map(raw_type).collect();
    assert_eq!(types.iter().filter(|t| **t == "x_node_lost").count(), 1, "{types:?}");
    assert_eq!(types.last(), Some(&"x_node_lost"), "{types:?}");
    assert_eq!(raw.last().unwrap()["node"], "n1");
    let later = cluster(&server, LOST_AFTER).await;
    let found = later.session(on_n1.id()).await.unwrap();
    assert!(found.is_node_lost());
    let mut replay = found.subscribe().await.unwrap();
    let (last, _) = last_item(&mut replay).await;
    assert_eq!(last, Err(ClusterError::NodeLost { node: "n1".into() }));

    // The record, marked lost, expires with the session's events: a node that never comes
    // back leaves nothing behind.
    let raw = async_nats::connect(server.url()).await.expect("a raw connection");
    let records = async_nats::jetstream::new(raw).get_stream("KV_colloquy_sessions").await;
    let subject = format!("$KV.colloquy_sessions.session.{}", on_n1.id());
    let record = records.unwrap().get_last_raw_message_by_subject(&subject).await.unwrap();
    let ttl = record.headers.get("Nats-TTL").map(|v| v.as_str().to_owned());
    assert_eq!(ttl.as_deref(), Some("86400"), "{:?}", record.headers);
    let value: serde_json::Value = serde_json::from_slice(&record.payload).unwrap();
    assert_eq!(value["lost"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_stops_its_sessions_then_registers_under_a_new_lease() {
    let server = NatsServer::start();
    let n1 = node(&server, "n1", LOST_AFTER).await;
    let host = cluster(&server, LOST_AFTER).await;
    let session = host.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    answers(&session).await;
    let lease = live_node(&host, "n1", |_| true).await.lease;

    let paused = Instant::now();
    n1.pause_heartbeats(true);
    // The node stops the session by itself before its entry can expire, without a word of
    // the session's own: its readers end with the loss marker.
    let (last, at) = last_item(&mut events).await;
    assert_eq!(last, Err(ClusterError::NodeLost { node: "n1".into() }));
    eprintln!("marker read {:?} after the heartbeats stopped", at - paused);
    assert!(n1.sessions().is_empty(), "the fence let the session go");
    eventually(BOUND, "the host finds the node lost", || async {
        session.is_node_lost().then_some(())
    })
    .await;
    eprintln!("lost {:?} after the heartbeats stopped", paused.elapsed());
    assert!(paused.elapsed() < LOST_AFTER + MARGIN, "{:?}", paused.elapsed());
    let err = session.user_turn("hello?").await.unwrap_err();
    assert_eq!(err, ClusterError::NodeLost { node: "n1".into() });
    let raw = raw_events(&server.url(), session.id()).await;
    let types: Vec<&str> = raw.iter().map(raw_type).collect();
    assert_eq!(types.iter().filter(|t| **t == "x_node_lost").count(), 1, "{types:?}");
    assert_eq!(types.last(), Some(&"x_node_lost"), "{types:?}");
    assert!(!types.contains(&"session_closed"), "{types:?}");

    // The reader met the node's own marker, which may come before the entry expires: a node
    // back by then keeps its lease (it stopped its sessions all the same).
    eventually(BOUND, "n1's entry expires", || async {
        let nodes = host.nodes().await.ok()?;
        nodes.iter().all(|n| n.name != "n1").then_some(())
    })
    .await;
    // Back: a greater lease, nothing of the old one, and it takes sessions again.
    n1.pause_heartbeats(false);
    let back = live_node(&host, "n1", |n| n.lease > lease).await;
    assert_eq!(back.sessions, 0);
    let found = host.session(session.id()).await.expect("a lost session is still found");
    assert!(found.is_node_lost());
    let again = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    answers(&again).await;
    assert!(!again.is_node_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_is_not_lost() {
    let server = NatsServer::start();
    let n1 = node_builder(&server.url(), "n1")
        .lost_after(LOST_AFTER)
        .drain_timeout(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let host = cluster(&server, LOST_AFTER).await;
    let session = host.start_session("support", StartOptions::new()).await.unwrap();
    let report = tokio::time::timeout(BOUND, n1.drain()).await.expect("the drain ends");
    assert_eq!(report.closed, 1);
    // Past the expiry of the entry's delete marker, which a watch also sees as a purge.
    tokio::time::sleep(LOST_AFTER * 2).await;
    assert!(!session.is_node_lost());
    let raw = raw_events(&server.url(), session.id()).await;
    assert_eq!(raw.last().map(raw_type), Some("session_closed"));
    assert!(raw.iter().all(|m| raw_type(m) != "x_node_lost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_whose_entry_expired_is_taken_again_cleanly() {
    let server = NatsServer::start();
    let first = node(&server, "n1", LOST_AFTER).await;
    let host = cluster(&server, LOST_AFTER).await;
    let lease = live_node(&host, "n1", |_| true).await.lease;
    drop(first);
    let taken =
        node_builder(&server.url(), "n1").start().await.err().expect("the entry is still there");
    assert_eq!(taken, ClusterError::NameTaken("n1".into()));
    let second = eventually(BOUND, "n1 starts again", || async {
        node_builder(&server.url(), "n1").lost_after(LOST_AFTER).start().await.ok()
    })
    .await;
    let info = live_node(&host, "n1", |n| n.lease > lease).await;
    assert_eq!(info.boot_id, second.info().boot_id);
    let session = host.start_session("support", StartOptions::new()).await.unwrap();
    answers(&session).await;
    assert_eq!(second.sessions().len(), 1);
}

#[tokio::test]
async fn lost_after_under_a_second_is_refused_before_connecting() {
    let short = Duration::from_millis(500);
    let err = Cluster::builder("nats://127.0.0.1:1").lost_after(short).connect().await.err();
    let err = err.expect("refused");
    assert!(matches!(err, ClusterError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("at least 1s"), "{err}");
    let err = node_builder("nats://127.0.0.1:1", "n1").lost_after(short).start().await.err();
    assert!(matches!(err, Some(ClusterError::Config(_))), "{err:?}");
}

/// A sessions bucket made before lost records expired (no per-message TTLs) still gets its
/// records marked lost; they stay until deleted, as they used to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_without_ttls_still_marks_records_lost() {
    let server = NatsServer::start();
    let raw = async_nats::connect(server.url()).await.expect("a raw connection");
    let js = async_nats::jetstream::new(raw);
    let config = async_nats::jetstream::kv::Config {
        bucket: "colloquy_sessions".into(),
        history: 1,
        ..Default::default()
    };
    js.create_key_value(config).await.expect("an old-style bucket");
    let n1 = node(&server, "n1", LOST_AFTER).await;
    let host = cluster(&server, LOST_AFTER).await;
    let session = host.start_session_on("n1", "support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    drop(n1);
    let (last, _) = last_item(&mut events).await;
    assert_eq!(last, Err(ClusterError::NodeLost { node: "n1".into() }));
    let records = js.get_key_value("colloquy_sessions").await.expect("the bucket");
    let marked = eventually(BOUND, "the record is marked lost", || async {
        let value = records.get(format!("session.{}", session.id())).await.ok()??;
        let record: serde_json::Value = serde_json::from_slice(&value).ok()?;
        (record["lost"] == true).then_some(record)
    })
    .await;
    assert_eq!(marked["node"], "n1");
}

/// A NATS restart shorter than the documented tolerance (docs/cluster.md#failure: about 1.8 s
/// with the default `lost_after` of 3 s) costs no session: nodes reconnect within a fraction of
/// a second of the server's return and renew their lease at once, before their fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_of_a_second_and_a_half_costs_no_session() {
    let mut server = NatsServer::start();
    let n1 = node_builder(&server.url(), "n1").start().await.expect("the node");
    let host = Cluster::connect(server.url()).await.expect("a host");
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let session = host.start_session("support", StartOptions::new()).await.unwrap();
        let events = session.subscribe().await.unwrap();
        answers(&session).await;
        sessions.push((session, events));
    }
    // Down from 0.9 s after a stored heartbeat: a node that beat once a second would have to
    // renew its lease within 1.6 s of the stop.
    let raw = async_nats::connect(server.url()).await.expect("a raw connection");
    let nodes = async_nats::jetstream::new(raw).get_key_value("colloquy_nodes").await.unwrap();
    let mut writes = nodes.watch("node.n1").await.expect("a watch on the node's entry");
    let write = tokio::time::timeout(BOUND, writes.next()).await.expect("a heartbeat");
    write.expect("an entry").expect("a readable entry");
    tokio::time::sleep(Duration::from_millis(900)).await;
    drop(writes);
    tokio::task::block_in_place(|| server.restart_after(Duration::from_millis(1500)));

    for (session, events) in &mut sessions {
        answers(session).await;
        assert!(!session.is_node_lost(), "{}", session.id());
        session.close().await.expect("a close");
        let (last, _) = last_item(events).await;
        assert_eq!(last, Ok(EventKind::SessionClosed { reason: "close".into() }));
    }
    eventually(BOUND, "the node lets the sessions go", || async {
        n1.sessions().is_empty().then_some(())
    })
    .await;
}
