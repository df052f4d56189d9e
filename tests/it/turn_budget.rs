//! A user turn's tool-call budget (docs/decisions.md#edges-tool-deadlines): a model
//! that calls a tool after every deferred reply, or many at once, makes at most
//! `max_tool_calls_per_turn` calls; then requests go out with `tool_choice` none and the host
//! hears `x_tool_budget_exhausted`; the next user turn starts afresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use colloquy::events::{EventKind, SessionEvent};
use colloquy::llm::ToolChoice;
use colloquy::prelude::*;

/// A background booking: one update, then the confirmation 100 ms later.
fn book_flight(bookings: Arc<AtomicU32>) -> FunctionTool {
    FunctionTool::new("book_flight", "Book.", move |ctx: RunContext, _a: NoArgs| {
        let bookings = Arc::clone(&bookings);
        async move {
            ctx.update("booking").await?;
            tokio::time::sleep(ms(100)).await;
            let n = bookings.fetch_add(1, Ordering::SeqCst) + 1;
            Ok::<_, ToolError>(format!("booked BK-{n}"))
        }
    })
}

fn started(events: &[SessionEvent]) -> usize {
    events.iter().filter(|e| matches!(e.kind, EventKind::ToolCallStarted { .. })).count()
}

fn exhausted(events: &[SessionEvent]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolBudgetExhausted { limit } => Some(limit),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_model_that_rebooks_after_every_deferred_reply_stops_at_the_budget() {
    let bookings = Arc::new(AtomicU32::new(0));
    let llm = rebooking();
    let mut builder = Session::builder().llm(llm.clone()).max_tool_calls_per_turn(3);
    let mut events = builder.subscribe();
    let session = builder
        .start(Agent::new("A", "inst").tool(book_flight(Arc::clone(&bookings))))
        .await
        .unwrap();
    session.user_turn("book me a flight").await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    session.wait_for_idle().await.unwrap();
    let mut seen = Vec::new();
    while let Some(e) = events.try_recv() {
        seen.push(e);
    }
    assert_eq!(started(&seen), 3, "three calls in the turn, then no more");
    assert_eq!(bookings.load(Ordering::SeqCst), 3);
    assert_eq!(exhausted(&seen), [3], "the host is told once");
    let last = llm.requests().pop().unwrap();
    assert_eq!(last.tool_choice, Some(ToolChoice::None));

    // A new user turn may call tools again.
    session.user_turn("and one more").await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    session.wait_for_idle().await.unwrap();
    while let Some(e) = events.try_recv() {
        seen.push(e);
    }
    assert_eq!(started(&seen), 6);
    assert_eq!(exhausted(&seen), [3, 3]);
    session.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn calls_of_one_response_past_the_budget_are_answered_and_not_run() {
    let bookings = Arc::new(AtomicU32::new(0));
    let calls = (1..=5).map(|i| ScriptedCall::new(format!("c{i}"), "book_flight", "{}"));
    let builder = Session::builder().max_tool_calls_per_turn(3);
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(book_flight(Arc::clone(&bookings))),
        vec![ScriptedResponse::calls(calls), text("Three are booked.")],
    )
    .await;
    h.session.user_turn("book five").await.unwrap();
    tokio::time::sleep(ms(5_000)).await;
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(started(h.events()), 3);
    assert_eq!(exhausted(h.events()), [3]);
    let refused = colloquy_model::text::tool_budget_exhausted(3);
    let hist = h.hist().await;
    for id in ["c4", "c5"] {
        assert!(hist.contains(&format!("out(#{id},{refused:?},ERR,rr=T)")), "{hist:#?}");
    }
    // The tool reply to the step is the last request that could call tools: it cannot.
    assert_eq!(h.requests()[1].tool_choice, Some(ToolChoice::None));
    assert_eq!(bookings.load(Ordering::SeqCst), 3);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_zero_calls_still_tells_the_host_once_a_turn() {
    let builder = Session::builder().max_tool_calls_per_turn(0);
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(book_flight(Arc::default())),
        vec![text("No tools today."), text("Still none.")],
    )
    .await;
    h.turn("book").await;
    h.turn("book again").await;
    assert_eq!(exhausted(h.events()), [0, 0]);
    assert!(h.requests().iter().all(|r| r.tool_choice == Some(ToolChoice::None)));
    h.close().await;
}

/// A model that books again on every request that may call tools, as a small real model did.
fn rebooking() -> ScriptedLlm {
    ScriptedLlm::new(Vec::<ScriptedResponse>::new())
        .with_fallback(|i, request| match request.tool_choice {
            Some(ToolChoice::None) => ScriptedResponse::text("Your flight is booked."),
            _ => ScriptedResponse::text("Booking.").with_call(ScriptedCall::new(
                format!("b{i}"),
                "book_flight",
                "{}",
            )),
        })
        .recording()
}

#[tokio::test(start_paused = true)]
async fn a_resumed_turn_keeps_what_it_used_of_its_budget() {
    use crate::durable::{crashed, stored};
    use colloquy::store::{MemoryStore, Record};
    let agent = |bookings: &Arc<AtomicU32>| {
        let tool = book_flight(Arc::clone(bookings)).on_interrupted(OnInterrupted::Rerun);
        Agent::new("A", "inst").tool(tool)
    };
    let store = Arc::new(MemoryStore::new());
    let first_bookings = Arc::new(AtomicU32::new(0));
    let builder =
        Session::builder().llm(rebooking()).max_tool_calls_per_turn(2).store(store.clone());
    let first = builder.start(agent(&first_bookings)).await.unwrap();
    first.user_turn("book me a flight").await.unwrap();
    let id = first.id().to_owned();
    // The turn's second call (after `b0`'s result) started: the process dies while it runs.
    let starts = |r: &Record| matches!(r, Record::CallStarted { call, .. } if call.call_id == "b2");
    stored(&*store, &id, starts).await;
    assert_eq!(first_bookings.load(Ordering::SeqCst), 1);
    let after_crash = crashed(&*store, &id);

    let bookings = Arc::new(AtomicU32::new(0));
    let llm = rebooking();
    let mut builder =
        Session::builder().llm(llm.clone()).max_tool_calls_per_turn(2).store(after_crash);
    let mut events = builder.subscribe();
    let agents = |name: &str| (name == "A").then(|| agent(&bookings));
    let session = builder.resume(&id, agents).await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    session.wait_for_idle().await.unwrap();
    let seen: Vec<SessionEvent> = std::iter::from_fn(|| events.try_recv()).collect();
    // `b2` runs again; the model, asked to reply to its result, may call no more.
    assert_eq!(bookings.load(Ordering::SeqCst), 1);
    assert!(!llm.requests().is_empty());
    assert!(llm.requests().iter().all(|r| r.tool_choice == Some(ToolChoice::None)));
    assert!(exhausted(&seen).is_empty(), "announced before the crash already");
    drop(first);
    session.close().await.unwrap();
}
