//! Tool controls together (docs/decisions.md#tool-control-order): the before-call hook, then
//! approval, then a place under a cap, then the body. A pharmacy desk's `refill` combines them
//! all: the hook sees every call first (with its session), a person is asked about each call
//! the hook lets through at once, and no waiting call holds a place or a reply. Then one test
//! per pair of controls that docs/tool-controls.md states and no other module shows.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::limits::ended as ends;
use colloquy::events::EventKind;
use colloquy::prelude::*;
use colloquy::tools::{DuplicateScope, OnDuplicate};
use serde_json::Value;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Refill {
    patient: String,
    #[serde(default = "one")]
    packs: u64,
}

fn one() -> u64 {
    1
}

/// `refill`: approval, one at a time, a deadline, remembered for ten minutes; counts its runs.
fn refill(runs: &Arc<AtomicU32>) -> FunctionTool {
    let runs = Arc::clone(runs);
    FunctionTool::new("refill", "Refill a prescription.", move |_c: RunContext, a: Refill| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(500)).await;
            Ok::<_, ToolError>(format!("refilled {} x{}", a.patient, a.packs))
        }
    })
    .requires_approval()
    .max_concurrent(2)
    .deadline(ms(60_000))
    .idempotent(Duration::from_secs(600))
}

type Seen = Arc<Mutex<Vec<PendingToolCall>>>;

/// A session whose audit hook records every call and refuses patient "X" (a guardrail).
async fn desk(runs: &Arc<AtomicU32>, script: Vec<ScriptedResponse>) -> (Harness, Seen) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let builder = Session::builder().before_tool_call(move |call: PendingToolCall| {
        let log = Arc::clone(&log);
        async move {
            let refused = call.arguments["patient"] == "X";
            log.lock().unwrap().push(call);
            Ok(match refused {
                true => BeforeCall::Reject("patient X needs a doctor's review".into()),
                false => BeforeCall::Run,
            })
        }
    });
    let h = Harness::start_with(builder, Agent::new("A", "inst").tool(refill(runs)), script).await;
    (h, seen)
}

