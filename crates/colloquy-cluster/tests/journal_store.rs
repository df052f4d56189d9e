//! The cluster's session store against a real nats-server (docs/cluster.md#journals): it keeps
//! every rule a store keeps (`colloquy_store::conformance`), two processes' openings of it
//! share leases and fence each other, and a session resumes from it in another process.

mod common;

use std::sync::{Arc, Mutex};

use colloquy_cluster::JetStreamStore;
use colloquy_store::conformance::{self, handoff};
use colloquy_store::{Acquire, LEASE_TTL, LeaseHolder, SessionStore, StoreError};
use common::NatsServer;

#[test]
fn the_jetstream_store_keeps_the_rules_of_every_store() {
    // Each check on an empty store: a server of its own.
    let servers = Mutex::new(Vec::new());
    conformance::check_all(|| {
        let server = NatsServer::start();
        let store = JetStreamStore::connect(server.url()).expect("the store opens");
        servers.lock().unwrap().push(server);
        Box::new(store)
    });
}

#[test]
fn two_openings_share_leases_and_a_take_over_fences_the_old_holder_at_once() {
    let server = NatsServer::start();
    let a = JetStreamStore::connect(server.url()).unwrap();
    let b = JetStreamStore::connect(server.url()).unwrap();
    let me = LeaseHolder::this_process();
    let held = a.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    a.append(&held, &[handoff(1)]).unwrap();
    assert!(matches!(
        b.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree),
        Err(StoreError::Leased { .. })
    ));

    // Taken over in the other opening: the old holder's next write is refused before the new
    // one has written anything.
    let taken = b.acquire("s-1", &me, LEASE_TTL, Acquire::TakeOver).unwrap();
    assert!(matches!(a.append(&held, &[handoff(2)]), Err(StoreError::LeaseLost { .. })));
    assert!(matches!(a.renew(&held), Err(StoreError::LeaseLost { .. })));
    b.append(&taken, &[handoff(2)]).unwrap();
    assert_eq!(a.load("s-1").unwrap(), [handoff(1), handoff(2)]);

    // A store opened anew (another process, later) reads the same journal and listing.
    drop((a, b));
    let c = JetStreamStore::connect(server.url()).unwrap();
    assert_eq!(c.load("s-1").unwrap().len(), 2);
    let listed = c.list().unwrap();
    assert_eq!((listed.len(), listed[0].entries), (1, 2));
}

#[test]
fn appends_racing_from_two_threads_interleave_nothing() {
    let server = NatsServer::start();
    let store = Arc::new(JetStreamStore::connect(server.url()).unwrap());
    let me = LeaseHolder::this_process();
    let lease = store.acquire("s-2", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    // Two writers of one lease (a bug in a host): each number is taken once, never twice.
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let (store, lease) = (Arc::clone(&store), lease.clone());
            std::thread::spawn(move || {
                (1..=20).filter(|seq| store.append(&lease, &[handoff(*seq)]).is_ok()).count()
            })
        })
        .collect();
    let written: usize = racers.into_iter().map(|r| r.join().unwrap()).sum();
    let entries = store.load("s-2").unwrap();
    assert_eq!(entries.len(), written);
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
}

#[test]
fn a_session_id_that_cannot_be_a_subject_is_refused_by_name() {
    let server = NatsServer::start();
    let store = JetStreamStore::connect(server.url()).unwrap();
    let me = LeaseHolder::this_process();
    let refused = store.acquire("a.b", &me, LEASE_TTL, Acquire::IfFree).unwrap_err();
    assert!(refused.to_string().contains("`a.b` cannot name a NATS subject"), "{refused}");
}

/// A session on the store: a turn, suspended, then resumed from another opening (another
/// process) with its history; a second resume, taking over, fences the first, which closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_from_the_stream_in_another_opening_and_a_take_over_fences_it() {
    use colloquy_actors::Session;
    use colloquy_model::{ChatItem, EventKind};
    let server = NatsServer::start();
    let url = server.url();
    let open = move || {
        let url = url.clone();
        async move {
            let store = tokio::task::spawn_blocking(move || JetStreamStore::connect(url));
            let store: Arc<dyn SessionStore> = Arc::new(store.await.unwrap().unwrap());
            store
        }
    };
    let agents = |name: &str| (name == "support").then(common::support);
    let texts = |history: &[ChatItem]| -> Vec<String> {
        history.iter().filter_map(|i| i.as_message().map(|m| m.text.clone())).collect()
    };

    let first = Session::builder().llm(common::llm()).store(open().await);
    let first = first.start(common::support()).await.unwrap();
    first.user_turn("where is my order?").await.unwrap();
    first.wait_for_idle().await.unwrap();
    let id = first.id().to_owned();
    first.suspend().await.unwrap();

    let mut builder = Session::builder().llm(common::llm()).store(open().await);
    let mut second_events = builder.subscribe();
    let second = builder.resume(&id, agents).await.expect("it resumes from the stream");
    assert_eq!(texts(&second.history().await.unwrap()), ["where is my order?", common::REPLY]);

    // Another process takes it over: the second's next write is refused, and it closes.
    let third = Session::builder().llm(common::llm()).store(open().await).take_over(true);
    let third = third.resume(&id, agents).await.expect("taken over");
    let _ = second.user_turn("from the old process").await;
    let closed = tokio::time::timeout(common::BOUND, async {
        while let Some(event) = second_events.recv().await {
            if let EventKind::SessionClosed { reason } = &event.kind {
                return reason.clone();
            }
        }
        String::new()
    });
    assert_eq!(closed.await.expect("it closes"), "lease_lost");
    third.user_turn("and now?").await.unwrap();
    third.wait_for_idle().await.unwrap();
    let history = texts(&third.history().await.unwrap());
    assert!(!history.iter().any(|t| t == "from the old process"), "{history:?}");
    assert_eq!(history.last().map(String::as_str), Some(common::REPLY));
    third.suspend().await.unwrap();
}
