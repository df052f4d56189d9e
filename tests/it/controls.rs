//! Tool controls together (docs/decisions.md#tool-control-order): the before-call hook, then
//! approval, then a place under a cap, then the body. A pharmacy desk's `refill` combines them
//! all: the hook sees every call first (with its session), a person is asked about each call
//! the hook lets through at once, and no waiting call holds a place or a reply.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use colloquy::events::EventKind;
use colloquy::prelude::*;
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

#[tokio::test(start_paused = true)]
async fn an_approved_call_can_time_out_while_it_waits_for_a_place() {
    // The deadline counts from the approval, the queue included: the call ends unrun. It is
    // approved after the deadline counted from admission would have passed.
    let runs = Arc::new(AtomicU32::new(0));
    let quick = FunctionTool::new("quick", "Quick.", {
        let runs = Arc::clone(&runs);
        move |_c: RunContext, _a: NoArgs| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("quick done")
            }
        }
    })
    .requires_approval()
    .deadline(ms(1_000));
    let api = Toolset::new_async("api")
        .max_concurrent(1)
        .tool(sleeper("slow", 5_000, "slow"))
        .tool(quick);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "slow", "{}"),
            ScriptedCall::new("c2", "quick", "{}"),
        ]),
        text("Working."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").toolset(api), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(1_500)).await;
    h.session.approve("c2").await.unwrap();
    tokio::time::sleep(ms(6_000)).await;
    let ended: Vec<(u64, String)> = ended_at(h.events());
    let why = "Tool `quick` timed out after 1 s";
    assert_eq!(ended[0], (2_500, format!("c2_final timed_out {why}")));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "it never ran");
    h.close().await;
}
