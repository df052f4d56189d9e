//! A stored session's lease (docs/durability.md#leases): a second resume of a running session
//! is refused by name, and a session taken over closes with `lease_lost` and writes no more.

use std::sync::Arc;

use crate::common::*;
use colloquy::prelude::*;
use colloquy::store::{MemoryStore, Record, SessionStore};

fn agents(name: &str) -> Option<Agent> {
    (name == "A").then(agent)
}

/// The texts of the messages in session `id`'s stored journal.
fn stored_texts(store: &dyn SessionStore, id: &str) -> Vec<String> {
    let entries = store.load(id).unwrap();
    let items = entries.iter().flat_map(|e| match &e.record {
        Record::ItemsCommitted { items, .. } => items.clone(),
        _ => Vec::new(),
    });
    items.filter_map(|i| i.as_message().map(|m| m.text.clone())).collect()
}

#[tokio::test(start_paused = true)]
async fn a_second_resume_of_a_running_session_is_refused_and_names_its_holder() {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let h = Harness::start_with(builder, agent(), vec![text("Noted.")]).await;
    h.turn("remember: aisle seat").await;
    let id = h.session.id().to_owned();
    // The writer's last batch on disk (the paused clock waits for a blocking append).
    tokio::time::sleep(ms(50)).await;
    let before = store.load(&id).unwrap();

    let second = Session::builder().llm(ScriptedLlm::new([])).store(store.clone());
    let Err(refused) = second.resume(&id, agents).await else { panic!("resumed twice") };
    let text = refused.to_string();
    assert!(matches!(refused, SessionError::Resume(_)), "{text}");
    let holder = format!("is in use by process {}", std::process::id());
    assert!(text.contains(&id) && text.contains(&holder), "{text}");
    assert!(text.contains("take the session over"), "{text}");
    let after = store.load(&id).unwrap();
    assert!(!after.iter().any(|e| matches!(e.record, Record::Resumed { .. })), "{after:?}");
    assert_eq!(after, before, "nothing stored changed");
    h.turn("still here?").await;

    // Suspended, it lets go of the lease: the next resume gets it at once.
    h.session.suspend().await.unwrap();
    let third = Session::builder().llm(ScriptedLlm::new([])).store(store.clone());
    let session = third.resume(&id, agents).await.expect("a suspended session resumes");
    assert_eq!(session.id(), id);
}

#[tokio::test(start_paused = true)]
async fn a_session_taken_over_closes_with_lease_lost_and_writes_no_more() {
    let store = Arc::new(MemoryStore::new());
    let mut builder =
        Session::builder().llm(ScriptedLlm::new([text("Noted.")])).store(store.clone());
    let mut first_events = builder.subscribe();
    let first = builder.start(agent()).await.unwrap();
    first.user_turn("remember: aisle seat").await.unwrap();
    first.wait_for_idle().await.unwrap();
    let id = first.id().to_owned();
    // Its reply on disk before the take-over: a batch still on its way would be refused.
    crate::durable::stored(&*store, &id, |r| {
        matches!(r, Record::ItemsCommitted { items, .. }
            if items.iter().any(|i| i.as_message().is_some_and(|m| m.text == "Noted.")))
    })
    .await;

    let builder = Session::builder().llm(ScriptedLlm::new([text("Window, then.")]));
    let second = builder.store(store.clone()).take_over(true).resume(&id, agents).await.unwrap();

    // The first one's next write (or renewal) is refused: it says so and closes.
    let _ = first.user_turn("from the old process").await;
    let mut events = Vec::new();
    while let Some(event) = first_events.recv().await {
        events.push(event);
    }
    let errors: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StoreError { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("was taken over by process"), "{errors:?}");
    let closed = events.last().map(|e| &e.kind);
    assert!(
        matches!(closed, Some(EventKind::SessionClosed { reason }) if reason == "lease_lost"),
        "{closed:?}"
    );
    assert!(matches!(first.user_turn("anyone?").await, Err(SessionError::Closed)));

    // The journal is the second one's: nothing of the old process after the take-over.
    second.user_turn("make it a window seat").await.unwrap();
    second.wait_for_idle().await.unwrap();
    second.suspend().await.unwrap();
    let texts = stored_texts(&*store, &id);
    assert_eq!(texts, ["remember: aisle seat", "Noted.", "make it a window seat", "Window, then."]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_renewed_while_the_session_runs_past_its_ttl() {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone()).lease_ttl(ms(300));
    let h = Harness::start_with(builder, agent(), vec![text("Noted.")]).await;
    h.turn("hello").await;
    // Many ttls later (in the store's real time too), still held: renewed all along.
    for _ in 0..10 {
        tokio::time::sleep(ms(300)).await;
        std::thread::sleep(std::time::Duration::from_millis(60));
    }
    let second = Session::builder().llm(ScriptedLlm::new([])).store(store.clone());
    let Err(refused) = second.resume(h.session.id(), agents).await else { panic!("not held") };
    assert!(refused.to_string().contains("is in use by"), "{refused}");
}
