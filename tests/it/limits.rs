//! Concurrency limits and remembered results (docs/decisions.md#concurrency-limits): calls over
//! a `max_concurrent` cap wait in arrival order as `queued`, and cancels, deadlines and closing
//! reach them; an `idempotent` tool answers a repeated call from a result that ended `done` in
//! its window.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use colloquy::events::{EventKind, SessionEvent};
use colloquy::prelude::*;
use serde_json::{Map, Value, json};

/// `(at_ms, "id status")` for each `tool_call_ended`, with ` cached` when it was remembered.
pub(crate) fn ended(events: &[SessionEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnded { id, status, cached, .. } => Some((
                e.at_ms,
                format!("{id} {}{}", status.as_str(), if *cached { " cached" } else { "" }),
            )),
            _ => None,
        })
        .collect()
}

/// One response calling `name` once per id, with no arguments.
fn calls(name: &str, ids: &[&str]) -> ScriptedResponse {
    ScriptedResponse::calls(ids.iter().map(|id| ScriptedCall::new(*id, name, "{}")))
}

/// A tool that counts its runs, sleeps `ms`, and returns `output`.
fn counted(name: &'static str, ms_: u64, runs: Arc<AtomicU32>) -> FunctionTool {
    FunctionTool::new(name, "Counts its runs.", move |_ctx: RunContext, _a: NoArgs| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(ms(ms_)).await;
            Ok::<_, ToolError>("done")
        }
    })
}

fn status_of(snap: &colloquy::session::SessionSnapshot, call_id: &str) -> Option<NodeStatus> {
    snap.tree.find(&format!("tool_call:{call_id}")).map(|n| n.status)
}

#[tokio::test(start_paused = true)]
async fn calls_over_a_tools_cap_wait_in_arrival_order_and_show_as_queued() {
    let tool = sleeper("fetch", 1_000, "fetched").max_concurrent(1);
    let mut h = Harness::start(
        agent().tool(tool),
        vec![calls("fetch", &["c1", "c2", "c3"]), text("All fetched.")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(500)).await;
    let snap = h.session.inspect().await.unwrap();
    assert_eq!(status_of(&snap, "c1"), Some(NodeStatus::Running));
    assert_eq!(status_of(&snap, "c2"), Some(NodeStatus::Queued));
    assert_eq!(status_of(&snap, "c3"), Some(NodeStatus::Queued));
    h.session.wait_for_idle().await.unwrap();
    // The reply did not wait for the queued calls: they were answered provisionally.
    let hist = h.hist().await;
    let queued = "`fetch` waits for other calls of its kind to finish; it has not run yet. Its result will follow.";
    assert!(hist.contains(&format!("out(#c2,{queued:?},ok,rr=T)")), "{hist:#?}");
    tokio::time::sleep(ms(3_000)).await;
    // Each started on admission; they ran one after another, in the order the model sent them.
    let started = h.tool_events().into_iter().filter(|e| e.starts_with("S(")).count();
    assert_eq!(started, 3);
    assert_eq!(
        ended(h.events()),
        vec![
            (1_010, "c1 done".into()),
            (2_010, "c2_final done".into()),
            (3_010, "c3_final done".into())
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_toolsets_cap_counts_the_calls_of_all_its_tools() {
    let api = Toolset::new_async("api")
        .max_concurrent(2)
        .tool(sleeper("a", 1_000, "a"))
        .tool(sleeper("b", 1_000, "b"));
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "a", "{}"),
            ScriptedCall::new("c2", "b", "{}"),
            ScriptedCall::new("c3", "a", "{}"),
        ]),
        text("Done."),
    ];
    let mut h = Harness::start(agent().toolset(api), script).await;
    h.turn("go").await;
    tokio::time::sleep(ms(1_000)).await;
    assert_eq!(
        ended(h.events()),
        vec![(1_010, "c1 done".into()), (1_010, "c2 done".into()), (2_010, "c3_final done".into())]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_queued_call_ends_cancelled_without_running() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = counted("job", 1_000, Arc::clone(&runs)).cancellable().max_concurrent(1);
    let mut h =
        Harness::start(agent().tool(tool), vec![calls("job", &["c1", "c2"]), text("Ok.")]).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(200)).await;
    h.session.cancel_tool_call("c2").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        ended(h.events()),
        vec![(200, "c2_final cancelled".into()), (1_010, "c1 done".into())]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the queued call never ran");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_deadline_counts_from_admission_so_a_queued_call_can_time_out_unrun() {
    let runs = Arc::new(AtomicU32::new(0));
    let api = Toolset::new_async("api")
        .max_concurrent(1)
        .tool(sleeper("slow", 5_000, "slow done"))
        .tool(counted("quick", 100, Arc::clone(&runs)).deadline(ms(1_000)));
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "slow", "{}"),
            ScriptedCall::new("c2", "quick", "{}"),
        ]),
        text("Ok."),
    ];
    let mut h = Harness::start(agent().toolset(api), script).await;
    h.turn("go").await;
    assert_eq!(
        ended(h.events()),
        vec![(1_010, "c2_final timed_out".into()), (5_010, "c1 done".into())]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let hist = h.hist().await;
    let why = "Tool `quick` timed out after 1 s";
    assert!(hist.contains(&format!("out(#c2_final,{why:?},ERR,rr=T)")), "{hist:#?}");
    h.close().await;
}

