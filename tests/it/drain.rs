//! `drain_timeout` bounds every running call of a handoff or a close, blocking ones included,
//! counted from when the drain starts (decision 7).

use crate::common::*;
use colloquy::events::{EventKind, SessionEvent};
use colloquy::prelude::*;
use tokio::time::Instant;

/// A blocking call (no update) that takes 5 s and cannot be cancelled.
fn slow() -> FunctionTool {
    sleeper("slow", 5_000, "done at last")
}

fn ended_at(events: &[SessionEvent], id: &str) -> (u64, String) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnded { id: ended, status, message, .. } if ended == id => {
                Some((e.at_ms, format!("{status:?} {}", message.as_deref().unwrap_or(""))))
            }
            _ => None,
        })
        .expect("the call ended")
}

#[tokio::test(start_paused = true)]
async fn a_close_aborts_a_blocking_call_at_its_drain_timeout() {
    let builder = Session::builder().drain_timeout(Some(ms(1_000)));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(slow()),
        vec![call("c1", "slow", "{}"), text("It finished.")],
    )
    .await;
    let start = Instant::now();
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let events = h.close().await;
    assert_eq!(start.elapsed(), ms(1_100), "closed one drain timeout after it was asked");
    assert_eq!(ended_at(&events, "c1"), (1_100, "Error drain timeout".into()));
}

#[tokio::test(start_paused = true)]
async fn a_handoff_aborts_a_blocking_call_at_its_drain_timeout() {
    let builder = Session::builder().drain_timeout(Some(ms(1_000)));
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(slow()),
        vec![call("c1", "slow", "{}"), text("It was cut short.")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.update_agent(Agent::new("B", "inst B")).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = h.events().to_vec();
    assert_eq!(ended_at(&events, "c1"), (1_100, "Error drain timeout".into()));
    let handoff = at_ms(
        &events,
        |k| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    assert!(handoff < 1_200, "the handoff followed the drain timeout: {handoff} ms");
    h.close().await;
}

/// A blocking call that waits for a cancellation that never comes: it is not cancellable.
fn forever() -> FunctionTool {
    FunctionTool::new("forever", "Waits.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.cancelled().await;
        Ok::<_, ToolError>("cancelled after all")
    })
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_returns_cannot_hold_a_close_past_its_drain_timeout() {
    let builder = Session::builder().drain_timeout(Some(ms(500)));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(forever()),
        vec![call("c1", "forever", "{}")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(50)).await;
    let start = Instant::now();
    let events = h.close().await;
    assert_eq!(start.elapsed(), ms(500));
    assert_eq!(ended_at(&events, "c1").1, "Error drain timeout");
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_reply_waiting_on_a_call_cannot_hold_a_close_past_its_drain_timeout() {
    // The user interrupts the reply waiting for the call at 320 ms: the close is still
    // bounded by `drain_timeout`.
    let builder = Session::builder().drain_timeout(Some(ms(500)));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(forever()),
        vec![call("c1", "forever", "{}")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(320)).await;
    let session = h.session.clone();
    tokio::spawn(async move { session.interrupt().await });
    tokio::time::sleep(ms(10)).await;
    let start = Instant::now();
    let closed = tokio::time::timeout(ms(60_000), h.close()).await;
    let events = closed.expect("the close ended within a minute");
    assert_eq!(start.elapsed(), ms(500));
    assert_eq!(ended_at(&events, "c1").1, "Error drain timeout");
}

/// A speech still running when the handoff's drain times out makes the agent's first call to
/// its own tools: the toolset that starts for it is expired like the others, so the call is
/// refused and the handoff does not wait for it (decisions 7 and 81).
#[tokio::test(start_paused = true)]
async fn a_first_call_after_the_drain_expired_is_refused() {
    let ext = Toolset::new_async("ext").tool(sleeper("ext_slow", 5_000, "ext done")).tool(sleeper(
        "ext_medium",
        1_050,
        "medium done",
    ));
    let a = Agent::new("A", "inst").toolset(ext).tool(sleeper("local_slow", 5_000, "local done"));
    let builder = Session::builder().drain_timeout(Some(ms(1_000)));
    let both =
        [ScriptedCall::new("c1", "ext_slow", "{}"), ScriptedCall::new("c1b", "ext_medium", "{}")];
    let script = vec![ScriptedResponse::calls(both), call("c2", "local_slow", "{}"), text("done")];
    let mut h = Harness::start_with(builder, a, script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.update_agent(Agent::new("B", "inst B")).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = h.events().to_vec();
    let new_agent =
        |k: &EventKind| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B");
    let handoff = at_ms(&events, new_agent);
    assert!(handoff < 1_300, "the handoff waited past its drain timeout: {handoff} ms");
    let history = h.session.history().await.unwrap();
    let c2 = history.iter().filter_map(|i| i.as_function_call_output()).find(|o| o.call_id == "c2");
    assert_eq!(c2.map(|o| o.output.as_str()), Some("drain timeout"));
    h.close().await;
}
