//! Retries (docs/decisions.md#retries-and-hook): a tool marked safe
//! to retry runs again after an error or an attempt's timeout, with exponential backoff on the
//! session clock; each retry is an `x_tool_call_retry` event, and the model sees one call and
//! its final outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use colloquy::events::{EventKind, SessionEvent};
use colloquy::prelude::*;
use colloquy::tools::{RetryPolicy, function_tool};

/// A tool whose first `failing` attempts return an error; `attempts` counts every run.
fn flaky(attempts: Arc<AtomicU32>, failing: u32) -> FunctionTool {
    FunctionTool::new("lookup", "Look up.", move |_ctx: RunContext, _a: NoArgs| {
        let attempts = Arc::clone(&attempts);
        async move {
            let n = attempts.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= failing {
                return Err(ToolError::new(format!("busy ({n})")));
            }
            Ok(format!("found on attempt {n}"))
        }
    })
}

/// The `x_tool_call_retry` events: `(at_ms, "call_id attempt reason")`.
fn retries(events: &[SessionEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallRetry { call_id, attempt, reason } => {
                Some((e.at_ms, format!("{call_id} {attempt} {reason}")))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_flaky_tool_is_retried_with_exponential_backoff_and_the_model_sees_one_call() {
    let attempts = Arc::new(AtomicU32::new(0));
    let tool = flaky(Arc::clone(&attempts), 2).retry(RetryPolicy::new(3, ms(200)));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "lookup", "{}"), text("Found it.")],
    )
    .await;
    h.turn("go").await;
    // Calls start 10 ms in; waits of 200 ms, then 400 ms.
    assert_eq!(
        retries(h.events()),
        vec![(10, "c1 2 busy (1)".to_string()), (210, "c1 3 busy (2)".to_string())]
    );
    assert_eq!(ended_at(h.events()), vec![(610, "c1 done found on attempt 3".to_string())]);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    // One started call, one end; the model reads only the final outcome.
    assert_eq!(h.tool_events(), vec!["S(c1)", "E(c1,done,\"found on attempt 3\")", "FTE[\"c1\"]"]);
    assert_eq!(
        h.hist().await,
        vec![
            "user(go)",
            "call(lookup#c1 {})",
            "out(#c1,\"found on attempt 3\",ok,rr=T)",
            "asst(Found it.)"
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_the_last_error_is_the_outcome() {
    let attempts = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::new(3, ms(100)).factor(1);
    let tool = flaky(Arc::clone(&attempts), 10).retry(policy);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "lookup", "{}"), text("It is down.")],
    )
    .await;
    h.turn("go").await;
    // A constant backoff (factor 1).
    assert_eq!(
        retries(h.events()),
        vec![(10, "c1 2 busy (1)".to_string()), (110, "c1 3 busy (2)".to_string())]
    );
    assert_eq!(ended_at(h.events()), vec![(210, "c1 error busy (3)".to_string())]);
    assert!(h.hist().await.contains(&"out(#c1,\"busy (3)\",ERR,rr=T)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_never_retried() {
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&attempts);
    let tool = FunctionTool::new("boom", "Panics.", move |_ctx: RunContext, _a: NoArgs| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            if true {
                panic!("bug");
            }
            Ok::<_, ToolError>("never")
        }
    })
    .retry(RetryPolicy::new(3, ms(100)));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "boom", "{}"), text("Sorry.")],
    )
    .await;
    h.turn("go").await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert!(retries(h.events()).is_empty());
    assert_eq!(ended_at(h.events()), vec![(10, "c1 error panic: bug".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn updates_from_a_failed_attempt_stay_delivered() {
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&attempts);
    let tool = FunctionTool::new("job", "A job.", move |ctx: RunContext, _a: NoArgs| {
        let counter = Arc::clone(&counter);
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            ctx.update(format!("attempt {n} started")).await?;
            tokio::time::sleep(ms(100)).await;
            if n == 1 {
                return Err(ToolError::new("lost the connection"));
            }
            Ok::<_, ToolError>(format!("done on attempt {n}"))
        }
    })
    .retry(RetryPolicy::new(2, ms(50)));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "job", "{}"), text("Started."), text("Progress."), text("Done.")],
    )
    .await;
    h.turn("go").await;
    tokio::time::sleep(ms(1_000)).await;
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(retries(h.events()), vec![(110, "c1 2 lost the connection".to_string())]);
    assert_eq!(ended_at(h.events()), vec![(260, "c1_final done done on attempt 2".to_string())]);
    let hist = h.hist().await;
    // The first attempt's update is the provisional output; the second's is a pair; then the
    // final result: one logical call.
    let has = |prefix: &str| hist.iter().any(|item| item.starts_with(prefix));
    assert!(has("out(#c1,\"Progress from `job`: attempt 1 started"), "{hist:#?}");
    assert!(has("out(#c1_update_1,\"Progress from `job`: attempt 2 started"), "{hist:#?}");
    assert!(hist.contains(&"out(#c1_final,\"done on attempt 2\",ok,rr=T)".to_string()));
    let started = h.events().iter().filter(|e| matches!(e.kind, EventKind::ToolCallStarted { .. }));
    assert_eq!(started.count(), 1);
    h.close().await;
}

