//! A multi-threaded, real-clock smoke test: many sessions at once on a two-worker runtime.
//! It checks invariants only (never timings): every started call ends exactly once, history is
//! in timestamp order, every turn is answered, every session closes.

use std::collections::BTreeMap;
use std::time::Duration;

use colloquy::ToolCallStatus;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;

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
                    *started.entry(call_id.clone()).or_default() += 1
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
            .filter(|i| i.as_message().is_some_and(|m| m.role == colloquy::Role::Assistant))
            .count();
        assert_eq!(answers as u32, TURNS, "every turn got its answer");
        let outputs = history.iter().filter(|i| i.as_function_call_output().is_some()).count();
        assert_eq!(outputs, started.len(), "every call's output is in history");
    }
}
