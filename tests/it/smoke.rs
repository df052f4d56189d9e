//! A multi-threaded, real-clock smoke test: many sessions at once on a two-worker runtime.
//! It checks invariants only (never timings): every started call ends exactly once, history is
//! in timestamp order, every turn is answered, every session closes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy::events::ToolCallStatus;
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc};

#[derive(Deserialize, JsonSchema)]
struct Lookup {
    n: u32,
}

fn lookup() -> FunctionTool {
    FunctionTool::new("lookup", "Look up.", |_ctx: RunContext, a: Lookup| async move {
        tokio::time::sleep(Duration::from_millis(u64::from(a.n % 3))).await;
        if a.n.is_multiple_of(5) {
            return Err(ToolError::new("not found"));
        }
        Ok(format!("item {}", a.n))
    })
}

async fn run_session(index: u32, turns: u32) -> (Vec<ChatItem>, Vec<SessionEvent>) {
    // Each turn: one tool call (two calls on every third turn), then a text answer.
    let llm = ScriptedLlm::new([]).with_fallback(move |i, request| {
        let last_is_user = request.items.items().last().and_then(|it| it.as_message()).is_some();
        if !last_is_user {
            return ScriptedResponse::text(format!("answer {i}")).with_latency(Duration::ZERO);
        }
        let n = index * 100 + i as u32;
        let mut calls =
            vec![ScriptedCall::new(format!("c{i}"), "lookup", format!(r#"{{"n":{n}}}"#))];
        if i.is_multiple_of(3) {
            calls.push(ScriptedCall::new(
                format!("d{i}"),
                "lookup",
                format!(r#"{{"n":"{}"}}"#, n + 1),
            ));
        }
        ScriptedResponse::calls(calls).with_latency(Duration::from_millis(1))
    });
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("A", "inst").tool(lookup())).await.expect("start");
    for t in 0..turns {
        session.user_turn(format!("turn {t}")).await.expect("turn");
        session.wait_for_idle().await.expect("idle");
    }
    let history = session.history().await.expect("history");
    session.close().await.expect("close");
    let mut seen = Vec::new();
    while let Some(e) = events.recv().await {
        seen.push(e);
    }
    (history, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_on_two_threads_keep_every_invariant() {
    const SESSIONS: u32 = 40;
    const TURNS: u32 = 4;
    let tasks: Vec<_> = (0..SESSIONS).map(|i| tokio::spawn(run_session(i, TURNS))).collect();
    for task in tasks {
        let (history, events) = task.await.expect("session task");
        let mut started: BTreeMap<String, u32> = BTreeMap::new();
        let mut ended: BTreeMap<String, u32> = BTreeMap::new();
        for e in &events {
            match &e.kind {
                EventKind::ToolCallStarted { call_id, .. } => {
                    *started.entry(call_id.clone()).or_default() += 1;
                }
                EventKind::ToolCallEnded { call_id, status, .. } => {
                    assert_ne!(*status, ToolCallStatus::Cancelled);
                    *ended.entry(call_id.clone()).or_default() += 1;
                }
                _ => {}
            }
        }
        assert!(!started.is_empty());
        assert_eq!(started, ended, "every started call ends exactly once");
        assert!(started.values().all(|n| *n == 1));
        assert!(matches!(events.last().map(|e| &e.kind), Some(EventKind::SessionClosed { .. })));
        let stamps: Vec<_> = history.iter().map(ChatItem::created_at).collect();
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "history is in timestamp order");
        let answers = history
            .iter()
            .filter(|i| i.as_message().is_some_and(|m| m.role == colloquy::chat::Role::Assistant))
            .count();
        assert_eq!(answers as u32, TURNS, "every turn got its answer");
        let outputs = history.iter().filter(|i| i.as_function_call_output().is_some()).count();
        assert_eq!(outputs, started.len(), "every call's output is in history");
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// A tool that tells the test it started, then waits until the test opens its gate.
fn gate(open: Arc<Semaphore>, started: mpsc::UnboundedSender<()>) -> FunctionTool {
    FunctionTool::new("gate", "Waits for the gate.", move |_ctx: RunContext, _a: NoArgs| {
        let (open, started) = (Arc::clone(&open), started.clone());
        async move {
            let _ = started.send(());
            let _permit = open.acquire().await.map_err(|e| ToolError::new(e.to_string()))?;
            Ok::<_, ToolError>("opened")
        }
    })
}

/// One session: a speech waits for its blocking tool (lending the floor), a `generate_reply`
/// takes the floor meanwhile, the gate opens at once, and the waiting speech must get the
/// floor back for its tool reply whichever side gets there first.
async fn lend_the_floor(round: u32) -> Vec<String> {
    let llm = ScriptedLlm::new([]).with_fallback(|_, request| {
        let response = match request.kind {
            RequestKind::UserTurn => {
                ScriptedResponse::text("wait").with_call(ScriptedCall::new("g1", "gate", "{}"))
            }
            RequestKind::GenerateReply => ScriptedResponse::text("meanwhile"),
            _ => ScriptedResponse::text("done"),
        };
        response.with_latency(Duration::ZERO)
    });
    let (open, (started_tx, mut started)) =
        (Arc::new(Semaphore::new(0)), mpsc::unbounded_channel());
    let agent = Agent::new("A", "inst").tool(gate(Arc::clone(&open), started_tx));
    let session = Session::builder().llm(llm).start(agent).await.expect("start");
    session.user_turn(format!("round {round}")).await.expect("turn");
    started.recv().await.expect("the tool starts");
    session.generate_reply("say something while waiting").await.expect("reply");
    open.add_permits(1);
    // A lost wake-up would hang here: fail instead.
    let idle = tokio::time::timeout(Duration::from_secs(30), session.wait_for_idle()).await;
    idle.expect("the session goes idle").expect("idle");
    let history = session.history().await.expect("history");
    session.close().await.expect("close");
    history
        .iter()
        .filter_map(|i| i.as_message().filter(|m| m.role == colloquy::chat::Role::Assistant))
        .map(|m| m.text.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_floor_and_ended_speeches_are_never_lost_across_threads() {
    let rounds: Vec<_> = (0..60).map(|r| tokio::spawn(lend_the_floor(r))).collect();
    for round in rounds {
        let mut said = round.await.expect("round");
        said.sort();
        assert_eq!(said, ["done", "meanwhile", "wait"], "each speech spoke once");
    }
}