/// Attempt `n` sleeps `sleeps[n-1]` ms (the last entry for later ones), then answers.
fn slow_then_fast(attempts: Arc<AtomicU32>, sleeps: &'static [u64]) -> FunctionTool {
    FunctionTool::new("fetch", "Fetch.", move |_ctx: RunContext, _a: NoArgs| {
        let attempts = Arc::clone(&attempts);
        async move {
            let n = attempts.fetch_add(1, Ordering::SeqCst) as usize;
            tokio::time::sleep(ms(sleeps[n.min(sleeps.len() - 1)])).await;
            Ok::<_, ToolError>(format!("fetched on attempt {}", n + 1))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_timeout_is_dropped_and_retried() {
    let attempts = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::new(3, ms(100)).attempt_timeout(ms(1_000));
    let tool = slow_then_fast(Arc::clone(&attempts), &[5_000, 10]).retry(policy);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "fetch", "{}"), text("Got it.")],
    )
    .await;
    h.turn("go").await;
    let why = "Tool `fetch` timed out after 1 s";
    assert_eq!(retries(h.events()), vec![(1_010, format!("c1 2 {why}"))]);
    assert_eq!(ended_at(h.events()), vec![(1_120, "c1 done fetched on attempt 2".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_deadline_covers_every_attempt_and_backoff() {
    let attempts = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::new(5, ms(200)).attempt_timeout(ms(1_000));
    let tool = slow_then_fast(Arc::clone(&attempts), &[5_000]).retry(policy).deadline(ms(1_500));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "fetch", "{}"), text("Too slow.")],
    )
    .await;
    h.turn("go").await;
    tokio::time::sleep(ms(10_000)).await;
    // One retry fits before the deadline; it ends the whole call, and nothing runs after.
    assert_eq!(retries(h.events()).len(), 1);
    let why = "Tool `fetch` timed out after 1.5 s";
    assert_eq!(ended_at(h.events()), vec![(1_510, format!("c1 timed_out {why}"))]);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_backoff_ends_the_call_cancelled_at_once() {
    let attempts = Arc::new(AtomicU32::new(0));
    let tool =
        flaky(Arc::clone(&attempts), 10).retry(RetryPolicy::new(3, ms(10_000))).cancellable();
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "lookup", "{}"), text("Cancelled.")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    h.session.cancel_tool_call("c1").await.unwrap();
    tokio::time::sleep(ms(60_000)).await;
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(retries(h.events()), vec![(10, "c1 2 busy (1)".to_string())]);
    assert_eq!(ended_at(h.events()), vec![(1_000, "c1 cancelled ".to_string())]);
    // No attempt ran after the cancel.
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    h.close().await;
}

static MACRO_ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// A lookup that fails once.
#[function_tool(retry(attempts = 3, backoff = "200ms", factor = 3))]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    if MACRO_ATTEMPTS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(ToolError::new("timeout talking to the order service"));
    }
    Ok(format!("order {order_id} shipped"))
}

#[tokio::test(start_paused = true)]
async fn the_function_tool_macro_takes_a_retry_policy() {
    let tool = lookup_order();
    let policy = tool.retry_policy().expect("retry set");
    assert_eq!((policy.attempts, policy.backoff, policy.factor), (3, ms(200), 3));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "lookup_order", r#"{"order_id":"42"}"#), text("Shipped.")],
    )
    .await;
    h.turn("where is 42").await;
    assert_eq!(
        retries(h.events()),
        vec![(10, "c1 2 timeout talking to the order service".to_string())]
    );
    assert_eq!(ended_at(h.events()), vec![(210, "c1 done order 42 shipped".to_string())]);
    h.close().await;
}
