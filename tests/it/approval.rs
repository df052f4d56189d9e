//! Human approval (docs/decisions.md#human-approval): a call of a tool
//! that requires approval waits `awaiting_approval`, answered provisionally so the agent can
//! say so; `approve` runs it, `reject`, the approval timeout or a handoff end it `rejected`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use colloquy::events::EventKind;
use colloquy::prelude::*;
use colloquy::session::{ApprovalError, NodeStatus, SessionBuilder};
use colloquy::tools::{DuplicateScope, OnDuplicate};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Refund {
    order_id: String,
    #[serde(default)]
    amount_cents: u64,
}

/// A refund tool counting the bodies that ran; each takes 500 ms.
fn refund(runs: Arc<AtomicU32>) -> FunctionTool {
    FunctionTool::new("refund", "Refund an order.", move |_c: RunContext, a: Refund| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(500)).await;
            Ok::<_, ToolError>(format!("refunded {} ({})", a.order_id, a.amount_cents))
        }
    })
}

/// The approval steps, and each call's end, in order.
fn approval_events(events: &[colloquy::events::SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolApprovalRequested { call_id, name, arguments } => {
                Some(format!("{} ASK({call_id},{name},{arguments})", e.at_ms))
            }
            EventKind::ToolCallApproved { call_id } => Some(format!("{} OK({call_id})", e.at_ms)),
            EventKind::ToolCallEnded { id, status, message, .. } => Some(format!(
                "{} E({id},{},{})",
                e.at_ms,
                status.as_str(),
                message.as_deref().unwrap_or("")
            )),
            _ => None,
        })
        .collect()
}

const WAITING: &str =
    "`refund` needs approval before it runs; it has not run yet. Its result will follow.";

