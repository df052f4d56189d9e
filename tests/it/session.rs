//! The host API: history export and import, user state and the away timer, event streams,
//! user data, and close.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use colloquy::prelude::*;
use tokio::sync::broadcast::error::RecvError;

fn user_states(events: &[SessionEvent]) -> Vec<(u64, UserState)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::UserState { state } => Some((e.at_ms, *state)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn history_exports_and_restores_into_a_new_session() {
    let h = Harness::start(agent(), vec![text("Paris is lovely.")]).await;
    h.turn("Tell me about Paris").await;
    let exported = h.session.history().await.unwrap();
    h.close().await;

    // The stored history round-trips through JSON, as a host would persist it.
    let stored = serde_json::to_string(&exported).unwrap();
    let restored: Vec<ChatItem> = serde_json::from_str(&stored).unwrap();
    let builder = Session::builder().history(restored);
    let h = Harness::start_with(builder, agent(), vec![text("And Lyon too.")]).await;
    h.turn("And Lyon?").await;
    assert_eq!(h.requests()[0].items.len(), 3, "the restored context goes to the LLM");
    assert_eq!(
        h.ctx("A").await,
        [
            "user(Tell me about Paris)",
            "asst(Paris is lovely.)",
            "user(And Lyon?)",
            "asst(And Lyon too.)"
        ]
    );
    let history = h.session.history().await.unwrap();
    assert_eq!(
        show(&history)[..3],
        ["handoff(None->A)", "user(Tell me about Paris)", "asst(Paris is lovely.)"]
    );
    assert_eq!(show(&history)[3], r#"handoff(Some("A")->A)"#, "resuming records who was speaking");
    let stamps: Vec<_> = history.iter().map(ChatItem::created_at).collect();
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "new items sort after the restored ones");
    let mut ids: Vec<&str> = history.iter().map(ChatItem::id).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "a resumed history holds no item id twice: {history:?}");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_speaking_user_holds_idle_and_interrupts_the_agent() {
    let h =
        Harness::start(agent(), vec![text("long").with_latency(Duration::from_millis(500))]).await;
    h.session.user_turn("hi").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.session.set_user_speaking(true).unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(1), h.session.wait_for_idle()).await;
    assert!(waited.is_err(), "not idle while the user speaks");
    h.session.set_user_speaking(false).unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["user(hi)"], "the reply was interrupted before any text");
    let mut h = h;
    let states: Vec<_> = user_states(h.events()).into_iter().map(|(_, s)| s).collect();
    assert_eq!(states, [UserState::Speaking, UserState::Listening]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_user_counts_as_away_after_a_quiet_window() {
    let mut h = Harness::start(agent(), vec![text("Hi!")]).await;
    h.turn("hello").await; // done at 10 ms
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(user_states(h.events()), [(15_010, UserState::Away)]);
    h.turn("back").await;
    assert_eq!(user_states(h.events())[1], (20_010, UserState::Listening));
    h.close().await;

    let mut h =
        Harness::start_with(Session::builder().user_away_timeout(None), agent(), vec![]).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(user_states(h.events()).is_empty());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_running_tool_holds_the_away_timer() {
    let slow = sleeper("slow", 20_000, "done");
    let mut h =
        Harness::start(agent().tool(slow), vec![call("c1", "slow", "{}"), text("Done.")]).await;
    h.turn("go").await; // the tool ends at 20.01 s, the reply at 20.02 s
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(user_states(h.events()), [(35_020, UserState::Away)]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn lossless_and_broadcast_subscribers() {
    let h = Harness::start(agent(), vec![]).await;
    let mut late = h.session.subscribe();
    let mut lagging = h.session.events();
    let mut following = h.session.events();
    for i in 0..150 {
        h.turn(&format!("turn {i}")).await;
        while following.try_recv().is_ok() {}
    }
    let mut lossless = 0;
    while late.try_recv().is_some() {
        lossless += 1;
    }
    match lagging.recv().await {
        Err(RecvError::Lagged(missed)) => {
            assert_eq!(missed as usize, lossless - colloquy_actors::BROADCAST_CAPACITY);
        }
        other => panic!("a lagging receiver is told it lagged, got {other:?}"),
    }
    assert!(lossless > colloquy_actors::BROADCAST_CAPACITY);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn filtered_subscribers_get_only_the_types_they_asked_for() {
    use colloquy::events::{EventFilter, EventType};
    let progress =
        FunctionTool::new("progress", "Two steps.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("step 1").await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            ctx.update("step 2").await?;
            Ok::<_, ToolError>("done")
        });
    let script = vec![call("c1", "progress", "{}"), text("On it."), text("All done.")];
    let mut builder = Session::builder();
    // From the builder (sees the start) and from the handle (from now on).
    let mut tools_from_start = builder.subscribe_to(EventFilter::tool_execution());
    let h = Harness::start_with(builder, agent().tool(progress), script).await;
    let mut errors_and_close =
        h.session.subscribe_to(EventFilter::only([EventType::Error, EventType::SessionClosed]));
    h.turn("go").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.session.wait_for_idle().await.unwrap();
    let everything = h.close().await;

    let mut tools = Vec::new();
    while let Some(event) = tools_from_start.recv().await {
        tools.push(event);
    }
    // Exactly the tool lifecycle events of the unfiltered stream, in the same order; the
    // stream ends when the session closes.
    let expected: Vec<SessionEvent> = everything
        .iter()
        .filter(|e| EventFilter::tool_execution().contains(e.kind.event_type()))
        .cloned()
        .collect();
    assert_eq!(tools, expected);
    let types: Vec<EventType> = tools.iter().map(|e| e.kind.event_type()).collect();
    assert_eq!(
        types,
        [
            EventType::ToolCallStarted,
            EventType::ToolCallUpdated,
            EventType::ToolCallUpdated, // at 100 ms, with the result right after it
            EventType::ToolCallEnded,
            EventType::ToolReplyUpdated, // scheduled, then completed, twice
            EventType::ToolReplyUpdated,
            EventType::ToolReplyUpdated,
            EventType::ToolReplyUpdated,
        ]
    );
    let mut rest = Vec::new();
    while let Some(event) = errors_and_close.recv().await {
        rest.push(event.kind.event_type());
    }
    assert_eq!(rest, [EventType::SessionClosed]);
}

#[tokio::test(start_paused = true)]
async fn history_is_complete_when_nobody_subscribes_to_items() {
    use colloquy::events::{EventFilter, EventType};
    let mut builder = Session::builder().llm(ScriptedLlm::new(vec![text("Hello.")]));
    let mut states = builder.subscribe_to(EventFilter::only([EventType::AgentState]));
    let session = builder.start(agent()).await.unwrap();
    session.user_turn("hi").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // No subscriber takes `x_conversation_item_added`: the items are still committed.
    assert_eq!(show(&session.history().await.unwrap()[1..]), ["user(hi)", "asst(Hello.)"]);
    session.close().await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = states.recv().await {
        seen.push(event.kind.event_type());
    }
    assert!(!seen.is_empty() && seen.iter().all(|t| *t == EventType::AgentState));
}

#[derive(Default)]
struct Ledger {
    calls: AtomicU32,
    notes: Mutex<Vec<String>>,
}

#[tokio::test(start_paused = true)]
async fn tools_read_session_userdata_and_their_call() {
    let note = FunctionTool::new("note", "Note.", |ctx: RunContext, _a: NoArgs| async move {
        let ledger =
            ctx.userdata::<Arc<Ledger>>().ok_or_else(|| ToolError::internal("no ledger"))?;
        ledger.calls.fetch_add(1, Ordering::SeqCst);
        ledger.notes.lock().unwrap().push(format!(
            "{}@{}/{}",
            ctx.call_id(),
            ctx.speech_id(),
            ctx.agent_id()
        ));
        Ok::<_, ToolError>("noted")
    });
    let ledger = Arc::new(Ledger::default());
    let h = Harness::start_with(
        Session::builder().userdata(Arc::clone(&ledger)),
        agent().tool(note),
        vec![call("n1", "note", "{}")],
    )
    .await;
    h.turn("note it").await;
    assert_eq!(h.ctx("A").await[2], r#"out(#n1,"noted",ok,rr=T)"#);
    assert_eq!(ledger.calls.load(Ordering::SeqCst), 1);
    assert_eq!(*ledger.notes.lock().unwrap(), ["n1@s1/A"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn close_waits_for_running_tools_and_ends_every_call_once() {
    let slow = sleeper("slow", 400, "finished");
    let h = Harness::start(agent().tool(slow), vec![call("c1", "slow", "{}")]).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let session = h.session.clone();
    let before = tokio::time::Instant::now();
    let events = h.close().await;
    assert_eq!(before.elapsed(), Duration::from_millis(310), "close waited for the tool");
    assert_eq!(tool_events(&events), ["S(c1)", r#"E(c1,done,"finished")"#, r#"FTE["c1"]"#]);
    assert!(matches!(events.last().unwrap().kind, EventKind::SessionClosed { .. }));
    assert_eq!(session.user_turn("hello?").await, Err(SessionError::Closed));
    assert_eq!(session.close().await, Ok(()), "closing twice is fine");
}
