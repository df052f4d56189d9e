//! Property test (proptest, 64 cases, a fresh paused runtime per case, the seed printed):
//! random interleavings of duplicate calls (allow / reject / replace), host cancels and
//! completions end every call in exactly one terminal state, and every actor the session
//! spawned reports that it stopped gracefully — none was killed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use colloquy::session::Lifecycle;
use colloquy::tools::{DuplicateScope, OnDuplicate};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Work {
    ms: u64,
    cooperative: bool,
}

fn work(name: &'static str, policy: OnDuplicate) -> FunctionTool {
    FunctionTool::new(name, "Works.", |ctx: RunContext, a: Work| async move {
        ctx.update("started").await?;
        if !a.cooperative {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            return Ok::<_, ToolError>("done");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(a.ms)) => Ok("done"),
            () = ctx.cancelled() => {
                tokio::time::sleep(Duration::from_millis(50)).await; // clean up
                Ok("cleaned up")
            }
        }
    })
    .cancellable()
    .on_duplicate(policy, DuplicateScope::Name)
}

const TOOLS: [&str; 3] = ["work_allow", "work_reject", "work_replace"];

#[derive(Clone, Debug)]
enum Op {
    /// A user turn whose reply calls these (tool index, ms, cooperative).
    Turn(Vec<(usize, u64, bool)>),
    /// The host cancels the n-th call issued so far (it may have finished already).
    Cancel(usize),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::collection::vec((0..3usize, 10..400u64, any::<bool>()), 1..4).prop_map(Op::Turn),
        (0..12usize).prop_map(Op::Cancel),
        (1..300u64).prop_map(Op::Wait),
    ]
}

async fn play(ops: Vec<Op>) -> Result<(), TestCaseError> {
    // Call ids per turn, in order: c<turn>_<k>.
    let mut turns: Vec<Vec<(String, usize, u64, bool)>> = Vec::new();
    for op in &ops {
        if let Op::Turn(calls) = op {
            let t = turns.len();
            turns.push(
                calls
                    .iter()
                    .enumerate()
                    .map(|(k, (tool, ms, coop))| (format!("c{t}_{k}"), *tool, *ms, *coop))
                    .collect(),
            );
        }
    }
    let issued: Vec<String> = turns.iter().flatten().map(|(id, ..)| id.clone()).collect();
    let plan = Arc::new(turns);
    let script = Arc::clone(&plan);
    let llm = ScriptedLlm::new([]).with_fallback(move |_, request| {
        let last =
            request.items.items().last().and_then(|i| i.as_message()).map(|m| m.text.clone());
        match (request.kind, last) {
            (RequestKind::UserTurn, Some(text)) => {
                let t: usize = text.trim_start_matches("turn ").parse().unwrap_or(0);
                let calls = script[t].iter().map(|(id, tool, ms, coop)| {
                    ScriptedCall::new(
                        id.clone(),
                        TOOLS[*tool],
                        format!(r#"{{"ms":{ms},"cooperative":{coop}}}"#),
                    )
                });
                ScriptedResponse::calls(calls)
            }
            _ => ScriptedResponse::text("ok"),
        }
    });
    let agent = Agent::new("A", "inst")
        .tool(work(TOOLS[0], OnDuplicate::Allow))
        .tool(work(TOOLS[1], OnDuplicate::Reject))
        .tool(work(TOOLS[2], OnDuplicate::Replace));
    let mut builder = Session::builder().llm(llm).cancel_grace(Duration::from_millis(100));
    let mut events = builder.subscribe();
    let mut lifecycle = builder.lifecycle_events();
    let session = builder.start(agent).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut turn = 0;
    for op in ops {
        match op {
            Op::Turn(_) => {
                session
                    .user_turn(format!("turn {turn}"))
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                turn += 1;
            }
            Op::Cancel(n) => {
                if let Some(id) = issued.get(n) {
                    let _ = session.cancel_tool_call(id.clone()).await; // refusals are fine
                }
            }
            Op::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
    session.close().await.map_err(|e| TestCaseError::fail(e.to_string()))?;

    let mut ended: BTreeMap<String, u32> = BTreeMap::new();
    let mut started: Vec<String> = Vec::new();
    while let Some(e) = events.recv().await {
        match e.kind {
            EventKind::ToolCallStarted { call_id, .. } => started.push(call_id),
            EventKind::ToolCallEnded { call_id, .. } => *ended.entry(call_id).or_default() += 1,
            _ => {}
        }
    }
    for id in &started {
        prop_assert_eq!(ended.get(id).copied(), Some(1), "call {} must end exactly once", id);
    }
    prop_assert_eq!(ended.len(), started.len(), "no call ends without having started");
    let mut alive: BTreeMap<String, i32> = BTreeMap::new();
    while let Ok(record) = lifecycle.try_recv() {
        *alive.entry(record.id).or_default() += match record.what {
            Lifecycle::Started => 1,
            Lifecycle::Stopped if record.reason.as_deref() == Some("killed") => {
                return Err(TestCaseError::fail(format!("{} was killed", record.id)));
            }
            Lifecycle::Stopped => -1,
            Lifecycle::Failed => {
                return Err(TestCaseError::fail(format!(
                    "{} failed: {:?}",
                    record.id, record.reason
                )));
            }
            other => {
                return Err(TestCaseError::fail(format!("{} reported {other:?}", record.id)));
            }
        };
    }
    let killed: Vec<&String> = alive.iter().filter(|(_, n)| **n != 0).map(|(id, _)| id).collect();
    prop_assert!(killed.is_empty(), "actors that never stopped gracefully: {:?}", killed);
    prop_assert!(alive.contains_key("session") && alive.keys().any(|k| k.starts_with("activity:")));
    Ok(())
}

#[test]
fn duplicates_cancels_and_completions_end_every_call_once() {
    let seed: u64 =
        std::env::var("COLLOQUY_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20_261_125);
    println!("COLLOQUY_SEED={seed}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let config = Config { cases: 64, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&prop::collection::vec(op(), 1..10), |ops| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime");
            runtime.block_on(play(ops))
        })
        .unwrap_or_else(|e| panic!("COLLOQUY_SEED={seed}: {e}"));
}
