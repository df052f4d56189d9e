//! A session started without a `Host` closes once the host app drops every handle it was
//! given; the runtime's own handles do not keep it (decision 30).

use crate::common::*;
use colloquy::prelude::*;
use colloquy::session::{Host, Lifecycle};

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_closes_a_hostless_session_and_awaits_its_calls() {
    let mut builder = Session::builder().llm(ScriptedLlm::new([call("c1", "nap", "{}")]));
    let mut events = builder.subscribe();
    let mut lifecycle = builder.lifecycle_events();
    let session =
        builder.start(Agent::new("A", "inst").tool(sleeper("nap", 200, "rested"))).await.unwrap();
    session.user_turn("nap").await.unwrap();
    let clone = session.clone();
    drop(session);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(clone.is_running(), "a clone still holds it");
    drop(clone);
    let mut closed = None;
    let mut ended = false;
    while let Some(event) = events.recv().await {
        match event.kind {
            EventKind::ToolCallEnded { call_id, .. } if call_id == "c1" => ended = true,
            EventKind::SessionClosed { reason } => closed = Some(reason),
            _ => {}
        }
    }
    assert!(ended, "the running call was awaited, as at any close");
    assert_eq!(closed.as_deref(), Some("handles_dropped"));
    let mut session_stopped = false;
    while let Ok(record) = lifecycle.try_recv() {
        session_stopped |= record.id == "session" && record.what == Lifecycle::Stopped;
    }
    assert!(session_stopped, "the session actor stopped");
}

#[tokio::test(start_paused = true)]
async fn a_session_a_host_holds_lives_on_without_handles() {
    let host = Host::new().await.unwrap();
    let session = Session::builder()
        .host(&host)
        .llm(ScriptedLlm::new([text("hi")]))
        .start(Agent::new("A", "inst"))
        .await
        .unwrap();
    let id = session.id().to_string();
    drop(session);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let again = host.session(&id).expect("the host still lists it");
    assert!(again.is_running());
    again.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_stops_reading_is_closed_at_its_limit_and_the_session_goes_on() {
    let mut builder = Session::builder().llm(ScriptedLlm::new([])).max_unread_events(10);
    let mut stalled = builder.subscribe();
    let session = builder.start(Agent::new("A", "inst")).await.unwrap();
    let mut reader = session.subscribe();
    for turn in 0..5 {
        session.user_turn(format!("turn {turn}")).await.unwrap();
        session.wait_for_idle().await.unwrap();
        while reader.try_recv().is_some() {} // this one keeps up
    }
    let mut items = Vec::new();
    while let Some(event) = stalled.recv().await {
        items.push(event.kind);
    }
    assert_eq!(items.len(), 11, "ten events, then the notice, then the end: {items:#?}");
    assert_eq!(items.last(), Some(&EventKind::StreamOverflowed { unread: 10 }));
    session.user_turn("still there?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    assert!(reader.try_recv().is_some(), "the other subscriber still gets events");
    session.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_host_lifecycle_reader_that_stops_reading_is_closed_at_its_limit() {
    let host = Host::new().await.unwrap();
    let mut stalled = host.lifecycle_events_with_limit(5);
    let mut reader = host.lifecycle_events();
    for _ in 0..3 {
        let session = Session::builder()
            .host(&host)
            .llm(ScriptedLlm::new([text("hi")]))
            .start(Agent::new("A", "inst"))
            .await
            .unwrap();
        session.close().await.unwrap();
    }
    let mut records = Vec::new();
    while let Ok(record) = stalled.try_recv() {
        records.push(record.what);
    }
    assert_eq!(records.len(), 6, "five records, then the notice: {records:?}");
    assert_eq!(records.last(), Some(&Lifecycle::Overflowed));
    assert!(stalled.recv().await.is_none(), "the stream has ended");
    let mut read = 0;
    while reader.try_recv().is_ok() {
        read += 1;
    }
    assert!(read > 6, "the other reader heard every record ({read})");
}