async fn start_waiting(runs: &Arc<AtomicU32>, builder: SessionBuilder, last: &str) -> Harness {
    let tool = refund(Arc::clone(runs)).requires_approval();
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(tool),
        vec![
            call("c1", "refund", r#"{"order_id":"A1"}"#),
            text("I have asked for your approval."),
            text(last),
        ],
    )
    .await;
    h.turn("refund A1").await;
    h
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_for_approval_and_the_agent_says_so_then_approve_runs_it() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut h = start_waiting(&runs, Session::builder(), "Refunded.").await;
    // The speech went on: the model read the provisional output and told the user.
    assert_eq!(
        h.hist().await,
        vec![
            "user(refund A1)".to_string(),
            r#"call(refund#c1 {"order_id": "A1"})"#.into(),
            format!("out(#c1,{WAITING:?},ok,rr=T)"),
            "asst(I have asked for your approval.)".into(),
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body waits");
    let running = h.session.running_tool_calls().await.unwrap();
    assert_eq!(running.len(), 1);
    assert!(running[0].awaiting_approval);
    let snap = h.session.inspect().await.unwrap();
    let node = snap.tree.find("tool_call:c1").expect("the waiting call's node");
    assert_eq!(node.status, NodeStatus::AwaitingApproval);

    tokio::time::sleep(ms(60_000)).await;
    h.session.approve("c1").await.unwrap();
    assert!(!h.session.running_tool_calls().await.unwrap()[0].awaiting_approval);
    assert_eq!(h.session.approve("c1").await, Err(ApprovalError::NotAwaiting("c1".into())));
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        approval_events(h.events()),
        vec![
            r#"10 ASK(c1,refund,{"order_id": "A1"})"#.to_string(),
            "60020 OK(c1)".into(),
            "60520 E(c1_final,done,refunded A1 (0))".into(),
        ]
    );
    let hist = h.hist().await;
    assert!(hist.contains(&r#"out(#c1_final,"refunded A1 (0)",ok,rr=T)"#.to_string()), "{hist:#?}");
    assert_eq!(hist.last().map(String::as_str), Some("asst(Refunded.)"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn reject_ends_the_call_rejected_and_the_model_reads_the_reason() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut h = start_waiting(&runs, Session::builder(), "Understood, no refund.").await;
    h.session.reject("c1", "the customer changed their mind").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    let why = "`refund` was not approved: the customer changed their mind";
    assert_eq!(approval_events(h.events())[1..], [format!("20 E(c1_final,rejected,{why})")]);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a rejected body never runs");
    let hist = h.hist().await;
    assert!(hist.contains(&format!("out(#c1_final,{why:?},ERR,rr=T)")), "{hist:#?}");
    // The deferred reply carried the rejection to the model.
    let last = h.requests().pop().expect("requests");
    assert!(show(&last.items).contains(&format!("out(#c1_final,{why:?},ERR,rr=T)")));
    assert_eq!(h.session.approve("c1").await, Err(ApprovalError::NotFound("c1".into())));
    assert_eq!(h.session.reject("c9", "no").await, Err(ApprovalError::NotFound("c9".into())));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_is_rejected_after_the_default_five_minutes() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut h = start_waiting(&runs, Session::builder(), "Nobody approved it.").await;
    tokio::time::sleep(ms(299_000)).await;
    assert!(h.session.running_tool_calls().await.unwrap()[0].awaiting_approval);
    tokio::time::sleep(ms(2_000)).await;
    h.session.wait_for_quiet().await.unwrap();
    let why = "`refund` was not approved: no answer within 300 s";
    assert_eq!(approval_events(h.events())[1..], [format!("300010 E(c1_final,rejected,{why})")]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn interruptions_do_not_reject_a_waiting_call() {
    let runs = Arc::new(AtomicU32::new(0));
    let h = start_waiting(&runs, Session::builder(), "Refunded.").await;
    h.session.interrupt().await.unwrap();
    h.session.set_user_speaking(true).unwrap();
    h.session.set_user_speaking(false).unwrap();
    tokio::time::sleep(ms(1_000)).await;
    assert!(h.session.running_tool_calls().await.unwrap()[0].awaiting_approval);
    h.session.approve("c1").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_the_approval_not_the_wait() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs)).requires_approval().deadline(ms(1_000));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "refund", r#"{"order_id":"A1"}"#), text("Asked."), text("Done.")],
    )
    .await;
    h.turn("refund").await;
    tokio::time::sleep(ms(5_000)).await;
    h.session.approve("c1").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    let ends = approval_events(h.events());
    assert_eq!(ends.last().map(String::as_str), Some("5520 E(c1_final,done,refunded A1 (0))"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_predicate_over_the_validated_arguments_decides_which_calls_wait() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs))
        .requires_approval_if(|args| args["amount_cents"].as_u64().unwrap_or(0) > 10_000);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![
            call("c1", "refund", r#"{"order_id":"A1","amount_cents":500}"#),
            text("Refunded."),
            call("c2", "refund", r#"{"order_id":"A2","amount_cents":50000}"#),
            text("That one needs approval."),
        ],
    )
    .await;
    h.turn("small").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a small refund runs at once");
    h.turn("large").await;
    let running = h.session.running_tool_calls().await.unwrap();
    assert_eq!(running.iter().map(|r| r.awaiting_approval).collect::<Vec<_>>(), [true]);
    assert_eq!(running[0].call_id, "c2");
    let asks = approval_events(h.events());
    assert!(asks.iter().any(|e| e.contains("ASK(c2")), "{asks:#?}");
    assert!(!asks.iter().any(|e| e.contains("ASK(c1")), "{asks:#?}");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_counts_as_running_for_the_duplicate_policy() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs))
        .requires_approval()
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::args(["order_id"]));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![
            call("c1", "refund", r#"{"order_id":"A1"}"#),
            text("Asked."),
            call("c2", "refund", r#"{"order_id":"A1"}"#),
            text("Already asked."),
        ],
    )
    .await;
    h.turn("refund A1").await;
    h.turn("refund A1 again").await;
    let refused = h
        .events()
        .iter()
        .filter(
            |e| matches!(&e.kind, EventKind::ToolCallRefused { call_id, .. } if call_id == "c2"),
        )
        .count();
    assert_eq!(refused, 1);
    assert_eq!(h.session.running_tool_calls().await.unwrap().len(), 1);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_handoff_rejects_the_old_agent_s_waiting_calls_with_a_clear_reason() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut h = start_waiting(&runs, Session::builder(), "The refund was not approved.").await;
    h.session.update_agent(Agent::new("B", "billing")).await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    let why = "`refund` was not approved: the conversation moved to another agent before approval";
    let events = approval_events(h.events());
    assert!(
        events.iter().any(|e| e.ends_with(&format!("E(c1_final,rejected,{why})"))),
        "{events:#?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(h.session.running_tool_calls().await.unwrap().is_empty());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn closing_rejects_a_waiting_call_at_once() {
    let runs = Arc::new(AtomicU32::new(0));
    let h = start_waiting(&runs, Session::builder(), "unused").await;
    let started = tokio::time::Instant::now();
    let events = h.close().await;
    assert!(started.elapsed() < ms(1_000), "no drain wait for a call nobody can approve");
    let why = "`refund` was not approved: the session closed before approval";
    let ends = approval_events(&events);
    assert!(ends.iter().any(|e| e.ends_with(&format!("E(c1_final,rejected,{why})"))), "{ends:#?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_session_scoped_waiting_call_survives_a_handoff_and_is_approved_later() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs)).requires_approval();
    let builder = Session::builder().toolset(Toolset::new_async("payments").tool(tool));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst"),
        vec![call("c1", "refund", r#"{"order_id":"A1"}"#), text("Asked."), text("B: refunded.")],
    )
    .await;
    h.turn("refund A1").await;
    h.session.update_agent(Agent::new("B", "billing")).await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    assert!(h.session.running_tool_calls().await.unwrap()[0].awaiting_approval);
    h.session.approve("c1").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let b = h.ctx("B").await;
    assert!(b.contains(&r#"out(#c1_final,"refunded A1 (0)",ok,rr=T)"#.to_string()), "{b:#?}");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancellable_waiting_call_can_be_cancelled_and_never_runs() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs)).requires_approval().cancellable();
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "refund", r#"{"order_id":"A1"}"#), text("Asked.")],
    )
    .await;
    h.turn("refund A1").await;
    h.session.cancel_tool_call("c1").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    tokio::time::sleep(ms(5_000)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(approval_events(h.events())[1..], ["20 E(c1_final,cancelled,)".to_string()]);
    assert_eq!(h.session.approve("c1").await, Err(ApprovalError::NotFound("c1".into())));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn every_capped_call_is_asked_at_once_and_holds_a_place_only_while_it_runs() {
    // One refund at a time, three in one step. Each is put to the approver at once
    // (a waiting call holds no place), the reply goes on, and an approved call that finds the
    // place taken waits for it, answered already.
    let runs = Arc::new(AtomicU32::new(0));
    let tool = refund(Arc::clone(&runs)).requires_approval().max_concurrent(1);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("c1", "refund", r#"{"order_id":"A1"}"#),
                ScriptedCall::new("c2", "refund", r#"{"order_id":"A2"}"#),
                ScriptedCall::new("c3", "refund", r#"{"order_id":"A3"}"#),
            ]),
            text("All three wait."),
        ],
    )
    .await;
    h.session.user_turn("refund all three").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let asks =
        |h: &mut Harness| approval_events(h.events()).iter().filter(|e| e.contains("ASK")).count();
    assert_eq!(asks(&mut h), 3, "every call is asked at once");
    let executed =
        h.events().iter().any(|e| matches!(e.kind, EventKind::FunctionToolsExecuted { .. }));
    assert!(executed, "no waiting call holds the reply");
    // Approved at once, all three: one runs, the others wait for its place.
    for id in ["c1", "c2", "c3"] {
        h.session.approve(id).await.unwrap();
    }
    tokio::time::sleep(ms(100)).await;
    let snap = h.session.inspect().await.unwrap();
    let status = |id: &str| snap.tree.find(&format!("tool_call:{id}")).unwrap().status;
    assert_eq!(
        [status("c1"), status("c2"), status("c3")],
        [NodeStatus::Running, NodeStatus::Queued, NodeStatus::Queued]
    );
    let updates = snap.tree.find("tool_call:c2").unwrap().updates;
    assert_eq!(updates, Some(0), "the provisional answer is not one of the body's updates");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    tokio::time::sleep(ms(2_000)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3, "each ran once, one after the other");
    let ends: Vec<String> =
        approval_events(h.events()).into_iter().filter(|e| e.contains(" E(")).collect();
    assert_eq!(
        ends,
        [
            "600 E(c1_final,done,refunded A1 (0))",
            "1100 E(c2_final,done,refunded A2 (0))",
            "1600 E(c3_final,done,refunded A3 (0))"
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn approve_is_accepted_for_a_call_that_waits_for_its_place() {
    // A call approved while another holds the place is queued; a second approve says it no
    // longer waits for one, and a cancel reaches it.
    let runs = Arc::new(AtomicU32::new(0));
    let capped = refund(Arc::clone(&runs)).requires_approval().cancellable().max_concurrent(1);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(capped),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("c1", "refund", r#"{"order_id":"A1"}"#),
                ScriptedCall::new("c2", "refund", r#"{"order_id":"A2"}"#),
            ]),
            text("Both wait."),
        ],
    )
    .await;
    h.session.user_turn("refund both").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.approve("c1").await.unwrap();
    h.session.approve("c2").await.unwrap();
    assert_eq!(h.session.approve("c2").await, Err(ApprovalError::NotAwaiting("c2".into())));
    h.session.cancel_tool_call("c2").await.unwrap();
    tokio::time::sleep(ms(2_000)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the cancelled call never ran");
    let ends: Vec<String> =
        approval_events(h.events()).into_iter().filter(|e| e.contains(" E(")).collect();
    assert_eq!(ends, ["100 E(c2_final,cancelled,)", "600 E(c1_final,done,refunded A1 (0))"]);
    h.close().await;
}
