//! Background tools: `ctx.update()`, synthetic pairs, deferred replies and their coalescing
//! (scenarios C-06 … C-73 of docs/scenarios.md, adapted to colloquy's decisions), on the paused clock.

use std::time::Duration;

use crate::common::*;
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use colloquy::session::{Lifecycle, LifecycleEvent};
use colloquy::templates::{Template, Templates, defaults};
use colloquy::tools::UpdateOptions;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// `U(name, m)`: the default update template rendered.
fn u(name: &str, message: &str) -> String {
    defaults::UPDATE.replace("{function_name}", name).replace("{message}", message)
}

/// `Rt([ids])` and `Rc([ids])`: the default reply instructions rendered.
fn rt(ids: &[&str]) -> String {
    defaults::REPLY_AT_TAIL.replace("{call_ids}", &serde_json::to_string(ids).unwrap())
}

pub(crate) fn rc(ids: &[&str]) -> String {
    defaults::REPLY_MAYBE_COVERED.replace("{call_ids}", &serde_json::to_string(ids).unwrap())
}

/// Events in the scenarios' notation, including updates and replies.
fn notation(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallUpdated { id, call_id, message, .. } => {
                Some(format!("Up({id},{call_id},{message})"))
            }
            EventKind::ToolReplyUpdated { update_ids, status, .. } => {
                Some(format!("R({},{update_ids:?})", format!("{status:?}").to_lowercase()))
            }
            _ => tool_events(std::slice::from_ref(e)).pop(),
        })
        .collect()
}

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

fn book_with_update() -> FunctionTool {
    FunctionTool::new("book", "Book.", |ctx: RunContext, a: City| async move {
        ctx.update(format!("Looking up {}", a.city)).await?;
        tokio::time::sleep(ms(200)).await;
        Ok::<_, ToolError>("Booked FL-1")
    })
}

#[tokio::test(start_paused = true)]
async fn c06_one_update_then_a_result() {
    let mut h = Harness::start(
        agent().tool(book_with_update()),
        vec![call("c1", "book", r#"{"city":"Tokyo"}"#), text("Sure, looking."), text("All set.")],
    )
    .await;
    let result = h.session.run("book Tokyo").await.unwrap();
    // The run returns after "Sure, looking." without waiting for the tool (C-69 too).
    let mut expect = result.expect();
    expect.next_event().is_function_call("book");
    expect.next_event().is_function_call_output().with_output(&u("book", "Looking up Tokyo"));
    expect.next_event().is_message(Role::Assistant).with_text("Sure, looking.");
    expect.no_more_events();
    assert_eq!(tokio::time::Instant::now().elapsed(), Duration::ZERO);
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();

    let reqs = h.requests();
    assert_eq!(reqs.len(), 3);
    // Decision 15: a tool reply to nothing but first updates is sent with `none`.
    assert_eq!(choice(&reqs[1]), "none");
    assert_eq!(
        show(&reqs[1].items).last().unwrap(),
        &format!("out(#c1,{:?},ok,rr=T)", u("book", "Looking up Tokyo"))
    );
    // Decision 15: a deferred reply carrying a final leaves tool_choice unset.
    assert_eq!((reqs[2].kind, choice(&reqs[2])), (RequestKind::DeferredReply, "unset"));
    assert_eq!(reqs[2].tools, ["book"]);
    assert_eq!(reqs[2].instructions.as_deref(), Some(rt(&["c1_final"]).as_str()));
    let expected = [
        "user(book Tokyo)".to_string(),
        r#"call(book#c1 {"city": "Tokyo"})"#.into(),
        format!("out(#c1,{:?},ok,rr=T)", u("book", "Looking up Tokyo")),
        "asst(Sure, looking.)".into(),
        r#"call(book#c1_final {"city": "Tokyo"})"#.into(),
        r#"out(#c1_final,"Booked FL-1",ok,rr=T)"#.into(),
        "asst(All set.)".into(),
    ];
    assert_eq!(h.ctx("A").await, expected);
    assert_eq!(h.hist().await, expected);
    assert_eq!(
        notation(h.events()),
        [
            "S(c1)",
            "Up(c1,c1,Looking up Tokyo)",
            r#"FTE["c1"]"#,
            r#"E(c1_final,done,"Booked FL-1")"#,
            r#"R(scheduled,["c1_final"])"#,
            r#"R(completed,["c1_final"])"#,
        ]
    );
    // The first update marks the call non-blocking; the synthetic call copies it.
    let history = h.session.history().await.unwrap();
    let original = history[2].as_function_call().unwrap();
    assert_eq!(original.extra["__livekit_agents_tool_non_blocking"], json!(true));
    let events = h.events().to_vec();
    assert_eq!(at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { .. })), 210);
    h.close().await;
}