/// A payment tool with an `order` argument, counting its runs; it fails for order `bad` the
/// first time only.
fn pay(runs: Arc<AtomicU32>) -> FunctionTool {
    let schema = json!({
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"]
    });
    FunctionTool::from_schema(
        "pay",
        "Pays an order.",
        schema,
        move |_ctx: RunContext, a: Map<String, Value>| {
            let runs = Arc::clone(&runs);
            async move {
                let n = runs.fetch_add(1, Ordering::SeqCst);
                let order = a.get("order").and_then(Value::as_str).unwrap_or("").to_string();
                if order == "bad" && n < 5 {
                    return Err(ToolError::new("card declined"));
                }
                Ok::<_, ToolError>(format!("paid {order}"))
            }
        },
    )
    .expect("a valid schema")
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_tool_answers_a_repeat_from_memory_within_its_window() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = pay(Arc::clone(&runs)).idempotent(ms(600_000));
    let script = vec![
        call("c1", "pay", r#"{"order":"A"}"#),
        text("Paid."),
        call("c2", "pay", r#"{"order": "A"}"#),
        text("Paid again?"),
        call("c3", "pay", r#"{"order":"B"}"#),
        text("Paid B."),
        call("c4", "pay", r#"{"order":"A"}"#),
        text("Paid A later."),
    ];
    let mut h = Harness::start(agent().tool(tool), script).await;
    h.turn("pay A").await;
    h.turn("pay A again").await;
    h.turn("pay B").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the repeat of A did not run");
    tokio::time::sleep(ms(600_000)).await;
    h.turn("pay A once more").await;
    assert_eq!(runs.load(Ordering::SeqCst), 3, "past the window it runs again");
    let ends: Vec<String> = ended(h.events()).into_iter().map(|(_, e)| e).collect();
    assert_eq!(ends, ["c1 done", "c2 done cached", "c3 done", "c4 done"]);
    // The model reads the remembered output; the event says it was remembered.
    let hist = h.hist().await;
    assert!(hist.contains(&r#"out(#c2,"paid A",ok,rr=T)"#.to_string()), "{hist:#?}");
    let json: Vec<String> = h
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ToolCallEnded { .. }))
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    assert!(json[1].contains(r#""cached":true"#), "{}", json[1]);
    assert!(!json[0].contains("cached"), "left out when false: {}", json[0]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_asks_tells_the_model_its_result_was_remembered() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = pay(Arc::clone(&runs)).idempotent(ms(600_000)).note_remembered();
    let script = vec![
        call("c1", "pay", r#"{"order":"A"}"#),
        text("Paid."),
        call("c2", "pay", r#"{"order":"A"}"#),
        text("Already paid."),
    ];
    let h = Harness::start(agent().tool(tool), script).await;
    h.turn("pay A").await;
    tokio::time::sleep(ms(90_000)).await;
    h.turn("pay A again").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let said = "paid A\n(Remembered from a call 90.02 s ago; `pay` did not run again.)";
    let hist = h.hist().await;
    assert!(hist.contains(&format!("out(#c2,{said:?},ok,rr=T)")), "{hist:#?}");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn only_results_that_ended_done_are_remembered() {
    let runs = Arc::new(AtomicU32::new(0));
    let tool = pay(Arc::clone(&runs)).idempotent(ms(600_000));
    let script = vec![
        call("c1", "pay", r#"{"order":"bad"}"#),
        text("Declined."),
        call("c2", "pay", r#"{"order":"bad"}"#),
        text("Declined again."),
    ];
    let mut h = Harness::start(agent().tool(tool), script).await;
    h.turn("pay").await;
    h.turn("retry").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "an error is not remembered");
    let ends: Vec<String> = ended(h.events()).into_iter().map(|(_, e)| e).collect();
    assert_eq!(ends, ["c1 error", "c2 error"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_session_scoped_toolsets_memory_survives_a_handoff() {
    let runs = Arc::new(AtomicU32::new(0));
    let shared = Toolset::new_async("payments").tool(pay(Arc::clone(&runs)).idempotent(ms(60_000)));
    let second = Agent::new("B", "inst b");
    let to_b = FunctionTool::new("to_b", "Hand off.", move |_c: RunContext, _a: NoArgs| {
        let second = second.clone();
        async move { Ok::<_, ToolError>(Handoff::to(second)) }
    });
    let script = vec![
        call("c1", "pay", r#"{"order":"A"}"#),
        text("Paid."),
        call("h1", "to_b", "{}"),
        call("c2", "pay", r#"{"order":"A"}"#),
        text("Already paid."),
    ];
    let builder = Session::builder().toolset(shared);
    let mut h = Harness::start_with(builder, agent().tool(to_b), script).await;
    h.turn("pay A").await;
    h.turn("to b").await;
    h.turn("pay A again").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let ends: Vec<String> = ended(h.events()).into_iter().map(|(_, e)| e).collect();
    assert_eq!(ends, ["c1 done", "h1 done", "c2 done cached"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn closing_ends_each_queued_call_once_cancelled_or_run() {
    let runs = Arc::new(AtomicU32::new(0));
    let api = Toolset::new_async("api")
        .max_concurrent(1)
        .tool(counted("job", 1_000, Arc::clone(&runs)).cancellable())
        .tool(sleeper("firm", 500, "firm done"));
    let script = vec![ScriptedResponse::calls([
        ScriptedCall::new("c1", "job", "{}"),
        ScriptedCall::new("c2", "job", "{}"),
        ScriptedCall::new("c3", "firm", "{}"),
    ])];
    let h = Harness::start(agent().toolset(api), script).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let events = h.close().await;
    // The cancellable calls end cancelled (c2 without running); the firm one is awaited: it
    // gets its place once c1 ends and runs to its end.
    let mut ends: Vec<String> = ended(&events).into_iter().map(|(_, e)| e).collect();
    ends.sort();
    assert_eq!(ends, ["c1 cancelled", "c2_final cancelled", "c3_final done"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_handoff_cancels_a_queued_call_at_once_since_it_holds_no_speech() {
    let runs = Arc::new(AtomicU32::new(0));
    let job = FunctionTool::new("job", "A job.", {
        let runs = Arc::clone(&runs);
        move |ctx: RunContext, _a: NoArgs| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                ctx.update("working").await?;
                tokio::time::sleep(ms(1_000)).await;
                Ok::<_, ToolError>("job done")
            }
        }
    })
    .cancellable()
    .max_concurrent(1);
    let mut h = Harness::start(agent().tool(job), vec![calls("job", &["j1", "j2"])]).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(200)).await;
    h.session.update_agent(Agent::new("B", "inst b")).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    // j2 was answered provisionally while queued, so no speech waits for it: the handoff's
    // drain cancels both at once, and j2 never runs. Each ends once.
    assert_eq!(
        ended(h.events()),
        vec![(200, "j1_final cancelled".into()), (200, "j2_final cancelled".into())]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let handoff = h.events().iter().position(
        |e| matches!(&e.kind, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    assert!(handoff.is_some(), "the handoff completed");
    h.close().await;
}
