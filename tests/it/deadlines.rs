//! Tool deadlines and heartbeats (docs/decisions.md#edges-tool-deadlines): the
//! Toolset ends a call `timed_out` on the session clock, updates or not, cancellable or not, and
//! the model reads why; closing and handoff drains are bounded by default.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::common::*;
use colloquy::prelude::*;
use colloquy::session::{Lifecycle, LifecycleEvent};
use tokio::time::Instant;

/// A blocking tool (no update) that takes 5 s.
fn slow() -> FunctionTool {
    sleeper("slow", 5_000, "done at last")
}

/// A background tool that posts an update every 100 ms, for ever.
fn chatty(updates: Arc<AtomicU32>) -> FunctionTool {
    FunctionTool::new("chatty", "Never stops.", move |ctx: RunContext, _a: NoArgs| {
        let updates = Arc::clone(&updates);
        async move {
            loop {
                let n = updates.fetch_add(1, Ordering::SeqCst);
                ctx.update(format!("step {n}")).await?;
                tokio::time::sleep(ms(100)).await;
            }
            #[allow(unreachable_code)]
            Ok::<_, ToolError>("never")
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_blocking_call_past_its_deadline_ends_timed_out_and_the_model_reads_why() {
    let tool = slow().deadline(ms(1_000));
    // Calls start 10 ms in: the scripted LLM's latency.
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "slow", "{}"), text("It took too long.")],
    )
    .await;
    h.turn("go").await;
    let why = "Tool `slow` timed out after 1 s";
    assert_eq!(ended_at(h.events()), vec![(1_010, format!("c1 timed_out {why}"))]);
    assert_eq!(
        h.hist().await,
        vec![
            "user(go)".to_string(),
            "call(slow#c1 {})".into(),
            format!("out(#c1,{why:?},ERR,rr=T)"),
            "asst(It took too long.)".into(),
        ]
    );
    // The model's tool-reply request carries the error output.
    let requests = h.requests();
    assert_eq!(requests.len(), 2);
    assert!(show(&requests[1].items).contains(&format!("out(#c1,{why:?},ERR,rr=T)")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn updates_never_move_a_deadline_and_the_final_error_reaches_the_model() {
    let updates = Arc::new(AtomicU32::new(0));
    let tool = chatty(Arc::clone(&updates)).deadline(ms(2_000));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(tool),
        vec![call("c1", "chatty", "{}"), text("Working on it.")],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    h.session.wait_for_idle().await.unwrap();
    let why = "Tool `chatty` timed out after 2 s";
    assert_eq!(ended_at(h.events()), vec![(2_010, format!("c1_final timed_out {why}"))]);
    // The body was stopped: no update after the deadline (20 in 2 s, one more at most racing it).
    let posted = updates.load(Ordering::SeqCst);
    assert!((20..=21).contains(&posted), "{posted} updates");
    let hist = h.hist().await;
    assert!(hist.contains(&format!("out(#c1_final,{why:?},ERR,rr=T)")), "{hist:#?}");
    // The last deferred reply carried the final error to the model.
    let last = h.requests().pop().expect("requests");
    assert!(show(&last.items).contains(&format!("out(#c1_final,{why:?},ERR,rr=T)")));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_ends_a_call_that_goes_quiet_but_not_one_that_keeps_reporting() {
    let quiet =
        FunctionTool::new("quiet", "Reports once.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("started").await?;
            tokio::time::sleep(ms(60_000)).await;
            Ok::<_, ToolError>("late")
        })
        .heartbeat(ms(500));
    let steady =
        FunctionTool::new("steady", "Reports often.", |ctx: RunContext, _a: NoArgs| async move {
            for i in 0..10 {
                ctx.update(format!("step {i}")).await?;
                tokio::time::sleep(ms(300)).await;
            }
            Ok::<_, ToolError>("steady done")
        })
        .heartbeat(ms(500));
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(quiet).tool(steady),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("q", "quiet", "{}"),
                ScriptedCall::new("s", "steady", "{}"),
            ]),
            text("Both started."),
        ],
    )
    .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(10_000)).await;
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        ended_at(h.events()),
        vec![
            (510, "q_final timed_out Tool `quiet` timed out: no update for 0.5 s".into()),
            (3_010, "s_final done steady done".into()),
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_that_is_not_cancellable_gets_the_signal_then_the_grace_then_abort() {
    let signalled = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&signalled);
    // Not cancellable, and it ignores the signal once it has seen it.
    let stubborn =
        FunctionTool::new("stubborn", "Holds on.", move |ctx: RunContext, _a: NoArgs| {
            let seen = Arc::clone(&seen);
            async move {
                ctx.cancelled().await;
                seen.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await;
                Ok::<_, ToolError>("never")
            }
        })
        .deadline(ms(1_000));
    let mut builder = Session::builder().cancel_grace(ms(300));
    let mut lifecycle = builder.lifecycle_events();
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(stubborn),
        vec![call("c1", "stubborn", "{}"), text("Gave up.")],
    )
    .await;
    let start = Instant::now();
    h.turn("go").await;
    assert!(signalled.load(Ordering::SeqCst), "the body got the cooperative signal");
    let why = "c1 timed_out Tool `stubborn` timed out after 1 s";
    assert_eq!(ended_at(h.events()), vec![(1_010, why.to_string())]);
    let stopped = |lifecycle: &mut tokio::sync::mpsc::Receiver<LifecycleEvent>| {
        let mut reason = None;
        while let Ok(record) = lifecycle.try_recv() {
            if record.id == "tool_call:c1" && matches!(record.what, Lifecycle::Stopped) {
                reason = record.reason;
            }
        }
        reason
    };
    tokio::time::sleep_until(start + ms(1_200)).await;
    assert_eq!(stopped(&mut lifecycle), None, "still in its grace period");
    tokio::time::sleep_until(start + ms(1_400)).await;
    assert_eq!(stopped(&mut lifecycle).as_deref(), Some("timed out"), "aborted after the grace");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn limits_fall_back_from_the_tool_to_its_toolset_to_the_session() {
    let toolset = Toolset::new_async("slow_ones")
        .tool(sleeper("own", 5_000, "x").deadline(ms(300)))
        .tool(sleeper("inherits", 5_000, "y"))
        .deadline(ms(600));
    let builder = Session::builder().tool_deadline(Some(ms(900)));
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").toolset(toolset).tool(sleeper("plain", 5_000, "z")),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("a", "own", "{}"),
                ScriptedCall::new("b", "inherits", "{}"),
                ScriptedCall::new("c", "plain", "{}"),
            ]),
            text("All timed out."),
        ],
    )
    .await;
    h.turn("go").await;
    let at: Vec<(u64, String)> = ended_at(h.events())
        .into_iter()
        .map(|(at, s)| (at, s.split(' ').take(2).collect::<Vec<_>>().join(" ")))
        .collect();
    assert_eq!(
        at,
        vec![
            (310, "a timed_out".to_string()),
            (610, "b timed_out".into()),
            (910, "c timed_out".into()),
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_that_ends_in_time_is_untouched_by_its_deadline() {
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(sleeper("quick", 100, "fine").deadline(ms(1_000))),
        vec![call("c1", "quick", "{}"), text("Fine.")],
    )
    .await;
    h.turn("go").await;
    tokio::time::sleep(ms(5_000)).await;
    assert_eq!(ended_at(h.events()), vec![(110, "c1 done fine".into())]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn closing_is_bounded_by_default_even_for_a_call_that_never_ends() {
    let forever =
        FunctionTool::new("forever", "Waits.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.cancelled().await;
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("never")
        });
    let h =
        Harness::start(Agent::new("A", "inst").tool(forever), vec![call("c1", "forever", "{}")])
            .await;
    h.session.user_turn("go").await.unwrap();
    tokio::time::sleep(ms(50)).await;
    let start = Instant::now();
    let events = h.close().await;
    assert_eq!(start.elapsed(), ms(30_000), "the default drain timeout");
    // The close interrupts the speech, which stops waiting for the call after
    // `interrupt_timeout` (decision 71): the call ends in the background.
    assert_eq!(ended_at(&events), vec![(30_050, "c1_final error drain timeout".into())]);
}

#[tokio::test(start_paused = true)]
async fn a_limit_past_the_clock_s_range_never_fires() {
    let tool = sleeper("long", 5_000, "done").deadline(std::time::Duration::MAX);
    let tool = tool.heartbeat(std::time::Duration::MAX);
    let mut h =
        Harness::start(Agent::new("A", "inst").tool(tool), vec![call("c1", "long", "{}")]).await;
    h.turn("go").await;
    assert_eq!(ended_at(h.events()), vec![(5_010, "c1 done done".into())]);
    h.close().await;
}