/// The ReplyCoalescer actor is spawned by the first pair that waits for a deferred reply, and
/// the agent's toolset by its first call (decision 81), not with the session: a session whose
/// tools are never called runs two actors fewer.
#[tokio::test(start_paused = true)]
async fn the_coalescer_and_the_toolset_start_when_first_needed() {
    let book = FunctionTool::new("book", "Book.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("step one").await?;
        tokio::time::sleep(ms(200)).await;
        Ok::<_, ToolError>("booked")
    });
    let mut builder = Session::builder();
    let mut lifecycle = builder.lifecycle_events();
    let script = vec![text("Hello."), call("c1", "book", "{}"), text("Looking."), text("Booked.")];
    let mut h = Harness::start_with(builder, agent().tool(book), script).await;
    let started = |lifecycle: &mut tokio::sync::mpsc::Receiver<LifecycleEvent>| {
        std::iter::from_fn(|| lifecycle.try_recv().ok())
            .filter(|r| r.what == Lifecycle::Started)
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    h.turn("hi").await;
    // An inspection shows the toolset and its tools without starting it.
    let snap = h.session.inspect().await.unwrap();
    let toolset = snap.tree.find("toolset:agent:A").expect("shown before its first call");
    assert_eq!(toolset.tools.as_deref(), Some(&["book".to_string()][..]));
    assert_eq!(started(&mut lifecycle), ["activity:A", "session"]);
    h.turn("book").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(started(&mut lifecycle), ["toolset:agent:A", "tool_call:c1", "coalescer"]);
    let tool_events = h.tool_events();
    assert!(tool_events.contains(&r#"E(c1_final,done,"booked")"#.to_string()), "{tool_events:?}");
    let stopped: Vec<_> = {
        h.close().await;
        std::iter::from_fn(|| lifecycle.try_recv().ok()).map(|r| (r.id, r.what)).collect()
    };
    assert!(stopped.contains(&("coalescer".to_string(), Lifecycle::Stopped)), "{stopped:?}");
}

/// A source that lists no tools and counts its starts.
#[derive(Debug, Default)]
struct CountedSource(std::sync::atomic::AtomicUsize);

impl colloquy::tools::ToolSource for CountedSource {
    fn tools(&self) -> std::sync::Arc<[FunctionTool]> {
        std::sync::Arc::from(Vec::new())
    }

    fn ready(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn start(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The agent's toolset is not deferred when a source lists tools for it (decision 81): the
/// source starts with the session, not at the first call.
#[tokio::test(start_paused = true)]
async fn a_source_on_the_agents_own_toolset_starts_with_the_session() {
    let source = std::sync::Arc::new(CountedSource::default());
    let listed = Toolset::new("listed").source(source.clone());
    let mut builder = Session::builder();
    let mut lifecycle = builder.lifecycle_events();
    let h = Harness::start_with(builder, agent().toolset(listed), vec![]).await;
    tokio::task::yield_now().await;
    let started: Vec<String> = std::iter::from_fn(|| lifecycle.try_recv().ok())
        .filter(|r| r.what == Lifecycle::Started)
        .map(|r| r.id)
        .collect();
    assert!(started.contains(&"toolset:agent:A".to_string()), "{started:?}");
    assert_eq!(source.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c07_two_updates_and_a_result() {
    let book = FunctionTool::new("book", "Book.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("step one").await?;
        tokio::time::sleep(ms(200)).await;
        ctx.update("step two").await?;
        tokio::time::sleep(ms(200)).await;
        Ok::<_, ToolError>(Json(json!({"confirmation": "FL-1"})))
    });
    let mut h = Harness::start(
        agent().tool(book),
        vec![
            call("c1", "book", "{}"),
            text("Sure, looking."),
            text("Update reply"),
            text("Final reply"),
        ],
    )
    .await;
    h.turn("book").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let reqs = h.requests();
    // A reply carrying only an update is sent with tool_choice none (decision 15).
    assert_eq!(choice(&reqs[2]), "none");
    assert_eq!(reqs[2].instructions.as_deref(), Some(rt(&["c1_update_1"]).as_str()));
    assert_eq!(
        show(&reqs[2].items)[4..],
        [
            "call(book#c1_update_1 {})".to_string(),
            format!("out(#c1_update_1,{:?},ok,rr=T)", u("book", "step two"))
        ]
    );
    assert_eq!(choice(&reqs[3]), "unset");
    assert_eq!(reqs[3].instructions.as_deref(), Some(rt(&["c1_final"]).as_str()));
    assert_eq!(
        h.ctx("A").await,
        [
            "user(book)".to_string(),
            "call(book#c1 {})".into(),
            format!("out(#c1,{:?},ok,rr=T)", u("book", "step one")),
            "asst(Sure, looking.)".into(),
            "call(book#c1_update_1 {})".into(),
            format!("out(#c1_update_1,{:?},ok,rr=T)", u("book", "step two")),
            "asst(Update reply)".into(),
            "call(book#c1_final {})".into(),
            r#"out(#c1_final,"{\"confirmation\":\"FL-1\"}",ok,rr=T)"#.into(),
            "asst(Final reply)".into(),
        ]
    );
    assert_eq!(
        notation(h.events()),
        [
            "S(c1)",
            "Up(c1,c1,step one)",
            r#"FTE["c1"]"#,
            "Up(c1_update_1,c1,step two)",
            r#"R(scheduled,["c1_update_1"])"#,
            r#"R(completed,["c1_update_1"])"#,
            r#"E(c1_final,done,"{\"confirmation\":\"FL-1\"}")"#,
            r#"R(scheduled,["c1_final"])"#,
            r#"R(completed,["c1_final"])"#,
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c09_update_then_nothing_and_c17_stop_response_after_an_update_leave_empty_finals() {
    let job = FunctionTool::new("job", "Job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("working").await?;
        tokio::time::sleep(ms(250)).await;
        Ok::<_, ToolError>(())
    });
    let stop_now =
        FunctionTool::new("stop_now", "Stop.", |_ctx: RunContext, _a: NoArgs| async move {
            Ok::<_, ToolError>(StopResponse)
        });
    let stop_late =
        FunctionTool::new("stop_late", "Stop late.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("working").await?;
            tokio::time::sleep(ms(200)).await;
            Ok::<_, ToolError>(StopResponse)
        });
    let mut h = Harness::start(
        agent().tool(job).tool(stop_now).tool(stop_late),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("a4", "job", "{}"),
            ScriptedCall::new("e3", "stop_now", "{}"),
            ScriptedCall::new("a3", "stop_late", "{}"),
        ])],
    )
    .await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    let events = notation(h.events());
    assert!(events.contains(&"E(a4_final,done,null)".to_string()));
    assert!(events.contains(&"E(e3,done,null)".to_string()));
    assert!(events.contains(&"E(a3_final,done,null)".to_string()));
    assert!(!events.iter().any(|e| e.starts_with("R(")), "no deferred reply: {events:?}");
    assert_eq!(h.llm.request_count(), 2, "one tool reply, for the updates");
    let ctx = h.ctx("A").await;
    assert!(ctx.contains(&r#"out(#e3,"",ok,rr=F)"#.to_string()));
    // Decision 23: after an update, nothing still leaves an empty `_final` pair that asks for
    // no reply, so the context never says the task still runs.
    for id in ["a4", "a3"] {
        assert!(ctx.contains(&format!(r#"out(#{id}_final,"",ok,rr=F)"#)), "{id}: {ctx:#?}");
    }
    let events = h.events().to_vec();
    assert_eq!(
        at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { id, .. } if id == "a4_final")),
        260
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c10_non_string_updates_are_not_wrapped() {
    let ts = FunctionTool::new("ts", "Toolset tool.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("from toolset").await?;
        tokio::time::sleep(ms(50)).await;
        ctx.update(json!({"progress": 50})).await?;
        tokio::time::sleep(ms(50)).await;
        Ok::<_, ToolError>("ts done")
    });
    let mut h = Harness::start(agent().tool(ts), vec![call("t1", "ts", "{}")]).await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert!(notation(h.events()).contains(&r#"Up(t1_update_1,t1,{"progress":50})"#.to_string()));
    assert!(
        h.ctx("A").await.contains(&r#"out(#t1_update_1,"{\"progress\":50}",ok,rr=T)"#.to_string())
    );
    h.close().await;
}

fn slow_with_update(
    name: &'static str,
    started: &'static str,
    ms_: u64,
    done: &'static str,
) -> FunctionTool {
    FunctionTool::new(name, "Slow.", move |ctx: RunContext, _a: NoArgs| async move {
        ctx.update(started).await?;
        tokio::time::sleep(ms(ms_)).await;
        Ok::<_, ToolError>(done)
    })
}

/// C-12's agent: `slow_a` (200 ms) and `slow_b` (250 ms), each updating first.
fn slow_pair() -> Agent {
    agent().tool(slow_with_update("slow_a", "a started", 200, "A done")).tool(slow_with_update(
        "slow_b",
        "b started",
        250,
        "B done",
    ))
}

/// One response calling both: `slow_a#a`, `slow_b#b`.
fn both_slow_calls() -> ScriptedResponse {
    ScriptedResponse::calls([
        ScriptedCall::new("a", "slow_a", "{}"),
        ScriptedCall::new("b", "slow_b", "{}"),
    ])
}

#[tokio::test(start_paused = true)]
async fn c12_parallel_async_tools_get_separate_replies_when_idle() {
    let mut h = Harness::start(slow_pair(), vec![both_slow_calls(), text("tool-reply")]).await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let reqs = h.requests();
    assert_eq!(
        show(&reqs[1].items)[1..],
        [
            "call(slow_a#a {})".to_string(),
            "call(slow_b#b {})".into(),
            format!("out(#a,{:?},ok,rr=T)", u("slow_a", "a started")),
            format!("out(#b,{:?},ok,rr=T)", u("slow_b", "b started")),
        ]
    );
    // Every output of that step was a first update: the tool reply is sent with `none`.
    assert_eq!(choice(&reqs[1]), "none");
    let replies: Vec<_> =
        notation(h.events()).into_iter().filter(|e| e.starts_with("R(")).collect();
    assert_eq!(
        replies,
        [
            r#"R(scheduled,["a_final"])"#,
            r#"R(completed,["a_final"])"#,
            r#"R(scheduled,["b_final"])"#,
            r#"R(completed,["b_final"])"#,
        ]
    );
    assert_eq!(reqs[2].instructions.as_deref(), Some(rt(&["a_final"]).as_str()));
    assert_eq!(reqs[3].instructions.as_deref(), Some(rt(&["b_final"]).as_str()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c15_tool_error_after_an_update() {
    let late = FunctionTool::new("late", "Late.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("working").await?;
        tokio::time::sleep(ms(100)).await;
        Err::<String, _>(ToolError::new("card declined"))
    });
    let mut h = Harness::start(agent().tool(late), vec![call("a1", "late", "{}")]).await;
    h.turn("pay").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert!(h.ctx("A").await.contains(&r#"out(#a1_final,"card declined",ERR,rr=T)"#.to_string()));
    assert!(notation(h.events()).contains(&r#"E(a1_final,error,"card declined")"#.to_string()));
    assert_eq!(h.requests()[2].instructions.as_deref(), Some(rt(&["a1_final"]).as_str()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c51_finals_landing_while_busy_coalesce_into_one_reply_at_tail() {
    let mut h = Harness::start(
        slow_pair(),
        vec![
            both_slow_calls(),
            text("tool-reply"),
            text("user-reply").with_latency(ms(400)),
            text("deferred"),
        ],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_turn("status?").await.unwrap();
    // Both finals landed while the user turn's reply is still being generated: the coalescer
    // holds them and offers nothing to the busy session.
    tokio::time::sleep(ms(200)).await;
    let held = h.session.inspect().await.unwrap().replies.expect("the coalescer runs");
    assert_eq!(held.pending, ["a_final", "b_final"]);
    assert!(!held.offered);
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let replies: Vec<_> =
        notation(h.events()).into_iter().filter(|e| e.starts_with("R(")).collect();
    assert_eq!(
        replies,
        [r#"R(scheduled,["a_final", "b_final"])"#, r#"R(completed,["a_final", "b_final"])"#]
    );
    let reqs = h.requests();
    assert_eq!(reqs[3].instructions.as_deref(), Some(rt(&["a_final", "b_final"]).as_str()));
    assert!(!show(&reqs[2].items).iter().any(|i| i.contains("_final")), "sent before the finals");
    assert_eq!(
        h.ctx("A").await,
        [
            "user(go)".to_string(),
            "call(slow_a#a {})".into(),
            "call(slow_b#b {})".into(),
            format!("out(#a,{:?},ok,rr=T)", u("slow_a", "a started")),
            format!("out(#b,{:?},ok,rr=T)", u("slow_b", "b started")),
            "asst(tool-reply)".into(),
            "user(status?)".into(),
            "asst(user-reply)".into(),
            "call(slow_a#a_final {})".into(),
            r#"out(#a_final,"A done",ok,rr=T)"#.into(),
            "call(slow_b#b_final {})".into(),
            r#"out(#b_final,"B done",ok,rr=T)"#.into(),
            "asst(deferred)".into(),
        ]
    );
    h.close().await;
}

/// C-52's session: the tool reply takes 600 ms, the reply to the user's second input none.
pub(crate) async fn c52_session() -> Harness {
    Harness::start(
        slow_pair(),
        vec![
            both_slow_calls(),
            text("tool-reply").with_latency(ms(600)),
            text("user-reply"),
            text("deferred"),
        ],
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn c52_results_maybe_covered_by_a_later_user_turn() {
    let h = c52_session().await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(300)).await;
    h.session.user_turn("status?").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let reqs = h.requests();
    let deferred = reqs.iter().find(|r| r.kind == RequestKind::DeferredReply).unwrap();
    assert_eq!(deferred.instructions.as_deref(), Some(rc(&["a_final", "b_final"]).as_str()));
    let ctx = h.ctx("A").await;
    let pos = |needle: &str| ctx.iter().position(|i| i.starts_with(needle)).unwrap();
    assert!(pos("out(#b_final") < pos("user(status?)"), "{ctx:?}");
    assert_eq!(ctx.last().unwrap(), "asst(deferred)");
    h.close().await;
}

fn job_with_update() -> FunctionTool {
    FunctionTool::new("job", "Job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("started").await?;
        tokio::time::sleep(ms(100)).await;
        Ok::<_, ToolError>("job result")
    })
}

#[tokio::test(start_paused = true)]
async fn c53_an_empty_deferred_reply_is_skipped() {
    let mut h = Harness::start(
        agent().tool(job_with_update()),
        vec![call("j1", "job", "{}"), text("ok"), text("")],
    )
    .await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let replies: Vec<_> =
        notation(h.events()).into_iter().filter(|e| e.starts_with("R(")).collect();
    assert_eq!(replies, [r#"R(scheduled,["j1_final"])"#, r#"R(skipped,["j1_final"])"#]);
    assert_eq!(h.ctx("A").await.last().unwrap(), r#"out(#j1_final,"job result",ok,rr=T)"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c54_an_interrupted_deferred_reply_is_not_rescheduled() {
    let mut h = Harness::start(
        agent().tool(job_with_update()),
        vec![call("j1", "job", "{}"), text("ok"), text("late news").with_latency(ms(300))],
    )
    .await;
    h.turn("go").await; // the final lands at 110 ms, its reply is scheduled at once
    tokio::time::sleep(ms(300)).await;
    h.session.interrupt().await.unwrap();
    tokio::time::sleep(ms(1000)).await;
    let replies: Vec<_> =
        notation(h.events()).into_iter().filter(|e| e.starts_with("R(")).collect();
    assert_eq!(replies, [r#"R(scheduled,["j1_final"])"#, r#"R(interrupted,["j1_final"])"#]);
    assert_eq!(h.llm.request_count(), 3);
    assert!(h.ctx("A").await.contains(&r#"out(#j1_final,"job result",ok,rr=T)"#.to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c64_a_reply_while_a_blocking_tool_runs_sees_a_placeholder() {
    let book = sleeper("book_flight", 400, "booked");
    let h = Harness::start(
        agent().tool(book),
        vec![text("One moment.").with_call(ScriptedCall::new("bf1", "book_flight", "{}"))],
    )
    .await;
    h.session.user_turn("book").await.unwrap();
    tokio::time::sleep(ms(150)).await;
    h.session.generate_reply("say something while waiting").await.unwrap();
    tokio::time::sleep(ms(20)).await;
    let reqs = h.requests();
    assert_eq!(reqs.len(), 2, "the second reply started at once");
    assert_eq!(
        show(&reqs[1].items),
        [
            "user(book)",
            "asst(One moment.)",
            "call(book_flight#bf1 {})",
            r#"out(#bf1,"The tool call is still in progress.",ok,rr=T)"#,
        ]
    );
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        h.ctx("A").await,
        [
            "user(book)",
            "asst(One moment.)",
            "call(book_flight#bf1 {})",
            "asst(reply 1)",
            r#"out(#bf1,"booked",ok,rr=T)"#,
            "asst(reply 2)",
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c66_the_away_timer_waits_for_a_background_tool() {
    let lookup =
        FunctionTool::new("async_lookup", "Look up.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("looking it up").await?;
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok::<_, ToolError>(())
        });
    let builder = Session::builder().user_away_timeout(Some(Duration::from_secs(3)));
    let mut h =
        Harness::start_with(builder, agent().tool(lookup), vec![call("c1", "async_lookup", "{}")])
            .await;
    h.turn("go").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let aways: Vec<u64> = h
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::UserState { state: UserState::Away }))
        .map(|e| e.at_ms)
        .collect();
    assert_eq!(aways, [23_010], "one away transition, 3 s after the tool returned at 20.01 s");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c73_per_call_and_closure_templates() {
    let tool = FunctionTool::new("a_tool", "A tool.", |ctx: RunContext, _a: NoArgs| async move {
        let template = Template::func(|p| {
            format!("[{}/{}] {}", p["function_name"], p["call_id"], p["message"])
        });
        ctx.update_with("per call", UpdateOptions { silent: false, template: Some(template) })
            .await?;
        Ok::<_, ToolError>(())
    });
    let mut h = Harness::start(agent().tool(tool), vec![call("a1", "a_tool", "{}")]).await;
    h.turn("go").await;
    assert!(h.ctx("A").await.contains(&r#"out(#a1,"[a_tool/a1] per call",ok,rr=T)"#.to_string()));
    assert!(notation(h.events()).contains(&"Up(a1,a1,per call)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn session_and_agent_templates_resolve_most_specific_first() {
    let session_templates = Templates { update: Some("S: {message}".into()), ..Default::default() };
    let agent_templates =
        Templates { reply_at_tail: Some("A tail {call_ids}".into()), ..Default::default() };
    // The agent sets templates, so its update text falls back to the default, not the session's.
    let h = Harness::start_with(
        Session::builder().templates(session_templates),
        agent().tool(book_with_update()).templates(agent_templates),
        vec![call("c1", "book", r#"{"city":"Oslo"}"#), text("ok")],
    )
    .await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert!(
        h.ctx("A").await.contains(&format!("out(#c1,{:?},ok,rr=T)", u("book", "Looking up Oslo")))
    );
    assert_eq!(h.requests()[2].instructions.as_deref(), Some(r#"A tail ["c1_final"]"#));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn silent_updates_are_recorded_without_a_reply() {
    let quiet = FunctionTool::new("quiet", "Quiet.", |ctx: RunContext, _a: NoArgs| async move {
        let silent = UpdateOptions { silent: true, template: None };
        ctx.update_with("noted quietly", silent.clone()).await?;
        tokio::time::sleep(ms(50)).await;
        ctx.update_with("still quiet", silent).await?;
        tokio::time::sleep(ms(50)).await;
        Ok::<_, ToolError>(colloquy::tools::ToolResult {
            output: "done".into(),
            reply_required: false,
        })
    });
    let mut h = Harness::start(agent().tool(quiet), vec![call("q1", "quiet", "{}")]).await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(h.llm.request_count(), 1, "a silent first update asks for no tool reply");
    assert!(!notation(h.events()).iter().any(|e| e.starts_with("R(")));
    let ctx = h.ctx("A").await;
    assert!(ctx.contains(&format!("out(#q1_update_1,{:?},ok,rr=F)", u("quiet", "still quiet"))));
    assert!(ctx.contains(&r#"out(#q1_final,"done",ok,rr=F)"#.to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c69_a_background_tool_does_not_hold_the_run() {
    let slow_job =
        FunctionTool::new("slow_job", "Slow.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("working on it").await?;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("done")
        });
    let h = Harness::start(agent().tool(slow_job), vec![call("c1", "slow_job", "{}")]).await;
    let start = tokio::time::Instant::now();
    let result = h.session.run("go").await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
    result.contains_function_call("slow_job", json!({}));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn pairs_landing_during_a_run_hold_it_until_their_reply() {
    let quick = FunctionTool::new("quick", "Quick.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("started").await?;
        tokio::time::sleep(ms(5)).await;
        Ok::<_, ToolError>("quick result")
    });
    let h = Harness::start(
        agent().tool(quick),
        vec![
            call("c1", "quick", "{}"),
            text("Working on it.").with_latency(ms(50)),
            text("Here it is."),
        ],
    )
    .await;
    let result = h.session.run("go").await.unwrap();
    let texts: Vec<_> =
        result.events().iter().filter_map(|e| e.as_message()).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Working on it.", "Here it is."]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c90_standalone_execution_records_updates() {
    #[derive(Deserialize, JsonSchema)]
    struct Query {
        query: String,
    }
    let tool = FunctionTool::new("progress_tool", "P.", |ctx: RunContext, a: Query| async move {
        ctx.update("searching...").await?;
        Ok::<_, ToolError>(format!("result for {}", a.query))
    });
    let call = colloquy::chat::FunctionCall {
        id: "i".into(),
        call_id: "c1".into(),
        name: "progress_tool".into(),
        arguments: r#"{"query":"x"}"#.into(),
        extra: Default::default(),
        created_at: Default::default(),
    };
    let ctx = RunContext::new(call, "standalone", "none", None);
    let args = json!({"query": "x"}).as_object().unwrap().clone();
    let out = tool.invoke(ctx.clone(), args).await.unwrap();
    assert_eq!(out.output_text(), "result for x");
    let updates = ctx.recorded_updates();
    assert_eq!(updates.len(), 1);
    assert!(updates[0].output.contains("searching"));
    let missing = tool.invoke(ctx.clone(), Default::default()).await.unwrap_err();
    assert_eq!(missing.model_text(), "Error parsing arguments for `progress_tool`: query: missing");
}

#[tokio::test(start_paused = true)]
async fn a_tool_can_wait_for_its_step_to_finish_playing() {
    let waits = FunctionTool::new("waits", "Waits.", |ctx: RunContext, _a: NoArgs| async move {
        let start = tokio::time::Instant::now();
        ctx.wait_for_playout().await;
        Ok::<_, ToolError>(format!("waited {} ms", start.elapsed().as_millis()))
    });
    let builder = Session::builder().speech_sink(colloquy::speech::PacedSink::new(ms(10)));
    let h = Harness::start_with(
        builder,
        agent().tool(waits),
        vec![text("Let me check.").with_call(ScriptedCall::new("w1", "waits", "{}")), text("ok")],
    )
    .await;
    h.turn("go").await;
    // Dispatched when the response completed (10 ms); "Let me check." plays 13 × 10 ms.
    assert!(h.ctx("A").await.contains(&r#"out(#w1,"waited 130 ms",ok,rr=T)"#.to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_reaches_its_session() {
    let announce =
        FunctionTool::new("announce", "Announces.", |ctx: RunContext, _a: NoArgs| async move {
            let session = ctx.session().ok_or_else(|| ToolError::internal("no session"))?;
            session.say("Bear with me.").await.map_err(ToolError::internal)?;
            Ok::<_, ToolError>("announced")
        });
    let h =
        Harness::start(agent().tool(announce), vec![call("a1", "announce", "{}"), text("Done.")])
            .await;
    h.turn("go").await;
    let ctx = h.ctx("A").await;
    assert!(ctx.contains(&"asst(Bear with me.)".to_string()), "{ctx:?}");
    assert!(ctx.contains(&r#"out(#a1,"announced",ok,rr=T)"#.to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c55_one_reply_for_pairs_landing_while_the_session_is_held_busy() {
    let progress = |name: &'static str| {
        FunctionTool::new(name, "P.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("working").await?;
            Ok::<_, ToolError>("done")
        })
    };
    let mut h = Harness::start(
        agent().tool(progress("progress_a")).tool(progress("progress_b")),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("a", "progress_a", "{}"),
                ScriptedCall::new("b", "progress_b", "{}"),
            ]),
            text("tool reply").with_latency(ms(200)),
        ],
    )
    .await;
    // Both finish while their turn's tool reply is generated, then the user talks: the
    // session stays busy, so the two pairs wait and go out together.
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(15)).await;
    h.session.set_user_speaking(true).unwrap();
    tokio::time::sleep(ms(500)).await;
    h.session.set_user_speaking(false).unwrap();
    h.session.wait_for_idle().await.unwrap();
    let replies: Vec<_> =
        notation(h.events()).into_iter().filter(|e| e.starts_with("R(scheduled")).collect();
    assert_eq!(replies, [r#"R(scheduled,["a_final", "b_final"])"#]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c65_a_filler_speaks_while_a_blocking_tool_runs() {
    let lookup_order =
        FunctionTool::new("lookup_order", "Look up.", |ctx: RunContext, _a: NoArgs| async move {
            let _filler = ctx.with_filler(Filler::text("Just a moment.").delay(ms(500)));
            tokio::time::sleep(Duration::from_secs(8)).await;
            Ok::<_, ToolError>("order 42 shipped")
        });
    let builder = Session::builder().user_away_timeout(Some(Duration::from_secs(3)));
    let mut h = Harness::start_with(
        builder,
        agent().tool(lookup_order),
        vec![
            text("Let me check.").with_call(ScriptedCall::new("o1", "lookup_order", "{}")),
            text("Order 42 is on the way."),
        ],
    )
    .await;
    h.turn("where is my order?").await;
    let states = h.agent_states();
    let after_speaking: Vec<&str> =
        states.windows(2).filter(|w| w[0] == "speaking").map(|w| w[1].as_str()).collect();
    assert_eq!(after_speaking, ["thinking", "thinking", "listening"], "preamble, filler, reply");
    assert_eq!(
        h.ctx("A").await,
        [
            "user(where is my order?)",
            "asst(Let me check.)",
            "call(lookup_order#o1 {})",
            "asst(Just a moment.)",
            r#"out(#o1,"order 42 shipped",ok,rr=T)"#,
            "asst(Order 42 is on the way.)",
        ]
    );
    assert!(
        !h.events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::UserState { state: UserState::Away })),
        "the user is never away while the tool runs"
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c68_foreground_holds_the_floor_and_keeps_the_run_open() {
    let forward =
        FunctionTool::new("forward", "Forwards.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("").await?;
            let held = ctx.foreground().await.map_err(ToolError::internal)?;
            held.session().generate_reply("tell a joke").await.map_err(ToolError::internal)?;
            tokio::time::sleep(ms(300)).await; // interactive work while holding the floor
            drop(held);
            Ok::<_, ToolError>(())
        });
    let h = Harness::start(
        agent().tool(forward),
        vec![call("call_1", "forward", "{}"), text(""), text("here is a joke")],
    )
    .await;
    let start = tokio::time::Instant::now();
    let result = h.session.run("go").await.unwrap();
    assert!(start.elapsed() >= ms(300), "the run stayed open until the scope ended");
    let mut expect = result.expect();
    expect.next_event().is_function_call("forward");
    expect.next_event().is_function_call_output();
    expect.next_event().is_message(Role::Assistant).with_text("here is a joke");
    expect.no_more_events();
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn deferred_replies_wait_while_a_tool_holds_the_floor() {
    let holder = FunctionTool::new("holder", "Holds.", |ctx: RunContext, _a: NoArgs| async move {
        // A blocking call may hold the floor too: its own speech waits for it, not the other
        // way round.
        let held = ctx.foreground().await.map_err(ToolError::internal)?;
        tokio::time::sleep(ms(400)).await;
        drop(held);
        Ok::<_, ToolError>("held")
    });
    let mut h = Harness::start(
        agent().tool(holder).tool(job_with_update()),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("h1", "holder", "{}"),
                ScriptedCall::new("j1", "job", "{}"),
            ]),
            text("tool reply"),
            text("deferred"),
        ],
    )
    .await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = h.events().to_vec();
    let ended =
        at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { id, .. } if id == "j1_final"));
    let scheduled = at_ms(&events, |k| {
        matches!(
            k,
            EventKind::ToolReplyUpdated { status: colloquy::events::ReplyStatus::Scheduled, .. }
        )
    });
    assert_eq!(ended, 110);
    assert!(scheduled >= 410, "the reply waited for the hold to end (scheduled at {scheduled})");
    h.close().await;
}
