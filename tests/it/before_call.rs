//! The host's hook before each tool call (docs/decisions.md#retries-and-hook): run, rewrite,
//! skip or reject, in the call's own task after `tool_call_started`, so each started call still
//! ends exactly once and a slow hook blocks no mailbox.

use std::sync::{Arc, Mutex};

use crate::common::*;
use colloquy::events::EventKind;
use colloquy::prelude::*;
// `BeforeCall` and `PendingToolCall` come with the prelude.
use serde_json::Value;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Refund {
    order_id: String,
    #[serde(default = "usd")]
    currency: String,
    amount_cents: u64,
}

fn usd() -> String {
    "USD".into()
}

fn refund() -> FunctionTool {
    FunctionTool::new("refund", "Refund.", |_ctx: RunContext, a: Refund| async move {
        Ok::<_, ToolError>(format!("refunded {} {} on {}", a.amount_cents, a.currency, a.order_id))
    })
}

/// A session whose hook answers `decide` and records every call it sees.
async fn start(
    decide: impl Fn(&PendingToolCall) -> Result<BeforeCall, ToolError> + Send + Sync + 'static,
    script: Vec<ScriptedResponse>,
) -> (Harness, Arc<Mutex<Vec<PendingToolCall>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let decide = Arc::new(decide);
    let builder = Session::builder().before_tool_call(move |call: PendingToolCall| {
        let (log, decide) = (Arc::clone(&log), Arc::clone(&decide));
        async move {
            let answer = decide(&call);
            log.lock().unwrap().push(call);
            answer
        }
    });
    let h = Harness::start_with(builder, Agent::new("A", "inst").tool(refund()), script).await;
    (h, seen)
}

const ARGS: &str = r#"{"order_id":"42","amount_cents":500}"#;

#[tokio::test(start_paused = true)]
async fn the_hook_sees_the_validated_call_and_lets_it_run() {
    let (mut h, seen) =
        start(|_| Ok(BeforeCall::Run), vec![call("c1", "refund", ARGS), text("Done.")]).await;
    h.turn("refund 42").await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].call_id.as_str(), seen[0].name.as_str()), ("c1", "refund"));
    assert_eq!(seen[0].agent_id, "A");
    // Validated: the default is filled in.
    assert_eq!(seen[0].arguments["currency"], Value::from("USD"));
    assert_eq!(
        h.tool_events(),
        vec!["S(c1)", "E(c1,done,\"refunded 500 USD on 42\")", "FTE[\"c1\"]"]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_rewrite_runs_the_body_with_the_hooks_arguments_and_keeps_the_models() {
    let cap = |call: &PendingToolCall| {
        let mut arguments = call.arguments.clone();
        arguments.insert("amount_cents".into(), Value::from(100));
        Ok(BeforeCall::Rewrite(arguments))
    };
    let (mut h, _) = start(cap, vec![call("c1", "refund", ARGS), text("Done.")]).await;
    h.turn("refund 42").await;
    assert_eq!(
        h.tool_events(),
        vec!["S(c1)", "E(c1,done,\"refunded 100 USD on 42\")", "FTE[\"c1\"]"]
    );
    // The history keeps what the model asked for.
    let hist = h.hist().await;
    assert!(
        hist.iter().any(|i| i.starts_with("call(refund#c1") && i.contains("\"amount_cents\": 500")),
        "{hist:#?}"
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_skip_ends_the_call_done_with_the_hooks_output() {
    let skip = |_: &PendingToolCall| Ok(BeforeCall::Skip("already refunded".into()));
    let (mut h, _) = start(skip, vec![call("c1", "refund", ARGS), text("It was done.")]).await;
    h.turn("refund 42").await;
    assert_eq!(h.tool_events(), vec!["S(c1)", "E(c1,done,\"already refunded\")", "FTE[\"c1\"]"]);
    assert!(h.hist().await.contains(&"out(#c1,\"already refunded\",ok,rr=T)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_reject_ends_the_call_error_and_the_model_reads_the_reason() {
    let reject = |_: &PendingToolCall| Ok(BeforeCall::Reject("refunds are paused".into()));
    let (mut h, _) = start(reject, vec![call("c1", "refund", ARGS), text("Sorry.")]).await;
    h.turn("refund 42").await;
    let why = "The host rejected `refund`: refunds are paused";
    assert_eq!(
        h.tool_events(),
        vec!["S(c1)".to_string(), format!("E(c1,error,{why:?})"), "FTE[\"c1\"]".into()]
    );
    assert!(h.hist().await.contains(&format!("out(#c1,{why:?},ERR,rr=T)")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_hooks_error_is_the_models_error_output() {
    let fail = |_: &PendingToolCall| Err(ToolError::new("audit log unavailable"));
    let (mut h, _) = start(fail, vec![call("c1", "refund", ARGS), text("Sorry.")]).await;
    h.turn("refund 42").await;
    assert_eq!(
        h.tool_events(),
        vec!["S(c1)", "E(c1,error,\"audit log unavailable\")", "FTE[\"c1\"]"]
    );
    assert!(h.hist().await.contains(&"out(#c1,\"audit log unavailable\",ERR,rr=T)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_hook_delays_only_its_own_call() {
    // The hook takes 5 s for refunds (a person's audit service) and none for the lookup.
    let builder = Session::builder().before_tool_call(|call: PendingToolCall| async move {
        if call.name == "refund" {
            tokio::time::sleep(ms(5_000)).await;
        }
        Ok::<_, ToolError>(BeforeCall::Run)
    });
    let agent = Agent::new("A", "inst").tool(refund()).tool(sleeper("lookup", 0, "found"));
    let both = ScriptedResponse::calls([
        ScriptedCall::new("c1", "refund", ARGS),
        ScriptedCall::new("c2", "lookup", "{}"),
    ]);
    let mut h = Harness::start_with(builder, agent, vec![both, text("Done.")]).await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    // Meanwhile the session answers and the other call of the same toolset has ended.
    let running = h.session.running_tool_calls().await.unwrap();
    assert_eq!(running.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(), vec!["c1"]);
    h.session.wait_for_idle().await.unwrap();
    let ends: Vec<(u64, String)> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnded { id, .. } => Some((e.at_ms, id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(ends, vec![(10, "c2".to_string()), (5_010, "c1".to_string())]);
    h.close().await;
}