fn refill_call(id: &str, patient: &str) -> ScriptedCall {
    ScriptedCall::new(id, "refill", format!(r#"{{"patient":"{patient}"}}"#))
}

fn asked(h: &mut Harness) -> Vec<String> {
    h.events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolApprovalRequested { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_hook_decides_first_every_call_it_lets_through_is_asked_at_once_and_none_holds_the_reply()
 {
    let runs = Arc::new(AtomicU32::new(0));
    let script = vec![
        ScriptedResponse::calls([
            refill_call("r1", "A"),
            refill_call("r2", "B"),
            refill_call("r3", "C"),
            refill_call("r4", "X"),
        ]),
        text("I have asked for approval."),
    ];
    let (mut h, seen) = desk(&runs, script).await;
    h.session.user_turn("refill for A, B, C and X").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    // The hook saw all four, with the session, before anyone was asked.
    let seen = seen.lock().unwrap().clone();
    let ids: Vec<&str> = seen.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["r1", "r2", "r3", "r4"]);
    assert!(seen.iter().all(|c| c.session_id == h.session.id() && c.needs_approval));
    // The guardrail's refusal is never put to a person; the other three are, at once.
    assert_eq!(asked(&mut h), ["r1", "r2", "r3"]);
    let hist = h.hist().await;
    let refused = "The host rejected `refill`: patient X needs a doctor's review";
    assert!(hist.contains(&format!("out(#r4,{refused:?},ERR,rr=T)")), "{hist:#?}");
    let executed =
        h.events().iter().any(|e| matches!(e.kind, EventKind::FunctionToolsExecuted { .. }));
    assert!(executed, "the reply does not wait for approvals");
    // All approved at once: two run, the third waits for a place, then runs.
    for id in ["r1", "r2", "r3"] {
        h.session.approve(id).await.unwrap();
    }
    tokio::time::sleep(ms(2_000)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let ended: Vec<String> = ended_at(h.events())
        .into_iter()
        .map(|(at, e)| format!("{at} {}", e.split(' ').take(2).collect::<Vec<_>>().join(" ")))
        .collect();
    assert_eq!(
        ended,
        ["10 r4 error", "600 r1_final done", "600 r2_final done", "1100 r3_final done"]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_remembered_result_passes_the_hook_and_is_never_asked_about_again() {
    let runs = Arc::new(AtomicU32::new(0));
    let script = vec![
        ScriptedResponse::calls([refill_call("r1", "A")]),
        text("Asked."),
        text("Refilled."),
        ScriptedResponse::calls([refill_call("r2", "A")]),
        text("Already refilled."),
    ];
    let (mut h, seen) = desk(&runs, script).await;
    h.session.user_turn("refill for A").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.approve("r1").await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    h.turn("refill for A again").await;
    let seen = seen.lock().unwrap().clone();
    let flags: Vec<(&str, bool, bool)> =
        seen.iter().map(|c| (c.call_id.as_str(), c.needs_approval, c.remembered)).collect();
    assert_eq!(flags, [("r1", true, false), ("r2", false, true)]);
    assert_eq!(asked(&mut h), ["r1"], "a remembered result asks nobody");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let cached = h.events().iter().any(|e| {
        matches!(&e.kind, EventKind::ToolCallEnded { call_id, cached: true, .. } if call_id == "r2")
    });
    assert!(cached, "r2 is answered from memory");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_approver_is_shown_the_arguments_the_hook_rewrote() {
    let runs = Arc::new(AtomicU32::new(0));
    let builder = Session::builder().before_tool_call(|call: PendingToolCall| async move {
        let mut arguments = call.arguments;
        arguments.insert("packs".into(), Value::from(1));
        Ok(BeforeCall::Rewrite(arguments))
    });
    let script = vec![
        ScriptedResponse::calls([ScriptedCall::new(
            "r1",
            "refill",
            r#"{"patient":"A","packs":9}"#,
        )]),
        text("Asked."),
    ];
    let mut h =
        Harness::start_with(builder, Agent::new("A", "inst").tool(refill(&runs)), script).await;
    h.session.user_turn("nine packs for A").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let shown: Vec<String> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolApprovalRequested { arguments, .. } => Some(arguments.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(shown, [r#"{"patient":"A","packs":1}"#]);
    h.session.approve("r1").await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    let done = h.events().iter().any(|e| {
        matches!(&e.kind, EventKind::ToolCallEnded { message: Some(m), .. } if m == "refilled A x1")
    });
    assert!(done, "the rewrite ran");
    h.close().await;
}

// Pairs of controls that docs/tool-controls.md states and no other test shows.

/// `name`: sleeps `ms_`, counting its runs (a run is a body that started), then says `done`.
fn job(name: &'static str, ms_: u64, runs: &Arc<AtomicU32>) -> FunctionTool {
    let runs = Arc::clone(runs);
    FunctionTool::new(name, "A job.", move |_c: RunContext, _a: NoArgs| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(ms_)).await;
            Ok::<_, ToolError>("done")
        }
    })
}

type Ids = Arc<Mutex<Vec<String>>>;

/// A builder whose hook records each call id, waits `delay` ms, and lets the call run.
fn slow_hook(delay: u64) -> (colloquy::session::SessionBuilder, Ids) {
    let seen: Ids = Arc::default();
    let log = Arc::clone(&seen);
    let builder = Session::builder().before_tool_call(move |call: PendingToolCall| {
        let log = Arc::clone(&log);
        async move {
            log.lock().unwrap().push(call.call_id);
            tokio::time::sleep(ms(delay)).await;
            Ok::<_, ToolError>(BeforeCall::Run)
        }
    });
    (builder, seen)
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_call_while_the_hook_decides_ends_it_and_nobody_is_asked() {
    let runs = Arc::new(AtomicU32::new(0));
    let (builder, seen) = slow_hook(1_000);
    let tool = job("refund", 100, &runs).requires_approval().cancellable();
    let script = vec![call("c1", "refund", "{}"), text("Cancelled.")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    h.session.cancel_tool_call("c1").await.unwrap();
    tokio::time::sleep(ms(5_000)).await;
    assert_eq!(*seen.lock().unwrap(), ["c1"]);
    assert_eq!(ends(h.events()), [(500, "c1 cancelled".to_string())]);
    assert!(asked(&mut h).is_empty(), "the hook's answer came too late to ask anyone");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passing_while_the_hook_decides_ends_the_call_before_anyone_is_asked() {
    // The deadline counts from admission, the hook's time included (decision 70).
    let runs = Arc::new(AtomicU32::new(0));
    let (builder, _) = slow_hook(2_000);
    let tool = job("refund", 100, &runs).requires_approval().deadline(ms(1_000));
    let script = vec![call("c1", "refund", "{}"), text("Too slow.")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    tokio::time::sleep(ms(5_000)).await;
    assert_eq!(ends(h.events()), [(1_010, "c1 timed_out".to_string())]);
    assert!(asked(&mut h).is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_duplicate_never_reaches_the_hook() {
    // Admission (the duplicate policy) comes before `tool_call_started` and the hook.
    let runs = Arc::new(AtomicU32::new(0));
    let (builder, seen) = slow_hook(0);
    let tool = job("sync", 1_000, &runs).on_duplicate(OnDuplicate::Reject, DuplicateScope::Name);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "sync", "{}"),
            ScriptedCall::new("c2", "sync", "{}"),
        ]),
        text("Synced."),
    ];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    assert_eq!(*seen.lock().unwrap(), ["c1"]);
    let refused = h
        .events()
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ToolCallRefused { call_id, .. } if call_id == "c2"));
    assert!(refused);
    assert_eq!(ends(h.events()), [(1_010, "c1 done".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn replace_cancels_a_call_waiting_for_approval_and_the_new_one_is_asked() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = job("refund", 100, &runs)
        .requires_approval()
        .cancellable()
        .on_duplicate(colloquy::tools::OnDuplicate::Replace, colloquy::tools::DuplicateScope::Name);
    let script = vec![
        call("c1", "refund", "{}"),
        text("Asked."),
        call("c2", "refund", "{}"),
        text("Asked again."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.turn("refund").await;
    h.turn("no, refund again").await;
    assert_eq!(asked(&mut h), ["c1", "c2"]);
    assert_eq!(ends(h.events()), [(30, "c1_final cancelled".to_string())]);
    h.session.approve("c2").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the replacement ran");
    h.close().await;
}

/// A session whose toolset runs one call at a time: `slow` (c1, `slow_ms`) and `refund` (c2)
/// are called in one step, so c2 waits for c1's place once it may run.
async fn behind_a_slow_call(slow_ms: u64, refund: FunctionTool) -> Harness {
    let api = Toolset::new_async("api")
        .max_concurrent(1)
        .tool(sleeper("slow", slow_ms, "slow done"))
        .tool(refund);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "slow", "{}"),
            ScriptedCall::new("c2", "refund", "{}"),
        ]),
        text("Ok."),
    ];
    let h = Harness::start(Agent::new("A", "inst").toolset(api), script).await;
    h.session.user_turn("go").await.unwrap();
    h
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_has_no_heartbeat_until_its_body_starts() {
    // Five seconds waiting for approval, then for a place, with a one-second heartbeat: the
    // heartbeat counts from the body's start (decision 70).
    let runs = Arc::new(AtomicU32::new(0));
    let refund = job("refund", 500, &runs).requires_approval().heartbeat(ms(1_000));
    let mut h = behind_a_slow_call(10_000, refund).await;
    tokio::time::sleep(ms(5_000)).await;
    h.session.approve("c2").await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    assert_eq!(
        ends(h.events()),
        [(10_010, "c1 done".to_string()), (10_510, "c2_final done".to_string())]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_retried_call_is_hooked_and_asked_once_and_keeps_its_place_through_backoffs() {
    // Each call's first attempt fails; the retry comes after a 1 s backoff. One place: c2 gets
    // it only when c1 has ended, not during c1's backoff.
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&attempts);
    let tool = FunctionTool::new("fetch", "Fetch.", move |_c: RunContext, _a: NoArgs| {
        let counter = Arc::clone(&counter);
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(100)).await;
            match n % 2 {
                0 => Err(ToolError::new("busy")),
                _ => Ok::<_, ToolError>("fetched"),
            }
        }
    })
    .requires_approval()
    .max_concurrent(1)
    .retry(colloquy::tools::RetryPolicy::new(2, ms(1_000)));
    let (builder, seen) = slow_hook(0);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "fetch", "{}"),
            ScriptedCall::new("c2", "fetch", "{}"),
        ]),
        text("Asked."),
    ];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.approve("c1").await.unwrap();
    h.session.approve("c2").await.unwrap();
    tokio::time::sleep(ms(5_000)).await;
    assert_eq!(*seen.lock().unwrap(), ["c1", "c2"], "the hook runs once per call");
    assert_eq!(asked(&mut h), ["c1", "c2"], "asked once per call, not per attempt");
    assert_eq!(
        ends(h.events()),
        [(1_300, "c1_final done".to_string()), (2_500, "c2_final done".to_string())]
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_remembered_result_needs_no_place_under_a_full_cap() {
    let runs = Arc::new(AtomicU32::new(0));
    let api = Toolset::new_async("api")
        .max_concurrent(1)
        .tool(sleeper("slow", 1_000, "slow done"))
        .tool(job("quote", 100, &runs).idempotent(ms(600_000)));
    let script = vec![
        call("c1", "quote", "{}"),
        text("Quoted."),
        ScriptedResponse::calls([
            ScriptedCall::new("c2", "slow", "{}"),
            ScriptedCall::new("c3", "quote", "{}"),
        ]),
        text("Quoted again."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").toolset(api), script).await;
    h.turn("quote").await;
    h.turn("again").await;
    // c2 holds the only place; c3 is answered from memory at once, without one.
    assert_eq!(
        ends(h.events()),
        [
            (110, "c1 done".to_string()),
            (130, "c3 done cached".to_string()),
            (1_130, "c2 done".to_string())
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_agent_scoped_memory_goes_with_its_agent() {
    let runs = Arc::new(AtomicU32::new(0));
    let quote = job("quote", 100, &runs).idempotent(ms(600_000));
    let second = Agent::new("B", "inst b").tool(quote.clone());
    let script = vec![call("c1", "quote", "{}"), text("Quoted."), call("c2", "quote", "{}")];
    let mut h = Harness::start(Agent::new("A", "inst").tool(quote), script).await;
    h.turn("quote").await;
    h.session.update_agent(second).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    h.turn("quote again").await;
    let ends: Vec<String> = ends(h.events()).into_iter().map(|(_, e)| e).collect();
    assert_eq!(ends, ["c1 done", "c2 done"], "B's toolset remembers nothing of A's");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_drain_still_ends_an_awaited_call_at_its_deadline() {
    // A close awaits a call that is not cancellable; its own deadline, shorter than the drain
    // timeout, ends it first.
    let runs = Arc::new(AtomicU32::new(0));
    let tool = job("sync", 60_000, &runs).deadline(ms(2_000));
    let script = vec![call("c1", "sync", "{}")];
    let h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    let events = h.close().await;
    assert_eq!(ends(&events), [(2_010, "c1 timed_out".to_string())]);
    let closed = events.last().map(|e| e.at_ms);
    assert_eq!(closed, Some(2_010), "the close ends with its last call");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Keyed {
    key: String,
}

/// `name`: takes `ms_`, then answers `done KEY`.
fn keyed(name: &'static str, ms_: u64) -> FunctionTool {
    FunctionTool::new(name, "Keyed.", move |_c: RunContext, a: Keyed| async move {
        tokio::time::sleep(ms(ms_)).await;
        Ok::<_, ToolError>(format!("done {}", a.key))
    })
}

#[tokio::test(start_paused = true)]
async fn a_queued_call_counts_as_running_for_the_duplicate_policy() {
    // One place, duplicates by `key`: k2 waits for the place, and a second k2 is refused.
    let tool = keyed("sync", 1_000)
        .max_concurrent(1)
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::args(["key"]));
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "sync", r#"{"key":"k1"}"#),
            ScriptedCall::new("c2", "sync", r#"{"key":"k2"}"#),
            ScriptedCall::new("c3", "sync", r#"{"key":"k2"}"#),
        ]),
        text("Syncing."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    tokio::time::sleep(ms(3_000)).await;
    let refused: Vec<(String, Vec<String>)> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallRefused { call_id, duplicates, .. } => {
                Some((call_id.clone(), duplicates.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(refused, [("c3".to_string(), vec!["c2".to_string()])]);
    assert_eq!(
        ends(h.events()),
        [(1_010, "c1 done".to_string()), (2_010, "c2_final done".to_string())]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_the_hook_still_decides_holds_no_place() {
    // One place; the hook takes 1 s over c1 and no time over c2, so c2 takes the place first.
    let builder = Session::builder().before_tool_call(|call: PendingToolCall| async move {
        if call.call_id == "c1" {
            tokio::time::sleep(ms(1_000)).await;
        }
        Ok::<_, ToolError>(BeforeCall::Run)
    });
    let tool = keyed("sync", 500).max_concurrent(1);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "sync", r#"{"key":"k1"}"#),
            ScriptedCall::new("c2", "sync", r#"{"key":"k2"}"#),
        ]),
        text("Synced."),
    ];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    // c1's hook answered at 1010, when c2 (ending at 510) had freed the place.
    assert_eq!(ends(h.events()), [(510, "c2 done".to_string()), (1_510, "c1 done".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_no_longer_counts_as_a_duplicate() {
    // Its end is at its deadline; its body's wind-down does not keep the key taken.
    let tool = keyed("sync", 5_000)
        .deadline(ms(1_000))
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::Name);
    let script = vec![
        call("c1", "sync", r#"{"key":"k1"}"#),
        text("Too slow."),
        call("c2", "sync", r#"{"key":"k1"}"#),
        text("Again."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    h.turn("again").await;
    let refused = h.events().iter().any(|e| matches!(e.kind, EventKind::ToolCallRefused { .. }));
    assert!(!refused, "c2 runs: c1 ended when it timed out");
    assert_eq!(
        ends(h.events()),
        [(1_010, "c1 timed_out".to_string()), (2_030, "c2 timed_out".to_string())]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn with_a_name_scope_a_remembered_result_answers_any_arguments() {
    // Memory is keyed by the duplicate key (decision 60): a `name` scope says every call of
    // the tool is the same call, so the window's result answers a call for another key.
    let tool = keyed("sync", 100)
        .idempotent(ms(600_000))
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::Name);
    let script = vec![
        call("c1", "sync", r#"{"key":"k1"}"#),
        text("Synced."),
        call("c2", "sync", r#"{"key":"k2"}"#),
        text("Synced k2?"),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.turn("sync k1").await;
    h.turn("sync k2").await;
    assert_eq!(ends(h.events())[1], (130, "c2 done cached".to_string()));
    assert!(h.hist().await.contains(&r#"out(#c2,"done k1",ok,rr=T)"#.to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_is_a_sign_of_life_for_the_heartbeat() {
    // A 1 s heartbeat; the first attempt fails after 600 ms, the retry 300 ms later takes
    // 600 ms more. No update at all, yet the retry at 610 moved the heartbeat on.
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&attempts);
    let tool = FunctionTool::new("fetch", "Fetch.", move |_c: RunContext, _a: NoArgs| {
        let counter = Arc::clone(&counter);
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(600)).await;
            match n {
                0 => Err(ToolError::new("busy")),
                _ => Ok::<_, ToolError>("fetched"),
            }
        }
    })
    .heartbeat(ms(1_000))
    .retry(colloquy::tools::RetryPolicy::new(2, ms(300)));
    let script = vec![call("c1", "fetch", "{}"), text("Fetched.")];
    let mut h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    assert_eq!(ends(h.events()), [(1_510, "c1 done".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_handoff_waits_for_the_hook_then_rejects_the_waiting_call() {
    // The hook holds its step's reply as a body would; the drain waits for the old agent's
    // speech, then rejects the call that now waits for approval.
    let runs = Arc::new(AtomicU32::new(0));
    let (builder, _) = slow_hook(1_000);
    let tool = job("refund", 100, &runs).requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Asked."), text("B here.")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    h.session.update_agent(Agent::new("B", "b")).await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(asked(&mut h), ["c1"]);
    assert_eq!(ends(h.events()), [(1_020, "c1_final rejected".to_string())]);
    let to_b = at_ms(
        h.events(),
        |k| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    assert_eq!(to_b, 1_020);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_close_during_a_handoff_wins_and_the_handoff_never_happens() {
    // A call that cannot be cancelled holds the handoff's drain; the close takes over and
    // awaits it (within its own drain timeout), and agent B never starts.
    let runs = Arc::new(AtomicU32::new(0));
    let tool = job("sync", 2_000, &runs);
    let script = vec![call("c1", "sync", "{}"), text("Synced.")];
    let h = Harness::start(Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    h.session.update_agent(Agent::new("B", "b")).await.unwrap();
    tokio::time::sleep(ms(500)).await;
    let events = h.close().await;
    let to_b = events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"));
    assert!(!to_b, "the close cancelled the handoff");
    assert_eq!(ends(&events), [(2_010, "c1 done".to_string())]);
    assert_eq!(events.last().map(|e| e.at_ms), Some(2_010));
}

// Pairs that once contradicted decisions 58 and 70.

#[tokio::test(start_paused = true)]
async fn closing_while_the_hook_decides_rejects_a_call_that_needs_approval() {
    // Decision 58: at close, waiting calls are rejected at once. The close's drain looks
    // for calls waiting for approval when it starts; this one was still with the hook.
    let runs = Arc::new(AtomicU32::new(0));
    let (builder, _) = slow_hook(1_000);
    let tool = job("refund", 100, &runs).requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Asked.")];
    let h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    let events = h.close().await;
    let asked = events.iter().any(|e| matches!(e.kind, EventKind::ToolApprovalRequested { .. }));
    assert!(!asked, "nobody is asked about a call of a closing session");
    assert_eq!(ends(&events), [(1_010, "c1 rejected".to_string())]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_approved_late_then_queued_times_out_unrun_at_its_deadline() {
    let runs = Arc::new(AtomicU32::new(0));
    let refund = job("refund", 100, &runs).requires_approval().deadline(ms(1_000));
    let mut h = behind_a_slow_call(5_000, refund).await;
    // Approved past admission + deadline: the deadline counts from here (decision 58).
    tokio::time::sleep(ms(2_000)).await;
    h.session.approve("c2").await.unwrap();
    tokio::time::sleep(ms(8_000)).await;
    assert_eq!(
        ends(h.events()),
        [(3_000, "c2_final timed_out".to_string()), (5_010, "c1 done".to_string())]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a call timed out queued never runs");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_hook_does_not_count_against_the_heartbeat() {
    // Decision 70: the heartbeat counts from the body's start.
    let (builder, _) = slow_hook(2_000);
    let tool = sleeper("lookup", 100, "found").heartbeat(ms(1_000));
    let script = vec![call("c1", "lookup", "{}"), text("Found.")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("go").await;
    assert_eq!(ends(h.events()), [(2_110, "c1 done".to_string())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_remembered_call_keeps_its_deadline_while_the_hook_decides() {
    // Decision 70: the deadline counts from admission, the hook's time included.
    let runs = Arc::new(AtomicU32::new(0));
    let builder = Session::builder().before_tool_call(|call: PendingToolCall| async move {
        if call.remembered {
            tokio::time::sleep(ms(2_000)).await;
        }
        Ok::<_, ToolError>(BeforeCall::Run)
    });
    let tool = job("quote", 100, &runs).idempotent(ms(600_000)).deadline(ms(1_000));
    let script = vec![call("c1", "quote", "{}"), text("Ok."), call("c2", "quote", "{}")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("quote").await;
    h.turn("again").await;
    assert_eq!(
        ends(h.events()),
        [(110, "c1 done".to_string()), (1_130, "c2 timed_out".to_string())]
    );
    h.close().await;
}
