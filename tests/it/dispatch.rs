//! Basic dispatch, outputs, errors and arguments: scenarios C-01 … C-28 of docs/scenarios.md, run
//! through the public API on the paused clock. Where colloquy's decisions change the
//! reference's result, the test says which decision.

use std::time::Duration;

use crate::common::*;
use colloquy::llm::{RequestKind, ToolChoice};
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Weather {
    location: String,
    #[serde(default = "one")]
    days: i64,
}

fn one() -> i64 {
    1
}

fn get_weather() -> FunctionTool {
    FunctionTool::new(
        "get_weather",
        "Current weather.",
        |_ctx: RunContext, a: Weather| async move {
            Ok::<_, ToolError>(format!("sunny in {}", a.location))
        },
    )
}

#[tokio::test(start_paused = true)]
async fn c01_sync_tool_returning_a_string() {
    let mut h = Harness::start(
        agent().tool(get_weather()),
        vec![call("c1", "get_weather", r#"{"location":"Tokyo"}"#), text("It's sunny.")],
    )
    .await;
    h.turn("weather?").await;

    let reqs = h.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        (reqs[0].kind, reqs[0].tools.clone(), choice(&reqs[0])),
        (RequestKind::UserTurn, vec!["get_weather".to_string()], "unset")
    );
    assert_eq!(show(&reqs[0].items), ["user(weather?)"]);
    assert_eq!((reqs[1].kind, choice(&reqs[1])), (RequestKind::ToolReply, "auto"));
    assert_eq!(
        show(&reqs[1].items),
        [
            "user(weather?)",
            r#"call(get_weather#c1 {"location": "Tokyo"})"#,
            r#"out(#c1,"sunny in Tokyo",ok,rr=T)"#,
        ]
    );
    let expected = [
        "user(weather?)",
        r#"call(get_weather#c1 {"location": "Tokyo"})"#,
        r#"out(#c1,"sunny in Tokyo",ok,rr=T)"#,
        "asst(It's sunny.)",
    ];
    assert_eq!(h.ctx("A").await, expected);
    assert_eq!(h.hist().await, expected);
    assert_eq!(h.tool_events(), [r"S(c1)", r#"E(c1,done,"sunny in Tokyo")"#, r#"FTE["c1"]"#]);
    assert_eq!(h.agent_states(), ["listening", "thinking", "speaking", "listening"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c02_map_return_renders_as_compact_json() {
    // Decision 1: JSON, not Python notation.
    let book = FunctionTool::new("book", "Book.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(json!({"confirmation": "FL-1"}))
    });
    let mut h = Harness::start(agent().tool(book), vec![call("c1", "book", "{}")]).await;
    h.turn("book").await;
    assert!(
        h.ctx("A").await.contains(&r#"out(#c1,"{\"confirmation\":\"FL-1\"}",ok,rr=T)"#.to_string())
    );
    assert_eq!(h.tool_events()[1], r#"E(c1,done,"{\"confirmation\":\"FL-1\"}")"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c04_falsy_return_renders_and_asks_for_a_reply() {
    // Decision 2: 0 renders as "0" (the reference gives an empty text) and asks for a reply.
    let count = FunctionTool::new("count", "Count.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(0i64)
    });
    let mut h = Harness::start(agent().tool(count), vec![call("c1", "count", "")]).await;
    h.turn("count").await;
    let reqs = h.requests();
    assert_eq!(reqs.len(), 2, "the zero output still asks for a reply");
    assert_eq!(choice(&reqs[1]), "auto");
    assert_eq!(show(&reqs[1].items).last().unwrap(), r#"out(#c1,"0",ok,rr=T)"#);
    assert_eq!(h.tool_events()[1], r#"E(c1,done,"0")"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c05_blocking_tool_keeps_the_agent_thinking() {
    let lookup = sleeper("lookup", 300, "order 42");
    let mut h = Harness::start(
        agent().tool(lookup),
        vec![
            text("Let me check.").with_call(ScriptedCall::new("c1", "lookup", "{}")),
            text("It shipped."),
        ],
    )
    .await;
    h.turn("order?").await;
    let events = h.events().to_vec();
    assert_eq!(at_ms(&events, |k| matches!(k, EventKind::ToolCallStarted { .. })), 10);
    assert_eq!(at_ms(&events, |k| matches!(k, EventKind::ToolCallEnded { .. })), 310);
    assert_eq!(h.tool_events(), ["S(c1)", r#"E(c1,done,"order 42")"#, r#"FTE["c1"]"#]);
    assert_eq!(
        h.agent_states(),
        ["listening", "thinking", "speaking", "thinking", "speaking", "listening"]
    );
    assert_eq!(
        h.ctx("A").await,
        [
            "user(order?)",
            "asst(Let me check.)",
            "call(lookup#c1 {})",
            r#"out(#c1,"order 42",ok,rr=T)"#,
            "asst(It shipped.)"
        ]
    );
    // The tool-reply request was sent only once the tool had ended, 10 ms before its answer.
    assert_eq!(at_ms(&events, |k| matches!(k, EventKind::SpeechDone { .. })), 320);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c13_tool_error_before_any_update() {
    let charge =
        FunctionTool::new("charge", "Charge.", |_ctx: RunContext, _a: NoArgs| async move {
            Err::<String, _>(ToolError::new("card declined"))
        });
    let mut h = Harness::start(agent().tool(charge), vec![call("e1", "charge", "{}")]).await;
    h.turn("pay").await;
    assert_eq!(
        show(&h.requests()[1].items).last().unwrap(),
        r#"out(#e1,"card declined",ERR,rr=T)"#
    );
    assert_eq!(choice(&h.requests()[1]), "auto");
    assert_eq!(h.tool_events()[1], r#"E(e1,error,"card declined")"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c14_internal_error_hides_its_text_from_the_model() {
    let weather =
        FunctionTool::new("get_weather", "W.", |_ctx: RunContext, _a: Weather| async move {
            Err::<String, _>(ToolError::internal("kaboom: secret"))
        });
    let mut h = Harness::start(
        agent().tool(weather),
        vec![call("1", "get_weather", r#"{"location":"Tokyo"}"#)],
    )
    .await;
    h.turn("weather").await;
    let ctx = h.ctx("A").await;
    assert!(
        ctx.contains(&r#"out(#1,"An internal error occurred.",ERR,rr=T)"#.to_string()),
        "{ctx:?}"
    );
    assert!(!ctx.iter().any(|i| i.contains("secret")));
    assert_eq!(h.tool_events()[1], r#"E(1,error,"kaboom: secret")"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_tool_becomes_an_error_output_and_the_session_lives_on() {
    let boom = FunctionTool::new("boom", "Explodes.", |_ctx: RunContext, _a: NoArgs| async move {
        if true {
            panic!("index out of range");
        }
        Ok::<_, ToolError>("never")
    });
    let mut h = Harness::start(
        agent().tool(boom),
        vec![call("p1", "boom", "{}"), text("Sorry."), text("Still here.")],
    )
    .await;
    h.turn("explode").await;
    h.turn("are you there?").await;
    assert_eq!(
        h.ctx("A").await,
        [
            "user(explode)",
            "call(boom#p1 {})",
            r#"out(#p1,"An internal error occurred.",ERR,rr=T)"#,
            "asst(Sorry.)",
            "user(are you there?)",
            "asst(Still here.)",
        ]
    );
    assert_eq!(h.tool_events()[1], r#"E(p1,error,"panic: index out of range")"#);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c22_unknown_tool_name() {
    let mut h = Harness::start(agent().tool(get_weather()), vec![call("u1", "nope", "{}")]).await;
    h.turn("x").await;
    assert_eq!(
        h.ctx("A").await[1..3],
        [
            "call(nope#u1 {})",
            r#"out(#u1,"Unknown function: nope - available tools: get_weather",ERR,rr=T)"#
        ]
    );
    assert_eq!(choice(&h.requests()[1]), "auto");
    assert_eq!(h.tool_events(), [r#"FTE["u1"]"#], "no started/ended events");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c23_unparseable_json_arguments() {
    let mut h = Harness::start(
        agent().tool(get_weather()),
        vec![call("b1", "get_weather", "not json at all")],
    )
    .await;
    h.turn("x").await;
    let items = h.session.chat_context("A").await.unwrap().unwrap();
    let call = items[1].as_function_call().unwrap();
    assert_eq!(call.arguments, "not json at all", "the call keeps the text as sent");
    let out = items[2].as_function_call_output().unwrap();
    assert!(out.is_error);
    assert!(
        out.output.starts_with(
            "Error parsing arguments for `get_weather`: could not parse function arguments as JSON:"
        ),
        "{}",
        out.output
    );
    assert_eq!(h.tool_events(), [r#"FTE["b1"]"#], "no started/ended events");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c25_missing_required_argument_is_a_tool_error_with_events() {
    let mut h =
        Harness::start(agent().tool(get_weather()), vec![call("1", "get_weather", "{}")]).await;
    h.turn("x").await;
    let text = "Error parsing arguments for `get_weather`: location: missing";
    assert!(h.ctx("A").await.contains(&format!("out(#1,{text:?},ERR,rr=T)")));
    assert_eq!(
        h.tool_events(),
        ["S(1)".to_string(), format!("E(1,error,{text:?})"), r#"FTE["1"]"#.into()]
    );
    assert_eq!(h.hist().await[1], "call(get_weather#1 {})");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c26_wrong_argument_type() {
    let mut h = Harness::start(
        agent().tool(get_weather()),
        vec![call("w1", "get_weather", r#"{"location":"x","days":"abc"}"#)],
    )
    .await;
    h.turn("x").await;
    let text = "Error parsing arguments for `get_weather`: days: expected integer";
    assert!(h.ctx("A").await.contains(&format!("out(#w1,{text:?},ERR,rr=T)")));
    assert_eq!(h.tool_events()[1], format!("E(w1,error,{text:?})"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn lax_arguments_are_canonicalised_and_coerced() {
    let seen = FunctionTool::new("get_weather", "W.", |_ctx: RunContext, a: Weather| async move {
        Ok::<_, ToolError>(format!("{} x{}", a.location, a.days))
    });
    let h = Harness::start(
        agent().tool(seen),
        vec![call("c1", "get_weather", r#"{"days":"3","location":"Oslo","x":1}"#)],
    )
    .await;
    h.turn("x").await;
    let ctx = h.ctx("A").await;
    assert_eq!(ctx[1], r#"call(get_weather#c1 {"days": "3", "location": "Oslo", "x": 1})"#);
    assert_eq!(ctx[2], r#"out(#c1,"Oslo x3",ok,rr=T)"#);
    h.close().await;
}

fn job() -> FunctionTool {
    FunctionTool::new("job", "Job.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>("job done")
    })
}

#[tokio::test(start_paused = true)]
async fn step_limit_sends_tool_choice_none_and_drops_calls() {
    // C-28 adapted: calls emitted under tool_choice = none are dropped, each with an event
    // (decision 10). Here `none` comes from the step limit (max_tool_steps = 3): requests 1-4
    // may call tools, the 5th is sent with `none`.
    let script: Vec<_> =
        (1..=5).map(|i| call(&format!("c{i}"), "job", "{}").with_latency(Duration::ZERO)).collect();
    let mut h = Harness::start(agent().tool(job()), script).await;
    h.turn("go").await;
    let choices: Vec<_> = h.requests().iter().map(choice).collect();
    assert_eq!(choices, ["unset", "auto", "auto", "auto", "none"]);
    let events = h.tool_events();
    assert_eq!(events.last().unwrap(), "DROP(c5)");
    assert_eq!(events.iter().filter(|e| e.starts_with("S(")).count(), 4);
    assert!(!h.ctx("A").await.iter().any(|i| i.contains("#c5")), "a dropped call leaves no item");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn max_tool_steps_is_configurable() {
    let script: Vec<_> = (1..=3).map(|i| call(&format!("c{i}"), "job", "{}")).collect();
    let h = Harness::start_with(Session::builder().max_tool_steps(1), agent().tool(job()), script)
        .await;
    h.turn("go").await;
    let choices: Vec<_> = h.requests().iter().map(|r| r.tool_choice.clone()).collect();
    assert_eq!(choices, [None, Some(ToolChoice::Auto), Some(ToolChoice::None)]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn empty_outputs_ask_for_no_reply() {
    let quiet = FunctionTool::new("quiet", "Nothing.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(())
    });
    let stop = FunctionTool::new("stop", "Stop.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(StopResponse)
    });
    let kept = FunctionTool::new("kept", "Kept.", |_ctx: RunContext, _a: NoArgs| async move {
        Ok::<_, ToolError>(ToolResult { output: "noted".into(), reply_required: false })
    });
    let mut h = Harness::start(
        agent().tool(quiet).tool(stop).tool(kept),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("q", "quiet", "{}"),
            ScriptedCall::new("s", "stop", "{}"),
            ScriptedCall::new("k", "kept", "{}"),
        ])],
    )
    .await;
    h.turn("go").await;
    assert_eq!(h.requests().len(), 1, "no output asked for a reply");
    assert_eq!(
        h.ctx("A").await[4..],
        [r#"out(#q,"",ok,rr=F)"#, r#"out(#s,"",ok,rr=F)"#, r#"out(#k,"noted",ok,rr=F)"#]
    );
    assert!(h.tool_events().contains(&"E(q,done,null)".to_string()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn calls_of_one_response_run_in_parallel() {
    let slow = |name: &'static str, ms: u64| {
        FunctionTool::new(name, "Slow.", move |_ctx: RunContext, _a: NoArgs| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>(format!("{name} done"))
        })
    };
    let mut h = Harness::start(
        agent().tool(slow("slow_a", 200)).tool(slow("slow_b", 100)),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("a", "slow_a", "{}"),
            ScriptedCall::new("b", "slow_b", "{}"),
        ])],
    )
    .await;
    h.turn("go").await;
    let events = h.events().to_vec();
    // Both started at 10 ms; the whole step took 200 ms, not 300.
    assert_eq!(at_ms(&events, |k| matches!(k, EventKind::FunctionToolsExecuted { .. })), 210);
    // Outputs are listed in completion order; items are ordered by their timestamps.
    assert_eq!(h.tool_events().last().unwrap(), r#"FTE["b", "a"]"#);
    assert_eq!(
        h.ctx("A").await[1..5],
        [
            "call(slow_a#a {})",
            "call(slow_b#b {})",
            r#"out(#b,"slow_b done",ok,rr=T)"#,
            r#"out(#a,"slow_a done",ok,rr=T)"#
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn duplicate_tool_names_are_a_configuration_error() {
    let result = Session::builder()
        .llm(ScriptedLlm::new([]))
        .tool(get_weather())
        .start(agent().tool(get_weather()))
        .await;
    match result {
        Err(SessionError::Config(text)) => assert_eq!(text, "duplicate function name: get_weather"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("two tools named get_weather must not start"),
    }
    // The same tool listed twice is kept once.
    let tool = get_weather();
    let h = Harness::start_with(Session::builder().tool(tool.clone()), agent().tool(tool), vec![])
        .await;
    h.turn("hi").await;
    assert_eq!(h.requests()[0].tools, ["get_weather"]);
    h.close().await;
}
