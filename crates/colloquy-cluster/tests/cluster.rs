//! Nodes and hosts against a real nats-server (`scripts/install-nats.sh`): placement, remote
//! commands, event streams across a server restart, drains, credentials. Several nodes run in
//! this one process, each with its own NATS connection. The real clock, short bounded waits.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy_cluster::{
    Cluster, ClusterError, Node, NodeHandle, NodeInfo, Refusal, StartOptions, Timeouts,
};
use colloquy_llm::{ScriptedLlm, ScriptedResponse};
use colloquy_model::{ChatItem, EventFilter, EventKind};
use colloquy_protocol::ErrorKind;
use common::{BOUND, NatsServer, REPLY, eventually, node_builder, raw_events, raw_type, support};

async fn node(server: &NatsServer, name: &str, max_sessions: usize) -> NodeHandle {
    node_builder(&server.url(), name)
        .max_sessions(max_sessions)
        .start()
        .await
        .unwrap_or_else(|e| panic!("node {name} starts: {e}"))
}

async fn cluster(server: &NatsServer) -> Cluster {
    Cluster::connect(server.url()).await.expect("the host connects")
}

/// Waits until the nodes bucket shows `name` with `sessions` sessions.
async fn announced(cluster: &Cluster, name: &str, sessions: usize) -> NodeInfo {
    eventually(BOUND, &format!("{name} announces {sessions} sessions"), || async {
        let nodes = cluster.nodes().await.ok()?;
        nodes.into_iter().find(|n| n.name == name && n.sessions == sessions)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_goes_to_the_least_loaded_node_or_the_named_one() {
    let server = NatsServer::start();
    let nodes = [
        node(&server, "n1", 10).await,
        node(&server, "n2", 10).await,
        node(&server, "n3", 10).await,
    ];
    let cluster = cluster(&server).await;
    for (name, count) in [("n1", 3), ("n2", 1), ("n3", 2)] {
        for _ in 0..count {
            let session =
                cluster.start_session_on(name, "support", StartOptions::new()).await.unwrap();
            assert_eq!(session.node(), name);
        }
    }
    for (name, count) in [("n1", 3), ("n2", 1), ("n3", 2)] {
        let info = announced(&cluster, name, count).await;
        assert_eq!(info.agents, ["support"]);
        assert!((info.load - count as f64 / 10.0).abs() < 1e-9);
    }

    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    assert_eq!(session.node(), "n2", "n2 held the fewest sessions");
    announced(&cluster, "n2", 2).await;
    // n2 and n3 now tie at 2: the tie goes to the first name.
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    assert_eq!(session.node(), "n2");
    assert_eq!(nodes[1].sessions().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_at_its_threshold_refuses_and_no_node_is_a_clear_error() {
    let server = NatsServer::start();
    let cluster = cluster(&server).await;
    let none = cluster.start_session("support", StartOptions::new()).await.unwrap_err();
    assert_eq!(
        none,
        ClusterError::NoNode { agent: "support".into(), detail: "no live node".into() }
    );

    let _small = node_builder(&server.url(), "small")
        .max_sessions(4)
        .load_threshold(0.5)
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        cluster.start_session("support", StartOptions::new()).await.unwrap();
    }
    // The node checks its own load, whatever the host believes.
    let refused = cluster.start_session_on("small", "support", StartOptions::new()).await;
    match refused {
        Err(ClusterError::Refused {
            node,
            refusal: Refusal::OverThreshold { load, threshold },
        }) => {
            assert_eq!(node, "small");
            assert!((load - 0.5).abs() < 1e-9 && (threshold - 0.5).abs() < 1e-9);
        }
        other => panic!("expected a refusal over the threshold, got {other:?}"),
    }
    announced(&cluster, "small", 2).await;
    let err = cluster.start_session("support", StartOptions::new()).await.unwrap_err();
    let ClusterError::NoNode { detail, .. } = &err else { panic!("{err:?}") };
    assert!(detail.contains("small: load 0.50 is at or above the threshold 0.50"), "{detail}");
    assert!(err.to_string().starts_with("no node can take a `support` session"), "{err}");

    let err = cluster.start_session("sales", StartOptions::new()).await.unwrap_err();
    assert!(err.to_string().contains("small: the node has no agent `sales`"), "{err}");
    let err =
        cluster.start_session_on("nowhere", "support", StartOptions::new()).await.unwrap_err();
    assert!(matches!(err, ClusterError::NoNode { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_user_turn_is_driven_and_its_events_read_in_order() {
    let server = NatsServer::start();
    let _n1 = node(&server, "n1", 10).await;
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();

    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    let texts: Vec<&str> =
        history.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Where is my order?", REPLY]);
    let snapshot = session.inspect().await.unwrap();
    assert_eq!((snapshot.session_id.as_str(), snapshot.agent.as_str()), (session.id(), "support"));
    let closed = session.close_with_reason("done").await.unwrap();
    assert_eq!(closed.len(), history.len());

    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, events.recv()).await.expect("events") {
        seen.push(event.expect("no gap"));
    }
    let indices: Vec<u64> = seen.iter().map(|e| e.index).collect();
    assert_eq!(indices, (1..=seen.len() as u64).collect::<Vec<_>>());
    assert!(seen.windows(2).all(|w| w[0].seq <= w[1].seq));
    let last = &seen.last().expect("events").event.kind;
    assert_eq!(last, &EventKind::SessionClosed { reason: "done".into() });
    let said = seen.iter().any(|e| match &e.event.kind {
        EventKind::ConversationItemAdded { item } => {
            item.as_message().is_some_and(|m| m.text == REPLY)
        }
        _ => false,
    });
    assert!(said, "the agent's reply is among the events");

    // The session is gone, its node is not: `closed` while the node still holds it, not found
    // once it has let it go.
    let err = session.user_turn("hello?").await.unwrap_err();
    let gone = match &err {
        ClusterError::Session(e) => e.kind == ErrorKind::Closed,
        ClusterError::NotFound(id) => id == session.id(),
        _ => false,
    };
    assert!(gone, "{err:?}");
    eventually(BOUND, "the session is let go", || async {
        matches!(session.history().await, Err(ClusterError::NotFound(_))).then_some(())
    })
    .await;
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_resume_after_a_server_restart_with_no_gap_and_no_duplicate() {
    let mut server = NatsServer::start();
    // A node is lost only past 10 s: the restart must not cost the session.
    let lost_after = Duration::from_secs(10);
    let _n1 = node_builder(&server.url(), "n1").lost_after(lost_after).start().await.unwrap();
    let host = cluster(&server).await;
    let session = host.start_session("support", StartOptions::new()).await.unwrap();
    let id = session.id().to_owned();
    // One subscriber stays open through the restart; another is dropped and resumed later
    // from the cursor of the last event it saw, from a new connection (a host that restarted).
    let mut through = session.subscribe().await.unwrap();
    let mut before = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let mut last = None;
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(300), before.recv()).await
    {
        last = Some(event.unwrap());
    }
    let last = last.expect("events before the restart");
    drop(before);
    drop(host);

    server.restart();
    let host = cluster(&server).await;
    let session =
        eventually(BOUND, "the session is found again", || async { host.session(&id).await.ok() })
            .await;
    // A command sent while the node is still reconnecting is sent again within its bound.
    session.user_turn("And my refund?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();

    let mut resumed = session.subscribe_from(last.cursor()).await.unwrap();
    let mut after = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, resumed.recv()).await.expect("events") {
        after.push(event.expect("no gap"));
    }
    assert_eq!(after[0].index, last.index + 1, "resumed right after the last event seen");
    let indices: Vec<u64> = after.iter().map(|e| e.index).collect();
    let expected: Vec<u64> = (last.index + 1..=last.index + after.len() as u64).collect();
    assert_eq!(indices, expected);
    assert!(matches!(after.last().unwrap().event.kind, EventKind::SessionClosed { .. }));
    let turns = after.iter().filter(|e| is_user_message(&e.event.kind, "And my refund?")).count();
    assert_eq!(turns, 1);

    let mut all = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, through.recv()).await.expect("events") {
        all.push(event.expect("no gap").index);
    }
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.len() as u64, after.last().unwrap().index);
}

fn is_user_message(kind: &EventKind, text: &str) -> bool {
    match kind {
        EventKind::ConversationItemAdded { item } => {
            item.as_message().is_some_and(|m| m.text == text)
        }
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_refuses_new_sessions_then_closes_the_rest_with_node_draining() {
    let server = NatsServer::start();
    let n1 = node_builder(&server.url(), "n1")
        // Long enough for the first session to end by itself on a loaded machine.
        .drain_timeout(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let cluster = cluster(&server).await;
    let ends_itself = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let stays = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = stays.subscribe().await.unwrap();

    cluster.drain_node("n1").await.unwrap();
    eventually(BOUND, "n1 announces it drains", || async {
        cluster.nodes().await.ok()?.into_iter().find(|n| n.draining)
    })
    .await;
    let refused = cluster.start_session_on("n1", "support", StartOptions::new()).await;
    assert!(
        matches!(refused, Err(ClusterError::Refused { refusal: Refusal::Draining, .. })),
        "{refused:?}"
    );
    ends_itself.close().await.unwrap();

    let report = tokio::time::timeout(BOUND, n1.drain()).await.expect("the drain ends");
    assert_eq!((report.ended, report.closed), (1, 1));
    let mut last = None;
    while let Some(event) = tokio::time::timeout(BOUND, events.recv()).await.expect("events") {
        last = Some(event.unwrap().event.kind);
    }
    assert_eq!(last, Some(EventKind::SessionClosed { reason: "node_draining".into() }));
    assert!(cluster.nodes().await.unwrap().is_empty(), "a drained node leaves the bucket");
    // The drain closed it: it has ended, whatever became of its node.
    let err = stays.user_turn("hello?").await.unwrap_err();
    assert_eq!(err, ClusterError::NotFound(stays.id().to_owned()));
    let err = cluster.session(stays.id()).await.unwrap_err();
    assert_eq!(err, ClusterError::NotFound(stays.id().to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_bound_times_out() {
    let server = NatsServer::start();
    let slow = ScriptedLlm::new([])
        .with_fallback(|_, _| ScriptedResponse::text(REPLY).with_latency(Duration::from_secs(3)));
    let _n1 = Node::builder()
        .nats(server.url())
        .name("n1")
        .agent("support", support)
        .llm(slow)
        .start()
        .await
        .unwrap();
    let mut timeouts = Timeouts::default();
    timeouts.wait = Duration::from_millis(300);
    let cluster = Cluster::builder(server.url()).timeouts(timeouts).connect().await.unwrap();
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    let err = session.wait_for_idle().await.unwrap_err();
    assert_eq!(
        err,
        ClusterError::Timeout { what: "wait_for_idle".into(), after: Duration::from_millis(300) }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_a_clear_error_and_a_name_is_held_once() {
    let server = NatsServer::start_with(&["--auth", "s3cret"]);
    let err = Cluster::builder(server.url()).token("wrong").connect().await.err().expect("refused");
    assert!(matches!(err, ClusterError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("check the token"), "{err}");
    let err = Cluster::connect(server.url()).await.err().expect("refused without a token");
    assert!(matches!(err, ClusterError::Auth { .. }), "{err:?}");
    let node =
        Node::builder().nats(server.url()).token("wrong").name("n1").agent("support", support);
    let err = node.start().await.err().expect("a node is refused too");
    let ClusterError::Auth { url, .. } = &err else { panic!("{err:?}") };
    assert_eq!(url, &server.url());
    assert!(err.to_string().contains("authorization violation"), "{err}");

    let start = || node_builder(&server.url(), "n1").token("s3cret").start();
    let _n1 = start().await.unwrap();
    let taken = start().await.err().expect("the name is held");
    assert_eq!(taken, ClusterError::NameTaken("n1".into()));
    let cluster = Cluster::builder(server.url()).token("s3cret").connect().await.unwrap();
    assert_eq!(cluster.nodes().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_session_sees_each_session_before_its_host_and_events_opt_into_agent_text() {
    let server = NatsServer::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let _streams = node_builder(&server.url(), "streams")
        .events(EventFilter::ALL)
        .on_session(move |session, start| {
            record.lock().unwrap().push((session.id().to_owned(), start.agent.clone()));
        })
        .start()
        .await
        .unwrap();
    let _plain = node(&server, "plain", 100).await;
    let cluster = cluster(&server).await;
    let mut types = Vec::new();
    for name in ["streams", "plain"] {
        let session = cluster.start_session_on(name, "support", StartOptions::new()).await.unwrap();
        if name == "streams" {
            assert_eq!(*seen.lock().unwrap(), [(session.id().to_owned(), "support".to_owned())]);
        }
        session.user_turn("Where is my order?").await.unwrap();
        session.wait_for_idle().await.unwrap();
        session.close().await.unwrap();
        let raw = raw_events(&server.url(), session.id()).await;
        types.push(raw.iter().map(|m| raw_type(m).to_owned()).collect::<Vec<_>>());
    }
    let texts = |types: &[String]| types.iter().filter(|t| *t == "x_agent_text").count();
    assert!(texts(&types[0]) >= 1, "{:?}", types[0]);
    assert_eq!(texts(&types[1]), 0, "{:?}", types[1]);
    assert_eq!(types[0].last().map(String::as_str), Some("session_closed"));
    assert_eq!(seen.lock().unwrap().len(), 1, "the other node's session is not seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_past_the_in_flight_bound_are_answered_busy_at_once() {
    let server = NatsServer::start();
    let slow = ScriptedLlm::new([])
        .with_fallback(|_, _| ScriptedResponse::text(REPLY).with_latency(Duration::from_secs(2)));
    let _n1 = node_builder(&server.url(), "n1").llm(slow).max_in_flight(4).start().await.unwrap();
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    let started = std::time::Instant::now();
    let burst = (0..20).map(|_| async {
        let result = session.wait_for_idle().await;
        (result, started.elapsed())
    });
    let results = futures_util::future::join_all(burst).await;
    let mut waited = 0;
    for (result, after) in results {
        match result {
            Ok(()) => waited += 1,
            Err(ClusterError::Session(e)) if e.kind == ErrorKind::Busy => {
                assert!(e.message.contains("4 requests of this session"), "{e}");
                assert!(after < Duration::from_secs(1), "busy at once, not after {after:?}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(waited, 4, "as many waits as the bound, the rest busy");
    // The bound frees as commands end.
    session.history().await.expect("a command once the burst is over");
}

/// What NATS cannot carry (its `max_payload`, 1 MiB here) is a clear error, never a silent
/// stall: a request is refused before it is sent, an event travels as an `error` event under
/// its own index, a reply as a `too_large` error; a close's reply keeps what fits of the
/// final history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_over_max_payload_travels_as_a_clear_error() {
    let server = NatsServer::start();
    let long = "x".repeat(1_200_000);
    let llm = ScriptedLlm::new([]).with_fallback(move |_, _| ScriptedResponse::text(long.clone()));
    let _n1 = node_builder(&server.url(), "n1").llm(llm).start().await.expect("the node");
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();

    let too_large = |err: ClusterError| match err {
        ClusterError::Session(e) if e.kind == ErrorKind::TooLarge => e.message,
        other => panic!("expected too_large, got {other:?}"),
    };
    let said = too_large(session.user_turn("y".repeat(1_100_000)).await.unwrap_err());
    assert!(said.contains("user_turn") && said.contains("max_payload"), "{said}");
    session.user_turn("Tell me everything.").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let said = too_large(session.history().await.unwrap_err());
    assert!(said.contains("max_payload"), "{said}");
    session.say("Still here.").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // The session closes as asked, and that is the answer, with the newest items of its
    // final history that fit.
    let kept = session.close_with_reason("done").await.expect("a close that closed succeeds");
    let texts: Vec<&str> =
        kept.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Still here."]);

    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, events.recv()).await.expect("events") {
        seen.push(event.expect("no gap").event.kind);
    }
    let replaced = seen.iter().any(|kind| {
        matches!(kind, EventKind::Error { message, .. }
            if message.contains("ConversationItemAdded") && message.contains("max_payload"))
    });
    assert!(replaced, "the long reply's item is an error event: {seen:?}");
    let later = seen.iter().any(|kind| match kind {
        EventKind::ConversationItemAdded { item } => {
            item.as_message().is_some_and(|m| m.text == "Still here.")
        }
        _ => false,
    });
    assert!(later, "events after it still arrive");
    assert!(matches!(seen.last(), Some(EventKind::SessionClosed { .. })), "{:?}", seen.last());
}

/// A node that cannot store a session's events (here its stream was deleted under it) gives
/// the session up after `event_timeout` instead of retrying forever: the session closes with
/// `events_unstored` and leaves the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_events_cannot_be_stored_is_given_up() {
    let server = NatsServer::start();
    let node = node_builder(&server.url(), "n1")
        .event_timeout(Duration::from_millis(500))
        .start()
        .await
        .expect("the node");
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let local = node.sessions().pop().expect("the node holds the session");
    let raw = async_nats::connect(server.url()).await.expect("a raw connection");
    let js = async_nats::jetstream::new(raw);
    js.delete_stream(colloquy_cluster::EVENTS_STREAM).await.expect("the stream deleted");

    session.user_turn("Where is my order?").await.unwrap();
    eventually(BOUND, "the node lets the session go", || async {
        node.sessions().is_empty().then_some(())
    })
    .await;
    let closed = local.history().await.unwrap_err();
    assert!(matches!(closed, colloquy_actors::SessionError::Closed), "{closed:?}");
    let err = session.user_turn("hello?").await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::NotFound(_))
            || matches!(&err, ClusterError::Session(e) if e.kind == ErrorKind::Closed),
        "{err:?}"
    );
}

/// A node sends the events ready at once in one message; a reader that stopped inside such a
/// message resumes right after the event it saw, and the cursor survives as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_resumes_inside_a_message_of_several_events() {
    let server = NatsServer::start();
    let _n1 = node(&server, "n1", 10).await;
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    for turn in ["Where is my order?", "And my refund?", "Thanks."] {
        session.user_turn(turn).await.unwrap();
    }
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, events.recv()).await.expect("events") {
        seen.push(event.expect("no gap"));
    }
    let shared = seen.windows(2).position(|w| w[0].seq == w[1].seq);
    let at = shared.expect("three turns' bursts share messages");
    let cursor: colloquy_cluster::EventCursor =
        serde_json::from_str(&serde_json::to_string(&seen[at].cursor()).unwrap()).unwrap();
    let mut resumed = session.subscribe_from(cursor).await.unwrap();
    let mut rest = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, resumed.recv()).await.expect("events") {
        rest.push(event.expect("no gap"));
    }
    assert_eq!(rest, seen[at + 1..], "the rest, from the next event in the same message");
    let messages = seen.iter().map(|e| e.seq).collect::<std::collections::BTreeSet<_>>().len();
    eprintln!("{} events in {messages} messages", seen.len());
}

/// A message on a session's events subject that is not the node's (garbage, published by
/// anyone allowed to) is skipped: every reader's stream goes on to the session's end, with
/// no error item that would make a relay give the session up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_message_among_the_events_is_skipped() {
    let server = NatsServer::start();
    let _n1 = node(&server, "n1", 10).await;
    let cluster = cluster(&server).await;
    let session = cluster.start_session("support", StartOptions::new()).await.unwrap();
    let mut events = session.subscribe().await.unwrap();
    session.user_turn("Where is my order?").await.unwrap();
    session.wait_for_idle().await.unwrap();

    let raw = async_nats::connect(server.url()).await.expect("a raw connection");
    let subject = format!("colloquy.events.{}", session.id());
    for garbage in [&b"\xff not json"[..], b"[1, 2]", b"{\"type\": \"x_other\"}"] {
        let js = async_nats::jetstream::new(raw.clone());
        js.publish(subject.clone(), garbage.to_vec().into()).await.unwrap().await.unwrap();
    }
    session.user_turn("And my refund?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();

    let mut seen = Vec::new();
    while let Some(item) = tokio::time::timeout(BOUND, events.recv()).await.expect("events") {
        seen.push(item.unwrap_or_else(|e| panic!("an error item: {e}")));
    }
    let indices: Vec<u64> = seen.iter().map(|e| e.index).collect();
    assert_eq!(indices, (1..=seen.len() as u64).collect::<Vec<_>>());
    assert!(seen.iter().any(|e| is_user_message(&e.event.kind, "And my refund?")));
    assert_eq!(
        seen.last().unwrap().event.kind,
        EventKind::SessionClosed { reason: "close".into() }
    );
}

/// A start whose history NATS cannot carry is `TooLarge`, refused before any node is asked:
/// a distinct error a relay answers with 413, since no retry can help (an `unavailable` would
/// invite one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_history_is_over_max_payload_is_too_large() {
    let server = NatsServer::start();
    let long = "x".repeat(400_000);
    let llm = ScriptedLlm::new([]).with_fallback(move |_, _| ScriptedResponse::text(long.clone()));
    let n1 = node_builder(&server.url(), "n1").llm(llm).start().await.expect("the node");
    let cluster = cluster(&server).await;
    let first = cluster.start_session("support", StartOptions::new()).await.unwrap();
    first.user_turn("Tell me everything.").await.unwrap();
    first.wait_for_idle().await.unwrap();
    let history = first.history().await.expect("400 kB travel");

    let long_history: Vec<ChatItem> =
        history.iter().cycle().take(history.len() * 3).cloned().collect();
    for start in [
        cluster.start_session("support", StartOptions::new().history(long_history.clone())).await,
        cluster.start_session_on("n1", "support", StartOptions::new().history(long_history)).await,
    ] {
        let err = start.expect_err("over max_payload");
        let ClusterError::TooLarge { size, limit, .. } = &err else { panic!("{err:?}") };
        assert!(size > limit && *limit == 1024 * 1024, "{err}");
        assert!(err.to_string().contains("max_payload"), "{err}");
    }
    assert_eq!(n1.sessions().len(), 1, "no node was asked");
}

/// A node holds a lease on the hosts of its sessions: once every host that started or
/// commanded a session has stopped beating for `host_lost_after`, the node closes the session
/// with `host_lost` and its room comes back; a live host's idle session stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_hosts_went_silent_is_closed_and_its_room_comes_back() {
    let server = NatsServer::start();
    let n1 = node_builder(&server.url(), "n1")
        .max_sessions(2)
        .load_threshold(1.0)
        .host_lost_after(colloquy_cluster::MIN_HOST_LOST_AFTER)
        .start()
        .await
        .unwrap();
    let stays = cluster(&server).await;
    let kept = stays.start_session("support", StartOptions::new()).await.unwrap();
    let dies = cluster(&server).await;
    let orphan = dies.start_session("support", StartOptions::new()).await.unwrap();
    orphan.user_turn("Where is my order?").await.unwrap();
    orphan.wait_for_idle().await.unwrap();
    // Another host reads the session's events, which does not make it hold the session.
    let mut events = stays.session(orphan.id()).await.unwrap().subscribe().await.unwrap();
    let full = stays.start_session("support", StartOptions::new()).await.unwrap_err();
    assert!(matches!(full, ClusterError::NoNode { .. }), "{full:?}");

    // The host dies: it beats no more, and nothing closes its session but the node.
    drop((orphan, dies));
    let mut last = None;
    while let Some(item) = tokio::time::timeout(BOUND, events.recv()).await.expect("an end") {
        last = Some(item.expect("no error").event.kind);
    }
    assert_eq!(last, Some(EventKind::SessionClosed { reason: "host_lost".into() }));
    let again = eventually(BOUND, "the node takes a session again", || async {
        stays.start_session("support", StartOptions::new()).await.ok()
    })
    .await;
    again.user_turn("Hello?").await.unwrap();
    // The live host's session, idle all along, is still there.
    kept.user_turn("Where is my order?").await.unwrap();
    kept.wait_for_idle().await.unwrap();
    assert_eq!(n1.sessions().len(), 2);
}

/// A start's history may hand off only to an agent the node offers, by name or by id: the host
/// cannot tell, so the node refuses, naming the item, and starts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_handing_off_to_an_agent_the_node_lacks_is_refused() {
    let server = NatsServer::start();
    let _n1 = node(&server, "n1", 10).await;
    let cluster = cluster(&server).await;
    let handoff = |id: &str, to: &str| {
        ChatItem::AgentHandoff(colloquy_model::AgentHandoff {
            id: id.into(),
            old_agent: None,
            new_agent: to.into(),
            created_at: colloquy_model::Timestamp::new(1, 0),
        })
    };
    let refused = cluster
        .start_session("support", StartOptions::new().history(vec![handoff("h1", "billing")]))
        .await
        .expect_err("no node offers billing");
    let message = refused.to_string();
    assert!(matches!(refused, ClusterError::StartFailed { .. }), "{refused:?}");
    assert!(message.contains("options.history[0] (id `h1`)"), "{message}");
    assert!(message.contains("`billing`"), "{message}");
    // A handoff to the agent it runs is taken.
    let options = StartOptions::new().history(vec![handoff("h1", "support")]);
    let session = cluster.start_session("support", options).await.expect("support is offered");
    session.close().await.unwrap();
}
