//! Agent handoff (C-18, C-19, C-21, C-50, C-57, C-58, C-78, C-92, decisions 4, 12, 16, 22).

use std::time::Duration;

use crate::common::*;
use colloquy::llm::{RequestKind, ToolChoice};
use colloquy::prelude::*;

fn billing() -> Agent {
    Agent::new("B", "You handle billing.")
}

fn transfer(result: Option<&'static str>) -> FunctionTool {
    FunctionTool::new(
        "transfer",
        "Transfer to billing.",
        move |_ctx: RunContext, _a: NoArgs| async move {
            let handoff = Handoff::to(billing());
            Ok::<_, ToolError>(match result {
                Some(text) => handoff.with_result(text),
                None => handoff,
            })
        },
    )
}

fn handoffs(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentHandoff { old_agent, new_agent } => {
                Some(format!("{}->{new_agent}", old_agent.as_deref().unwrap_or("-")))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn c18_a_bare_handoff_answers_with_nothing_and_switches_agent() {
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(transfer(None)),
        vec![call("t", "transfer", "{}")],
    )
    .await;
    let result = h.session.run("transfer").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_function_call("transfer");
    expect.next_event().is_function_call_output().with_output("");
    expect.next_event().is_agent_handoff("B");
    expect.no_more_events();
    assert_eq!(h.llm.request_count(), 1, "no tool reply");
    assert!(h.hist().await.contains(&r#"handoff(Some("A")->B)"#.to_string()));
    assert_eq!(handoffs(h.events()), ["-->A", "A->B"]);
    assert_eq!(h.ctx("A").await.last().unwrap(), r#"out(#t,"",ok,rr=F)"#);
    // The next turn goes to B, with B's instructions and a fresh context.
    h.turn("hello billing").await;
    let last = h.requests().pop().unwrap();
    assert_eq!(last.agent, "B");
    assert_eq!(h.ctx("B").await, ["user(hello billing)", "asst(reply 1)"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c92_a_handoff_with_a_result_is_answered_by_the_old_agent_first() {
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(transfer(Some("transferring to billing"))),
        vec![call("t", "transfer", "{}"), text("reply 1")],
    )
    .await;
    let result = h.session.run("go").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_function_call("transfer");
    expect.next_event().is_function_call_output().with_output("transferring to billing");
    expect.next_event().is_message(Role::Assistant).with_text("reply 1");
    expect.next_event().is_agent_handoff("B");
    let reqs = h.requests();
    assert_eq!(
        (reqs[1].agent.as_str(), reqs[1].tool_choice.clone()),
        ("A", Some(ToolChoice::None))
    );
    assert_eq!(reqs[1].tools, ["transfer"]);
    assert_eq!(h.ctx("A").await.last().unwrap(), "asst(reply 1)");
    assert_eq!(handoffs(h.events()).last().unwrap(), "A->B");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_handoff_chosen_in_one_step_happens_when_the_next_request_fails() {
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(transfer(Some("transferring to billing"))),
        vec![call("t", "transfer", "{}"), ScriptedResponse::error("the model is down")],
    )
    .await;
    h.turn("go").await;
    assert_eq!(error_messages(h.events()).len(), 1, "the failed request is reported");
    assert_eq!(handoffs(h.events()), ["-->A", "A->B"]);
    // The next turn goes to B.
    h.turn("hello billing").await;
    assert_eq!(h.requests().pop().unwrap().agent, "B");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c19_an_agent_returned_after_an_update_is_an_error() {
    let late = FunctionTool::new("late_agent", "Late.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("working").await?;
        tokio::time::sleep(ms(300)).await;
        Ok::<_, ToolError>(Handoff::to(billing()))
    });
    let mut h =
        Harness::start(Agent::new("A", "inst").tool(late), vec![call("a5", "late_agent", "{}")])
            .await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    assert!(
        tool_events(h.events()).contains(
            &r#"E(a5_final,error,"agent handoff after a progress update is not supported")"#
                .to_string()
        )
    );
    assert_eq!(handoffs(h.events()), ["-->A"], "no handoff");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c21_the_first_handoff_in_call_order_wins_even_when_a_sibling_finishes_later() {
    let other = FunctionTool::new(
        "other_transfer",
        "To sales.",
        |_ctx: RunContext, _a: NoArgs| async move {
            Ok::<_, ToolError>(Handoff::to(Agent::new("C", "sales")))
        },
    );
    let mut h = Harness::start(
        Agent::new("A", "inst")
            .tool(transfer(None))
            .tool(sleeper("slow", 100, "slow done"))
            .tool(other),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("t", "transfer", "{}"),
                ScriptedCall::new("s", "slow", "{}"),
                ScriptedCall::new("o", "other_transfer", "{}"),
            ]),
            text("reply 1"),
        ],
    )
    .await;
    h.turn("go").await;
    assert_eq!(
        handoffs(h.events()).last().unwrap(),
        "A->B",
        "a sibling finishing later never drops it"
    );
    let ctx = h.ctx("A").await;
    assert!(
        ctx.contains(
            &r#"out(#o,"a handoff to another agent was already chosen in this step",ERR,rr=T)"#
                .to_string()
        ),
        "{ctx:?}"
    );
    // The step wanted a reply (the slow output): spoken by A with `none` before the switch.
    assert_eq!(h.requests()[1].tool_choice, Some(ToolChoice::None));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c57_handoff_drains_agent_scoped_calls_and_the_new_agent_delivers_their_results() {
    let bg_job = FunctionTool::new("bg_job", "Job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("job started").await?;
        tokio::time::sleep(ms(300)).await;
        Ok::<_, ToolError>("job done")
    });
    let bg_cancel =
        FunctionTool::new("bg_cancel", "Cancellable.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("started").await?;
            tokio::time::sleep(ms(5000)).await;
            Ok::<_, ToolError>("never")
        })
        .cancellable();
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(bg_job).tool(bg_cancel).tool(transfer(None)),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("j", "bg_job", "{}"),
                ScriptedCall::new("k", "bg_cancel", "{}"),
            ]),
            text("working"),
            call("t", "transfer", "{}"),
            text("B takes the news"),
        ],
    )
    .await;
    h.turn("start both").await;
    tokio::time::sleep(ms(30)).await;
    h.turn("transfer me").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events = h.events().to_vec();
    let notation = tool_events(&events);
    assert!(notation.contains(&"E(k_final,cancelled,null)".to_string()));
    assert!(notation.contains(&r#"E(j_final,done,"job done")"#.to_string()));
    // The handoff waited for the non-cancellable job.
    let handoff_at = at_ms(
        &events,
        |k| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    let job_at =
        at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { id, .. } if id == "j_final"));
    assert!(handoff_at >= job_at, "handoff at {handoff_at}, job ended at {job_at}");
    // Decision 4: no finished result is lost; B delivers it, the pair persisted in its context.
    assert!(h.ctx("A").await.contains(&r#"out(#j_final,"job done",ok,rr=T)"#.to_string()));
    let ctx_b = h.ctx("B").await;
    assert_eq!(
        ctx_b,
        [
            "call(bg_job#j_final {})",
            r#"out(#j_final,"job done",ok,rr=T)"#,
            "asst(B takes the news)",
        ]
    );
    let delivered: Vec<bool> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolReplyUpdated { handoff, .. } => Some(*handoff),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, [true, true]);
    let deferred = h.requests().into_iter().find(|r| r.kind == RequestKind::DeferredReply).unwrap();
    assert_eq!(deferred.agent, "B");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c58_a_session_scoped_toolset_survives_the_handoff_and_reports_to_the_new_agent() {
    let lookup =
        FunctionTool::new("long_lookup", "Look up.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("lookup started").await?;
            tokio::time::sleep(ms(500)).await;
            Ok::<_, ToolError>("lookup done")
        });
    let builder = Session::builder().toolset(Toolset::new_async("shared").tool(lookup));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(transfer(None)),
        vec![
            call("l", "long_lookup", "{}"),
            text("looking"),
            call("t", "transfer", "{}"),
            text("B reports"),
        ],
    )
    .await;
    h.turn("look it up").await;
    tokio::time::sleep(ms(30)).await;
    h.turn("transfer").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let deferred = h.requests().into_iter().find(|r| r.kind == RequestKind::DeferredReply).unwrap();
    assert_eq!(deferred.agent, "B");
    assert_eq!(deferred.tools, ["long_lookup"], "session tools first, then B's (none)");
    assert_eq!(
        h.ctx("B").await,
        [
            "call(long_lookup#l_final {})",
            r#"out(#l_final,"lookup done",ok,rr=T)"#,
            "asst(B reports)"
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c78_on_enter_greets_without_ignore_on_enter_tools_and_turns_wait_for_the_new_agent() {
    let hang_up = sleeper("end_call", 1, "bye").ignore_on_enter();
    let keep = sleeper("keep", 1, "kept");
    let greeter =
        Agent::new("G", "Greet.").tool(keep).tool(hang_up).on_enter_reply("Greet the user.");
    let h = Harness::start(
        Agent::new("A", "inst").tool(FunctionTool::new(
            "to_greeter",
            "Go.",
            move |_c: RunContext, _a: NoArgs| {
                let greeter = greeter.clone();
                async move { Ok::<_, ToolError>(Handoff::to(greeter)) }
            },
        )),
        vec![
            call("t", "to_greeter", "{}"),
            call("k", "keep", "{}"),
            text("Hello, welcome!"),
            text("sure"),
        ],
    )
    .await;
    h.turn("switch").await;
    let reqs = h.requests();
    assert_eq!((reqs[1].kind, reqs[1].agent.as_str()), (RequestKind::OnEnter, "G"));
    assert_eq!(reqs[1].tools, ["keep"], "the greeting hides ignore_on_enter tools");
    assert_eq!(reqs[2].tools, ["keep"], "its nested tool reply too");
    h.turn("and now?").await;
    let reqs = h.requests();
    assert_eq!(reqs[3].tools, ["keep", "end_call"], "a normal turn sees them all");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn update_agent_switches_from_the_host() {
    let mut h =
        Harness::start(Agent::new("A", "inst"), vec![text("hi from A"), text("hi from B")]).await;
    h.turn("one").await;
    h.session.update_agent(billing()).await.unwrap();
    h.turn("two").await;
    assert_eq!(handoffs(h.events()), ["-->A", "A->B"]);
    assert_eq!(h.ctx("B").await, ["user(two)", "asst(hi from B)"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c50_a_handoff_interrupted_during_playout_does_not_happen() {
    let builder = Session::builder().speech_sink(colloquy::speech::PacedSink::new(ms(10)));
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(transfer(None)),
        vec![
            text("Transferring you to billing now.")
                .with_call(ScriptedCall::new("1", "transfer", "{}")),
        ],
    )
    .await;
    h.session.user_turn("billing please").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.interrupt().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let ctx = h.ctx("A").await;
    assert!(
        ctx.contains(
            &r#"out(#1,"the agent handoff was interrupted and did not happen",ERR,rr=F)"#
                .to_string()
        ),
        "{ctx:?}"
    );
    assert_eq!(handoffs(h.events()), ["-->A"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn turns_during_a_handoff_go_to_the_new_agent() {
    let job = FunctionTool::new("job", "Job.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("started").await?;
        tokio::time::sleep(ms(300)).await;
        Ok::<_, ToolError>(())
    });
    let mut h = Harness::start(
        Agent::new("A", "inst").tool(job).tool(transfer(None)),
        vec![call("j", "job", "{}"), text("working"), call("t", "transfer", "{}"), text("B here")],
    )
    .await;
    h.turn("start").await;
    h.session.user_turn("transfer").await.unwrap();
    tokio::time::sleep(ms(100)).await; // the handoff waits for the job (until 310 ms)
    h.session.user_turn("are you there?").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(handoffs(h.events()).last().unwrap(), "A->B");
    assert_eq!(h.ctx("B").await, ["user(are you there?)", "asst(B here)"]);
    assert!(!h.ctx("A").await.contains(&"user(are you there?)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_drain_timeout_aborts_calls_that_hold_up_a_handoff_or_a_close() {
    let stubborn = FunctionTool::new(
        "stubborn",
        "Never cancellable.",
        |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("started").await?;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("finally")
        },
    );
    let builder = Session::builder().drain_timeout(Some(ms(200)));
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(stubborn).tool(transfer(None)),
        vec![call("s", "stubborn", "{}"), text("working"), call("t", "transfer", "{}")],
    )
    .await;
    h.turn("start").await;
    h.turn("transfer").await; // the handoff waits at most 200 ms for the stubborn call
    let events = h.events().to_vec();
    assert!(tool_events(&events).contains(&r#"E(s_final,error,"drain timeout")"#.to_string()));
    let ended =
        at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { id, .. } if id == "s_final"));
    let handoff = at_ms(
        &events,
        |k| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    assert_eq!((ended, handoff), (230, 230)); // requested at 30 ms, plus the 200 ms timeout
    h.close().await;

    let builder = Session::builder().drain_timeout(Some(ms(300)));
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(FunctionTool::new(
            "stubborn",
            "S.",
            |ctx: RunContext, _a: NoArgs| async move {
                ctx.update("started").await?;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, ToolError>("finally")
            },
        )),
        vec![call("s", "stubborn", "{}")],
    )
    .await;
    h.turn("start").await;
    let before = tokio::time::Instant::now();
    let events = h.close().await;
    assert_eq!(before.elapsed(), ms(300));
    assert!(tool_events(&events).contains(&r#"E(s_final,error,"drain timeout")"#.to_string()));
}

#[tokio::test(start_paused = true)]
async fn an_async_toolset_both_agents_list_moves_with_its_calls_running() {
    let shared = || {
        Toolset::new_async("research").tool(FunctionTool::new(
            "research",
            "Researches.",
            |ctx: RunContext, _a: NoArgs| async move {
                ctx.update("researching").await?;
                tokio::time::sleep(ms(500)).await;
                Ok::<_, ToolError>("findings")
            },
        ))
    };
    let b = Agent::new("B", "billing").toolset(shared());
    let to_b = FunctionTool::new("to_b", "To B.", move |_c: RunContext, _a: NoArgs| {
        let b = b.clone();
        async move { Ok::<_, ToolError>(Handoff::to(b)) }
    });
    let mut builder = Session::builder();
    let mut lifecycle = builder.lifecycle_events();
    let mut h = Harness::start_with(
        builder,
        Agent::new("A", "inst").toolset(shared()).tool(to_b),
        vec![
            call("r", "research", "{}"),
            text("on it"),
            call("t", "to_b", "{}"),
            text("B: findings are in"),
        ],
    )
    .await;
    h.turn("research this").await;
    h.turn("transfer").await;
    let events = h.events().to_vec();
    // The handoff did not wait for the research: the toolset moved to B with the call.
    let handoff = at_ms(
        &events,
        |k| matches!(k, EventKind::AgentHandoff { new_agent, .. } if new_agent == "B"),
    );
    assert_eq!(handoff, 30);
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert!(tool_events(h.events()).contains(&r#"E(r_final,done,"findings")"#.to_string()));
    assert_eq!(
        h.ctx("B").await,
        [
            "call(research#r_final {})",
            r#"out(#r_final,"findings",ok,rr=T)"#,
            "asst(B: findings are in)"
        ]
    );
    h.close().await;
    let mut started = 0;
    while let Ok(record) = lifecycle.try_recv() {
        if record.id == "toolset:research" && record.what == colloquy::session::Lifecycle::Started {
            started += 1;
        }
    }
    assert_eq!(started, 1, "one toolset actor served both agents");
}

#[tokio::test(start_paused = true)]
async fn c63_close_stops_every_actor_gracefully_and_ends_every_call_once() {
    // The scenario file c63_close_with_tools_in_flight.json checks the trace; here: the actors.

    let bg = |name: &'static str, ms_: u64, cancellable: bool| {
        let tool =
            FunctionTool::new(name, "Background.", move |ctx: RunContext, _a: NoArgs| async move {
                ctx.update("started").await?;
                tokio::time::sleep(ms(ms_)).await;
                Ok::<_, ToolError>("done")
            });
        if cancellable { tool.cancellable() } else { tool }
    };
    let mut builder = Session::builder().toolset(
        Toolset::new_async("shared").tool(bg("sess_c", 5000, true)).tool(bg("sess_nc", 600, false)),
    );
    let mut lifecycle = builder.lifecycle_events();
    let h = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(bg("bg_nc", 500, false)).tool(bg("bg_c", 5000, true)),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("n", "bg_nc", "{}"),
            ScriptedCall::new("c", "bg_c", "{}"),
            ScriptedCall::new("sc", "sess_c", "{}"),
            ScriptedCall::new("snc", "sess_nc", "{}"),
        ])],
    )
    .await;
    h.turn("start").await;
    let events = h.close().await;
    let mut ended: Vec<String> =
        tool_events(&events).into_iter().filter(|e| e.starts_with("E(")).collect();
    ended.sort();
    assert_eq!(
        ended,
        [
            "E(c_final,cancelled,null)",
            r#"E(n_final,done,"done")"#,
            "E(sc_final,cancelled,null)",
            r#"E(snc_final,done,"done")"#,
        ]
    );
    let mut balance: std::collections::BTreeMap<String, i32> = Default::default();
    while let Ok(record) = lifecycle.try_recv() {
        assert_ne!(record.reason.as_deref(), Some("killed"), "{record:?}");
        *balance.entry(record.id).or_default() +=
            if record.what == colloquy::session::Lifecycle::Started { 1 } else { -1 };
    }
    assert!(
        balance.len() >= 9,
        "session, coalescer, activity, two toolsets, four calls: {balance:?}"
    );
    assert!(balance.values().all(|n| *n == 0), "every actor stopped, none killed: {balance:?}");
}

#[tokio::test(start_paused = true)]
async fn c68_a_handoff_inside_foreground_is_part_of_the_run() {
    let forwarded = Agent::new("Forwarded", "Tell jokes.").on_enter_reply("forwarded_greeting");
    let forward = FunctionTool::new("forward", "Forwards.", move |ctx: RunContext, _a: NoArgs| {
        let forwarded = forwarded.clone();
        async move {
            ctx.update("").await?;
            let held = ctx.foreground().await.map_err(ToolError::internal)?;
            held.session().update_agent(forwarded).await.map_err(ToolError::internal)?;
            tokio::time::sleep(ms(50)).await;
            drop(held);
            Ok::<_, ToolError>(())
        }
    });
    let h = Harness::start(
        Agent::new("Router", "Route.").tool(forward),
        vec![call("call_1", "forward", "{}"), text(""), text("here is a joke")],
    )
    .await;
    let result = h.session.run("go").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_function_call("forward");
    expect.next_event().is_function_call_output();
    expect.next_event().is_agent_handoff("Forwarded");
    expect.next_event().is_message(Role::Assistant).with_text("here is a joke");
    expect.no_more_events();
    let greeting = h.requests().into_iter().find(|r| r.kind == RequestKind::OnEnter).unwrap();
    assert_eq!(greeting.instructions.as_deref(), Some("forwarded_greeting"));
    h.close().await;
}
