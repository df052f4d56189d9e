//! Duplicate policies, cancellation and the companion tools (C-29 … C-46), on the paused clock.

use std::time::Duration;

use crate::common::*;
use colloquy::events::EventFilter;
use colloquy::prelude::*;
use colloquy::session::CancelError;
use colloquy::tools::{DuplicateScope, OnDuplicate};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Order {
    order_id: String,
    #[serde(default)]
    note: Option<String>,
}

/// `check_order(order_id)`: update("checking {id}"), sleep(1000), "order {id} ok".
fn check_order(policy: OnDuplicate, scope: DuplicateScope, cancellable: bool) -> FunctionTool {
    let tool = FunctionTool::new(
        "check_order",
        "Check an order.",
        |ctx: RunContext, a: Order| async move {
            let _ = a.note;
            ctx.update(format!("checking {}", a.order_id)).await?;
            tokio::time::sleep(ms(1000)).await;
            Ok::<_, ToolError>(format!("order {} ok", a.order_id))
        },
    )
    .on_duplicate(policy, scope);
    if cancellable { tool.cancellable() } else { tool }
}

fn order_call(id: &str, order: &str) -> ScriptedResponse {
    call(id, "check_order", &format!(r#"{{"order_id":"{order}"}}"#))
}

/// Two turns: the first starts c1, the second (at 300 ms) calls c2.
async fn two_turns(tool: FunctionTool, second: ScriptedResponse) -> Harness {
    let h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![order_call("c1", "5"), text("checking"), second, text("second reply")],
    )
    .await;
    h.turn("check 5").await;
    tokio::time::sleep(ms(300)).await;
    h.turn("again").await;
    h
}

fn started(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStarted { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

/// The `x_tool_call_refused` events: `REFUSED(call_id,name,reason,[duplicates])`.
fn refused(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallRefused { call_id, name, reason, duplicates } => {
                let (reason, duplicates) = (reason.as_str(), duplicates.join(","));
                Some(format!("REFUSED({call_id},{name},{reason},[{duplicates}])"))
            }
            _ => None,
        })
        .collect()
}

fn output_of(ctx: &[String], id: &str) -> String {
    ctx.iter().find(|i| i.starts_with(&format!("out(#{id},"))).cloned().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn c29_allow_runs_duplicates_concurrently() {
    let tool = check_order(OnDuplicate::Allow, DuplicateScope::Name, false);
    let mut h = two_turns(tool, order_call("c2", "5")).await;
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(started(h.events()), ["c1", "c2"]);
    let ctx = h.ctx("A").await;
    assert!(output_of(&ctx, "c2").contains("checking 5"));
    assert!(ctx.iter().any(|i| i.starts_with("out(#c1_final")));
    assert!(ctx.iter().any(|i| i.starts_with("out(#c2_final")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c30_reject_by_name_answers_with_the_running_call() {
    // Not cancellable: the model is not told to cancel it (no cancel tool is offered).
    let tool = check_order(OnDuplicate::Reject, DuplicateScope::Name, false);
    let mut h = two_turns(tool, order_call("c2", "7")).await;
    let ctx = h.ctx("A").await;
    let expected = r#"`check_order` is already running:\n{"call_id":"c1","name":"check_order","arguments":"{\"order_id\": \"5\"}"}"#;
    let expected = expected.replace("\\n", "\n");
    assert_eq!(output_of(&ctx, "c2"), format!("out(#c2,{expected:?},ok,rr=T)"));
    assert_eq!(started(h.events()), ["c1"], "no lifecycle events for the rejected call");
    assert_eq!(refused(h.events()), ["REFUSED(c2,check_order,rejected,[c1])"]);
    h.session.wait_for_quiet().await.unwrap();
    assert!(h.ctx("A").await.iter().any(|i| i.starts_with("out(#c1_final")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancellable_duplicate_tells_the_model_how_to_cancel_it() {
    let tool = check_order(OnDuplicate::Reject, DuplicateScope::Name, true);
    let h = two_turns(tool, order_call("c2", "7")).await;
    let ctx = h.ctx("A").await;
    let expected = r#"`check_order` is already running:\n{"call_id":"c1","name":"check_order","arguments":"{\"order_id\": \"5\"}"}\nTo stop it, call `lk_agents_cancel_task` with its call_id, but only if the user explicitly asks."#;
    let expected = expected.replace("\\n", "\n");
    assert_eq!(output_of(&ctx, "c2"), format!("out(#c2,{expected:?},ok,rr=T)"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn name_and_args_scope_only_matches_equal_arguments() {
    let tool = check_order(OnDuplicate::Reject, DuplicateScope::NameAndArgs, false);
    let mut h = two_turns(tool, order_call("c2", "7")).await;
    assert_eq!(started(h.events()), ["c1", "c2"], "different arguments are no duplicate");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c32_c33_confirm_asks_then_runs_with_the_flag() {
    let tool = check_order(OnDuplicate::Confirm, DuplicateScope::Name, false);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![
            order_call("c1", "5"),
            text("checking"),
            order_call("c2", "5"),
            text("confirm?"),
            call("c3", "check_order", r#"{"order_id":"5","lk_agents_confirm_duplicate":true}"#),
            text("running again"),
        ],
    )
    .await;
    h.turn("check 5").await;
    let schema = &h.requests()[0];
    assert_eq!(schema.tools, ["check_order"]);
    h.turn("again").await;
    let ctx = h.ctx("A").await;
    assert!(output_of(&ctx, "c2").contains("If the user really wants another run"), "{ctx:?}");
    h.turn("yes, again").await;
    assert_eq!(refused(h.events()), ["REFUSED(c2,check_order,confirmation_needed,[c1])"]);
    let ctx = h.ctx("A").await;
    assert!(
        ctx.contains(
            &r#"call(check_order#c3 {"order_id": "5", "lk_agents_confirm_duplicate": true})"#
                .to_string()
        )
    );
    assert!(output_of(&ctx, "c3").contains("checking 5"), "the body never sees the flag");
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let ctx = h.ctx("A").await;
    assert!(ctx.iter().any(|i| i.starts_with("out(#c3_final,\"order 5 ok\"")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn confirm_tools_declare_the_flag_and_only_true_confirms() {
    let tool = check_order(OnDuplicate::Confirm, DuplicateScope::Name, false);
    let schema = tool.schema();
    assert_eq!(
        schema.parameters["properties"]["lk_agents_confirm_duplicate"]["type"],
        serde_json::json!(["boolean", "null"])
    );
    let h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![
            order_call("c1", "5"),
            text("ok"),
            call("c2", "check_order", r#"{"order_id":"5","lk_agents_confirm_duplicate":"yes"}"#),
        ],
    )
    .await;
    h.turn("a").await;
    h.turn("b").await;
    let ctx = h.ctx("A").await;
    assert_eq!(
        output_of(&ctx, "c2"),
        r#"out(#c2,"Error parsing arguments for `check_order`: lk_agents_confirm_duplicate: expected boolean",ERR,rr=T)"#
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c35_replace_cancels_the_running_call_first() {
    let tool = check_order(OnDuplicate::Replace, DuplicateScope::Name, true);
    let mut h = two_turns(tool, order_call("c2", "7")).await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = tool_events(h.events());
    let cancelled =
        events.iter().position(|e| e == "E(c1_final,cancelled,null)").expect("c1 cancelled");
    let c2 = events.iter().position(|e| e == "S(c2)").expect("c2 started");
    assert!(cancelled < c2, "{events:?}");
    let ctx = h.ctx("A").await;
    assert!(!ctx.iter().any(|i| i.contains("#c1_final")), "no pair for a cancelled call");
    assert!(ctx.iter().any(|i| i.starts_with("out(#c2_final,\"order 7 ok\"")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c36_replace_refuses_a_non_cancellable_call() {
    let tool = check_order(OnDuplicate::Replace, DuplicateScope::Name, false);
    let mut h = two_turns(tool, order_call("c2", "7")).await;
    let ctx = h.ctx("A").await;
    assert_eq!(
        output_of(&ctx, "c2"),
        r#"out(#c2,"cannot replace duplicate call of `check_order`: running call is not cancellable (allow_cancellation=False)",ERR,rr=T)"#
    );
    assert_eq!(started(h.events()), ["c1"]);
    assert_eq!(refused(h.events()), ["REFUSED(c2,check_order,not_replaced,[c1])"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c39_replace_between_two_calls_of_one_response() {
    #[derive(Deserialize, JsonSchema)]
    struct Q {
        q: String,
    }
    let search = FunctionTool::new("search", "Search.", |_ctx: RunContext, a: Q| async move {
        tokio::time::sleep(ms(100)).await;
        Ok::<_, ToolError>(format!("results {}", a.q))
    })
    .cancellable()
    .on_duplicate(OnDuplicate::Replace, DuplicateScope::Name);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(search),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("c1", "search", r#"{"q":"a"}"#),
            ScriptedCall::new("c2", "search", r#"{"q":"b"}"#),
        ])],
    )
    .await;
    h.turn("search").await;
    assert_eq!(
        tool_events(h.events()),
        [
            "S(c1)",
            "E(c1,cancelled,null)",
            "S(c2)",
            r#"E(c2,done,"results b")"#,
            r#"FTE["c1", "c2"]"#
        ]
    );
    let ctx = h.ctx("A").await;
    assert!(ctx.contains(&r#"out(#c1,"",ok,rr=F)"#.to_string()));
    assert!(ctx.contains(&r#"out(#c2,"results b",ok,rr=T)"#.to_string()));
    assert_eq!(h.llm.request_count(), 2, "one tool reply");
    h.close().await;
}

fn job(cancellable: bool) -> FunctionTool {
    let tool = FunctionTool::new("job", "A job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("working").await?;
        tokio::time::sleep(ms(400)).await;
        Ok::<_, ToolError>("job done")
    });
    if cancellable { tool.cancellable() } else { tool }
}

#[tokio::test(start_paused = true)]
async fn c41_c42_companions_are_listed_only_with_a_cancellable_tool() {
    let h = Harness::start(
        Agent::new("A", "inst").tool(job(false)),
        vec![
            call("c1", "job", "{}"),
            text("ok"),
            call("k1", "lk_agents_cancel_task", r#"{"call_id":"c1"}"#),
        ],
    )
    .await;
    h.turn("go").await;
    h.turn("cancel it").await;
    assert!(h.requests().iter().all(|r| r.tools == ["job"]));
    let ctx = h.ctx("A").await;
    assert_eq!(
        output_of(&ctx, "k1"),
        r#"out(#k1,"Unknown function: lk_agents_cancel_task - available tools: job",ERR,rr=T)"#
    );
    h.close().await;

    let other = sleeper("other", 10, "other done").cancellable();
    let h = Harness::start(Agent::new("A", "inst").tool(job(false)).tool(other), vec![]).await;
    h.turn("hi").await;
    assert_eq!(
        h.requests()[0].tools,
        ["job", "other", "lk_agents_cancel_task", "lk_agents_get_running_tasks"]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c43_c44_list_and_cancel_through_the_companions() {
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(job(true)),
        vec![
            call("c1", "job", "{}"),
            text("working"),
            call("g1", "lk_agents_get_running_tasks", "{}"),
            text("listed"),
            call("k1", "lk_agents_cancel_task", r#"{"call_id":"c1"}"#),
            text("cancelled"),
            call("g2", "lk_agents_get_running_tasks", "{}"),
            text("none left"),
        ],
    )
    .await;
    h.turn("go").await;
    h.turn("what runs?").await;
    h.turn("cancel it").await;
    h.turn("and now?").await;
    let ctx = h.ctx("A").await;
    assert_eq!(
        output_of(&ctx, "g1"),
        r#"out(#g1,"[{\"call_id\":\"c1\",\"name\":\"job\",\"arguments\":\"{}\"}]",ok,rr=T)"#
    );
    assert_eq!(output_of(&ctx, "k1"), r#"out(#k1,"Task c1 cancelled successfully.",ok,rr=T)"#);
    assert_eq!(output_of(&ctx, "g2"), r#"out(#g2,"[]",ok,rr=T)"#);
    let events = tool_events(h.events());
    let cancelled = events.iter().position(|e| e == "E(c1_final,cancelled,null)").unwrap();
    let companion = events.iter().position(|e| e.starts_with("E(k1,done")).unwrap();
    assert!(cancelled < companion, "{events:?}");
    assert!(!ctx.iter().any(|i| i.contains("#c1_final")), "no pair, no reply for c1");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c46_cancelling_a_non_cancellable_call_is_refused() {
    let other = sleeper("other", 10, "x").cancellable();
    let h = Harness::start(
        Agent::new("A", "inst").tool(job(false)).tool(other),
        vec![
            call("c1", "job", "{}"),
            text("working"),
            call("k1", "lk_agents_cancel_task", r#"{"call_id":"c1"}"#),
        ],
    )
    .await;
    h.turn("go").await;
    h.turn("cancel").await;
    let ctx = h.ctx("A").await;
    assert_eq!(output_of(&ctx, "k1"), r#"out(#k1,"Tool call c1 is not cancellable",ERR,rr=T)"#);
    h.session.wait_for_quiet().await.unwrap();
    assert!(h.ctx("A").await.iter().any(|i| i.starts_with("out(#c1_final")));
    assert_eq!(h.session.cancel_tool_call("nope").await, Err(CancelError::NotFound("nope".into())));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_call_gets_its_grace_period_and_still_ends_cancelled() {
    let cleaned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cleaned.clone();
    let upload = FunctionTool::new("upload", "Uploads.", move |ctx: RunContext, _a: NoArgs| {
        let flag = flag.clone();
        async move {
            ctx.update("uploading").await?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(60)) => Ok::<_, ToolError>("uploaded"),
                () = ctx.cancelled() => {
                    tokio::time::sleep(ms(500)).await; // clean up: delete the partial upload
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok("reverted")
                }
            }
        }
    })
    .cancellable();
    let mut h =
        Harness::start(Agent::new("A", "inst").tool(upload), vec![call("u1", "upload", "{}")])
            .await;
    h.turn("upload").await;
    assert_eq!(h.session.running_tool_calls().await.unwrap().len(), 1);
    h.session.cancel_tool_call("u1").await.unwrap();
    tokio::time::sleep(ms(1000)).await;
    assert!(
        cleaned.load(std::sync::atomic::Ordering::SeqCst),
        "the body cleaned up within the grace"
    );
    let ends: Vec<_> =
        tool_events(h.events()).into_iter().filter(|e| e.starts_with("E(")).collect();
    assert_eq!(
        ends,
        ["E(u1_final,cancelled,null)"],
        "one terminal record, whatever the body returned"
    );
    assert!(h.session.running_tool_calls().await.unwrap().is_empty());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_body_that_ends_early_stops_its_actor_then_and_its_late_updates_are_dropped() {
    let upload = FunctionTool::new("upload", "Uploads.", move |ctx: RunContext, _a: NoArgs| {
        async move {
            ctx.update("uploading").await?;
            ctx.cancelled().await;
            // Cleaning up after the cancel: what the body says now reaches nobody.
            ctx.update("reverting").await?;
            tokio::time::sleep(ms(300)).await;
            ctx.update("reverted").await?;
            Ok::<_, ToolError>("reverted")
        }
    })
    .cancellable();
    let builder = Session::builder().cancel_grace(Duration::from_secs(2));
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(upload),
        vec![call("u1", "upload", "{}")],
    )
    .await;
    h.turn("upload").await;
    h.session.cancel_tool_call("u1").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let snap = h.session.inspect().await.unwrap();
    assert!(snap.tree.find("tool_call:u1").is_some(), "still cleaning up within its grace");
    tokio::time::sleep(ms(300)).await;
    let snap = h.session.inspect().await.unwrap();
    assert!(
        snap.tree.find("tool_call:u1").is_none(),
        "the actor stopped when the body ended, not when the 2 s grace ran out"
    );
    assert_eq!(tool_events(h.events()), ["S(u1)", "FTE[\"u1\"]", "E(u1_final,cancelled,null)"]);
    let updates: Vec<&str> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallUpdated { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(updates, ["uploading"], "nothing the body posted after the cancel got through");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn close_cancels_cancellable_calls_and_awaits_the_others() {
    let h = Harness::start(
        Agent::new("A", "inst").tool(job(false)).tool(sleeper("other", 1, "x")).tool(
            FunctionTool::new("forever", "Never ends.", |ctx: RunContext, _a: NoArgs| async move {
                ctx.update("started").await?;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, ToolError>("never")
            })
            .cancellable(),
        ),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("n", "job", "{}"),
            ScriptedCall::new("f", "forever", "{}"),
        ])],
    )
    .await;
    h.turn("go").await;
    let start = tokio::time::Instant::now();
    let events = h.close().await;
    assert_eq!(start.elapsed(), ms(390), "close waited for the non-cancellable job only");
    let ends: Vec<_> = tool_events(&events).into_iter().filter(|e| e.starts_with("E(")).collect();
    assert_eq!(ends, ["E(f_final,cancelled,null)", r#"E(n_final,done,"job done")"#]);
}

#[tokio::test(start_paused = true)]
async fn c37_replace_fails_when_the_running_call_disallows_interruptions() {
    #[derive(Deserialize, JsonSchema)]
    struct Q {
        q: String,
    }
    let search = FunctionTool::new("search", "Search.", |ctx: RunContext, a: Q| async move {
        ctx.disallow_interruptions()?;
        ctx.update("searching").await?;
        tokio::time::sleep(ms(400)).await;
        Ok::<_, ToolError>(format!("results {}", a.q))
    })
    .cancellable()
    .on_duplicate(OnDuplicate::Replace, DuplicateScope::Name);
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(search),
        vec![
            call("c1", "search", r#"{"q":"a"}"#),
            text("ok"),
            call("c2", "search", r#"{"q":"b"}"#),
        ],
    )
    .await;
    h.turn("a").await;
    h.turn("b").await;
    let ctx = h.ctx("A").await;
    assert_eq!(
        output_of(&ctx, "c2"),
        r#"out(#c2,"Failed to cancel duplicate tool calls: Tool call c1 is not cancellable because interruptions are disallowed",ERR,rr=T)"#
    );
    assert_eq!(refused(h.events()), ["REFUSED(c2,search,not_replaced,[c1])"]);
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert!(h.ctx("A").await.iter().any(|i| i.starts_with(r#"out(#c1_final,"results a""#)));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c49_a_tool_that_disallows_interruptions_keeps_its_speech() {
    let pay = FunctionTool::new("pay", "Pay.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.disallow_interruptions()?;
        tokio::time::sleep(ms(300)).await;
        Ok::<_, ToolError>("paid")
    })
    .cancellable();
    let h = Harness::start(
        Agent::new("A", "inst").tool(pay),
        vec![text("Processing.").with_call(ScriptedCall::new("p1", "pay", "{}"))],
    )
    .await;
    h.session.user_turn("pay").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let before = tokio::time::Instant::now();
    h.session.interrupt().await.unwrap();
    assert_eq!(before.elapsed(), Duration::ZERO, "nothing to interrupt");
    assert_eq!(
        h.session.cancel_tool_call("p1").await,
        Err(CancelError::InterruptionsDisallowed("p1".into()))
    );
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await.last().unwrap(), "asst(reply 1)", "the tool reply runs");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c50_an_interruption_during_playout_keeps_results_once_without_a_reply() {
    let builder = Session::builder().speech_sink(colloquy::speech::PacedSink::new(ms(10)));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(sleeper("get_weather", 50, "sunny")),
        vec![text("Let me look at the sky for you, one moment.").with_call(ScriptedCall::new(
            "w1",
            "get_weather",
            "{}",
        ))],
    )
    .await;
    h.session.user_turn("weather?").await.unwrap();
    tokio::time::sleep(ms(200)).await; // the tool finished at 60 ms; playout is still going
    h.session.interrupt().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let ctx = h.ctx("A").await;
    assert_eq!(ctx.iter().filter(|i| i.starts_with("out(#w1")).count(), 1);
    assert!(ctx.contains(&r#"out(#w1,"sunny",ok,rr=F)"#.to_string()), "{ctx:?}");
    assert!(ctx[1].ends_with(",interrupted)"), "the message keeps what was played: {ctx:?}");
    assert_eq!(h.llm.request_count(), 1, "no tool reply");
    h.close().await;
}

#[derive(Deserialize, JsonSchema)]
struct Refund {
    order_id: u64,
    amount: f64,
}

/// `refund(order_id, amount)`, one per order at a time: update, sleep(1000), "refunded …".
fn refund(policy: OnDuplicate) -> FunctionTool {
    FunctionTool::new("refund", "Refund an order.", |ctx: RunContext, a: Refund| async move {
        ctx.update(format!("refunding {}", a.order_id)).await?;
        tokio::time::sleep(ms(1000)).await;
        Ok::<_, ToolError>(format!("refunded {} on {}", a.amount, a.order_id))
    })
    .cancellable()
    .on_duplicate(policy, DuplicateScope::args(["order_id"]))
}

fn refund_call(id: &str, args: &str) -> ScriptedCall {
    ScriptedCall::new(id, "refund", args)
}

/// Turn 1 starts c1 (order 25); turn 2 (at 300 ms) sends `second` in one response.
async fn refund_turns(policy: OnDuplicate, second: Vec<ScriptedCall>) -> Harness {
    let h = Harness::start(
        Agent::new("A", "inst").tool(refund(policy)),
        vec![
            ScriptedResponse::calls([refund_call("c1", r#"{"order_id":25,"amount":10}"#)]),
            text("refunding"),
            ScriptedResponse::calls(second),
            text("second reply"),
        ],
    )
    .await;
    h.turn("refund order 25").await;
    tokio::time::sleep(ms(300)).await;
    h.turn("again").await;
    h
}

#[tokio::test(start_paused = true)]
async fn an_args_scope_rejects_a_second_call_for_one_order_whatever_the_amount() {
    // "25" validates to 25 (the key uses validated arguments); the amount is not compared.
    let mut h = refund_turns(
        OnDuplicate::Reject,
        vec![
            refund_call("c2", r#"{"order_id":"25","amount":99}"#),
            refund_call("c3", r#"{"order_id":26,"amount":10}"#),
        ],
    )
    .await;
    assert_eq!(started(h.events()), ["c1", "c3"], "another order is no duplicate");
    assert_eq!(refused(h.events()), ["REFUSED(c2,refund,rejected,[c1])"]);
    let ctx = h.ctx("A").await;
    assert!(output_of(&ctx, "c2").starts_with("out(#c2,\"`refund` is already running:"), "{ctx:?}");
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let ctx = h.ctx("A").await;
    assert!(ctx.iter().any(|i| i.starts_with(r#"out(#c1_final,"refunded 10 on 25""#)));
    assert!(ctx.iter().any(|i| i.starts_with(r#"out(#c3_final,"refunded 10 on 26""#)));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_args_scope_replaces_only_the_call_for_the_same_order() {
    let mut h = refund_turns(
        OnDuplicate::Replace,
        vec![
            refund_call("c2", r#"{"order_id":25,"amount":12}"#),
            refund_call("c3", r#"{"order_id":26,"amount":10}"#),
        ],
    )
    .await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = tool_events(h.events());
    let starts: Vec<&String> = events.iter().filter(|e| e.starts_with("S(")).collect();
    assert_eq!(starts, ["S(c1)", "S(c2)", "S(c3)"]);
    let cancelled = events.iter().position(|e| e == "E(c1_final,cancelled,null)").expect("c1");
    let c2 = events.iter().position(|e| e == "S(c2)").expect("c2 started");
    assert!(cancelled < c2, "{events:?}");
    assert!(refused(h.events()).is_empty(), "a replace that cancels refuses nothing");
    let ctx = h.ctx("A").await;
    assert!(ctx.iter().any(|i| i.starts_with(r#"out(#c2_final,"refunded 12 on 25""#)));
    assert!(ctx.iter().any(|i| i.starts_with(r#"out(#c3_final,"refunded 10 on 26""#)));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_args_scope_asks_to_confirm_the_same_order_and_runs_it_once_confirmed() {
    let h = Harness::start(
        Agent::new("A", "inst").tool(refund(OnDuplicate::Confirm)),
        vec![
            ScriptedResponse::calls([refund_call("c1", r#"{"order_id":25,"amount":10}"#)]),
            text("refunding"),
            ScriptedResponse::calls([
                refund_call("c2", r#"{"order_id":25,"amount":5}"#),
                refund_call("c3", r#"{"order_id":26,"amount":5}"#),
            ]),
            text("confirm?"),
            ScriptedResponse::calls([refund_call(
                "c4",
                r#"{"order_id":25,"amount":5,"lk_agents_confirm_duplicate":true}"#,
            )]),
            text("refunding again"),
        ],
    )
    .await;
    // Observed as a host following only tool events would.
    let mut tools = h.session.subscribe_to(EventFilter::tool_execution());
    h.turn("refund 25").await;
    h.turn("and 25 and 26").await;
    h.turn("yes, 25 again").await;
    let ctx = h.ctx("A").await;
    assert!(output_of(&ctx, "c2").contains("If the user really wants another run"), "{ctx:?}");
    let events: Vec<SessionEvent> = std::iter::from_fn(|| tools.try_recv()).collect();
    assert_eq!(refused(&events), ["REFUSED(c2,refund,confirmation_needed,[c1])"]);
    assert_eq!(started(&events), ["c1", "c3", "c4"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_session_refuses_an_args_scope_naming_no_parameter() {
    let typo = refund(OnDuplicate::Reject)
        .on_duplicate(OnDuplicate::Reject, DuplicateScope::args(["orderid"]));
    let error = Session::builder()
        .llm(ScriptedLlm::new(Vec::new()))
        .start(Agent::new("A", "inst").tool(typo))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        error.to_string(),
        "invalid session configuration: the duplicate scope of `refund` names `orderid`, which \
         is not one of its parameters"
    );
}

/// The deferred-reply instructions name a call by its pairs' ids (`c1_update_1`): a model
/// that passes one to `lk_agents_cancel_task` cancels the call it derives from
/// (docs/decisions.md#request-turns).
#[tokio::test(start_paused = true)]
async fn cancel_task_takes_a_pair_id_for_its_call() {
    let chatty = FunctionTool::new("job", "A job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("started").await?;
        tokio::time::sleep(ms(10)).await;
        ctx.update("halfway").await?;
        tokio::time::sleep(ms(10_000)).await;
        Ok::<_, ToolError>("job done")
    })
    .cancellable();
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(chatty),
        vec![
            call("c1", "job", "{}"),
            text("on it"),
            text("halfway there"),
            call("k1", "lk_agents_cancel_task", r#"{"call_id":"c1_update_1"}"#),
            text("stopped"),
        ],
    )
    .await;
    h.turn("go").await;
    tokio::time::sleep(ms(50)).await;
    h.session.wait_for_idle().await.unwrap();
    let reply = h.requests().last().and_then(|r| r.instructions.clone()).unwrap_or_default();
    assert!(reply.contains(r#"["c1_update_1"]"#), "{reply}");
    h.turn("stop it").await;
    let ctx = h.ctx("A").await;
    assert_eq!(output_of(&ctx, "k1"), r#"out(#k1,"Task c1 cancelled successfully.",ok,rr=T)"#);
    let ended: Vec<String> =
        h.tool_events().into_iter().filter(|e| e.starts_with("E(c1")).collect();
    assert_eq!(ended, ["E(c1_final,cancelled,null)"]);
    h.close().await;
}
