//! The testing API: `SessionHandle::run` and its `RunResult` expectations (C-71, decision 9).

use std::time::Duration;

use crate::common::*;
use colloquy::prelude::*;
use serde_json::json;

fn agent() -> Agent {
    Agent::new("A", "inst").tool(sleeper("lookup", 100, "found it"))
}

#[tokio::test(start_paused = true)]
async fn a_run_records_its_speeches_items_in_timestamp_order() {
    let h = Harness::start(
        agent(),
        vec![
            text("Let me look.").with_call(ScriptedCall::new("c1", "lookup", r#"{"q":"x"}"#)),
            text("Found it."),
        ],
    )
    .await;
    let result = h.session.run("find it").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_message(Role::Assistant).with_text("Let me look.");
    expect.next_event().is_function_call("lookup").with_args(json!({}));
    expect.next_event().is_function_call_output().with_output("found it").with_error(false);
    expect.next_event().is_message(Role::Assistant).containing("Found");
    expect.no_more_events();
    result.contains_function_call("lookup", json!({"q": "x"}));
    result.contains_function_call_output("found it", false);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn unknown_and_unparseable_calls_are_recorded_with_their_outputs() {
    // Decision 9: the same in every path, a function_call item and an error output.
    let h = Harness::start(
        agent(),
        vec![ScriptedResponse::calls([
            ScriptedCall::new("u1", "nope", "{}"),
            ScriptedCall::new("b1", "lookup", "not json"),
        ])],
    )
    .await;
    let result = h.session.run("x").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_function_call("nope");
    expect.next_event().is_function_call("lookup");
    expect
        .next_event()
        .is_function_call_output()
        .with_output("Unknown function: nope - available tools: lookup")
        .with_error(true);
    let parse = expect.next_event().is_function_call_output().with_error(true);
    assert!(parse.event().output.starts_with("Error parsing arguments for `lookup`"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn speeches_created_during_a_run_belong_to_it() {
    let h =
        Harness::start(agent(), vec![text("first").with_latency(Duration::from_millis(50))]).await;
    let session = h.session.clone();
    let run = tokio::spawn(async move { session.run("hi").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.session.say("and one more thing").await.unwrap();
    let result = run.await.unwrap().unwrap();
    let texts: Vec<_> =
        result.events().iter().filter_map(|e| e.as_message()).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["first", "and one more thing"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c71_nested_runs_fail_and_close_fails_the_run() {
    let h = Harness::start(agent(), vec![text("slow").with_latency(Duration::from_secs(5))]).await;
    let session = h.session.clone();
    let first = tokio::spawn(async move { session.run("one").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let nested = h.session.run("two").await.unwrap_err();
    assert_eq!(nested.to_string(), "nested runs are not supported");
    h.close().await;
    let closed = first.await.unwrap().unwrap_err();
    assert_eq!(closed.to_string(), "session closed");
}

#[tokio::test(start_paused = true)]
async fn an_llm_failure_fails_the_run() {
    let h = Harness::start(agent(), vec![ScriptedResponse::error("model overloaded")]).await;
    let err = h.session.run("hi").await.unwrap_err();
    assert_eq!(err.to_string(), "run failed: model overloaded");
    // The session is still usable.
    let ok = h.session.run("again").await.unwrap();
    ok.expect().next_event().is_message(Role::Assistant).with_text("reply 1");
    h.close().await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "expected no more events")]
async fn no_more_events_fails_listing_the_remaining_event() {
    let h = Harness::start(agent(), vec![text("hello")]).await;
    let result = h.session.run("hi").await.unwrap();
    result.expect().no_more_events();
}

/// Refund part of an order.
///
/// * `order_id` - The order.
/// * `amount` - How much to refund.
#[function_tool]
async fn refund(order_id: String, amount: f64) -> Result<String, ToolError> {
    Ok(format!("refunded {amount} on {order_id}"))
}

/// Track a parcel, in the background.
///
/// * `parcel` - The tracking number.
#[function_tool]
async fn track(ctx: RunContext, parcel: String) -> Result<String, ToolError> {
    ctx.update(format!("Asking the carrier about {parcel}")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(format!("{parcel} arrives tomorrow"))
}

#[tokio::test(start_paused = true)]
async fn validated_arguments_are_what_the_tool_received() {
    // The model sends the amount as a string; the tool's `f64` receives the number.
    let h = Harness::start(
        Agent::new("A", "inst").tool(refund()),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("r1", "refund", r#"{"order_id":"A1","amount":"25.5","x":1}"#),
                ScriptedCall::new("r2", "refund", r#"{"order_id":"A2","amount":"lots"}"#),
                ScriptedCall::new("u1", "nope", "{}"),
            ]),
            text("Refunded."),
        ],
    )
    .await;
    let result = h.session.run("refund A1").await.unwrap();
    let mut expect = result.expect();
    // The unknown tool is answered at dispatch, so its items come first.
    assert_eq!(expect.next_event().is_function_call("nope").validated_args(), None);
    expect
        .next_event()
        .is_function_call("refund")
        .with_args(json!({"amount": "25.5", "x": 1}))
        .with_validated_args(json!({"order_id": "A1", "amount": 25.5}));
    let bad = expect.next_event().is_function_call("refund");
    assert_eq!(bad.validated_args(), None, "arguments that do not validate reach no tool");
    expect.next_event().is_function_call_output().matching(|t| t.starts_with("Unknown"));
    expect.next_event().is_function_call_output().with_output("refunded 25.5 on A1");
    expect.next_event().is_function_call_output().containing("amount").with_error(true);
    expect.next_event().is_message(Role::Assistant).matching(|t| t.ends_with('.'));
    expect.no_more_events();
    assert_eq!(result.validated_args("r1"), Some(&json!({"order_id": "A1", "amount": 25.5})));
    result.contains_validated_call("refund", json!({"amount": 25.5}));
    result.contains_function_call("refund", json!({"amount": "25.5"}));
    let raw = std::panic::catch_unwind(|| {
        result.contains_validated_call("refund", json!({"amount": "25.5"}));
    });
    assert!(raw.is_err(), "the tool received a number, not the model's string");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_background_calls_first_output_matches_by_substring() {
    let h = Harness::start(
        Agent::new("A", "inst").tool(track()),
        vec![call("t1", "track", r#"{"parcel":"P-9"}"#), text("Checking."), text("Tomorrow.")],
    )
    .await;
    let result = h.session.run("where is P-9?").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_function_call("track").with_validated_args(json!({"parcel": "P-9"}));
    // The first update, wrapped in the update template: an exact match would spell it out.
    let first = expect.next_event().is_function_call_output().containing("about P-9");
    assert_ne!(first.event().output, "Asking the carrier about P-9");
    expect.next_event().is_message(Role::Assistant).with_text("Checking.");
    // The result comes later, with a deferred reply of its own: after this run ended.
    expect.no_more_events();
    h.close().await;
}

mod mocks {
    use super::*;
    use colloquy::testing::MockScope;
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    struct Weather {
        location: String,
        #[serde(default)]
        unit: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Book {
        city: String,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Order {
        #[allow(dead_code)]
        item: String,
    }

    fn real_agent() -> Agent {
        Agent::new("A", "inst")
            .tool(FunctionTool::new(
                "get_weather",
                "Weather.",
                |_c: RunContext, a: Weather| async move {
                    Ok::<_, ToolError>(format!("REAL weather {} {:?}", a.location, a.unit))
                },
            ))
            .tool(FunctionTool::new("book", "Book.", |_c: RunContext, a: Book| async move {
                Ok::<_, ToolError>(format!("REAL booked {}", a.city))
            }))
            .tool(FunctionTool::new("order", "Order.", |_c: RunContext, _a: Order| async move {
                Ok::<_, ToolError>("REAL order")
            }))
    }

    fn weather_mock(prefix: &'static str) -> FunctionTool {
        FunctionTool::new("get_weather", "", move |_c: RunContext, a: Weather| async move {
            Ok::<_, ToolError>(format!("{prefix} {}", a.location))
        })
    }

    #[tokio::test(start_paused = true)]
    async fn c70_typed_mocks_replace_bodies_and_keep_the_real_schema() {
        let script = vec![ScriptedResponse::calls([
            ScriptedCall::new("w1", "get_weather", r#"{"location":"Tokyo"}"#),
            ScriptedCall::new("b1", "book", r#"{"city":"Paris"}"#),
            ScriptedCall::new("o1", "order", r#"{"item":"x"}"#),
            ScriptedCall::new("w2", "get_weather", "{}"),
        ])];
        let mut h = Harness::start(real_agent(), script).await;
        let book = FunctionTool::new("book", "", |_c: RunContext, a: Book| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, ToolError>(format!("mock booked {}", a.city))
        });
        let order = FunctionTool::new("order", "", |_c: RunContext, _a: Order| async move {
            Err::<String, _>(ToolError::internal("boom"))
        });
        let agent_scope = MockScope::Agent("A".into());
        h.session.mock_tools(agent_scope, [weather_mock("mock sunny"), book, order]).await.unwrap();
        let result = h.session.run("go").await.unwrap();
        result.contains_function_call_output("mock sunny Tokyo", false);
        result.contains_function_call_output("mock booked Paris", false);
        result.contains_function_call_output("An internal error occurred.", true);
        result.contains_function_call_output(
            "Error parsing arguments for `get_weather`: location: missing",
            true,
        );
        assert!(h.tool_events().contains(&r#"E(o1,error,"boom")"#.to_string()));
        let schema = &h.llm.requests()[0];
        assert_eq!(schema.tools, ["get_weather", "book", "order"]);
        h.close().await;
    }

    #[tokio::test(start_paused = true)]
    async fn agent_mocks_override_session_mocks_and_an_empty_list_removes_them() {
        let call = || call("w", "get_weather", r#"{"location":"Oslo"}"#);
        let h =
            Harness::start(real_agent(), vec![call(), text("a"), call(), text("b"), call()]).await;
        h.session.mock_tools(MockScope::Session, [weather_mock("session")]).await.unwrap();
        h.session.mock_tools(MockScope::Agent("A".into()), [weather_mock("agent")]).await.unwrap();
        h.session.run("1").await.unwrap().contains_function_call_output("agent Oslo", false);
        h.session.mock_tools(MockScope::Agent("A".into()), []).await.unwrap();
        h.session.run("2").await.unwrap().contains_function_call_output("session Oslo", false);
        h.session.mock_tools(MockScope::Session, []).await.unwrap();
        let real = h.session.run("3").await.unwrap();
        real.contains_function_call_output("REAL weather Oslo None", false);
        h.close().await;
    }

    #[tokio::test(start_paused = true)]
    async fn mocking_a_tool_the_agent_does_not_have_is_an_error() {
        let h = Harness::start(real_agent(), vec![]).await;
        let stray = FunctionTool::new("get_wether", "", |_c: RunContext, _a: Order| async move {
            Ok::<_, ToolError>("x")
        });
        let err = h.session.mock_tools(MockScope::Session, [stray]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid session configuration: cannot mock `get_wether`: agent `A` has no such tool"
        );
        h.close().await;
    }

    /// The mock of `refund`: the same parameters, so the same argument type (decision 6).
    #[function_tool(name = "refund")]
    async fn refund_mock(order_id: String, amount: f64) -> Result<String, ToolError> {
        Ok(format!("mock refunded {amount} on {order_id}"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_macro_tool_is_mocked_by_a_macro_tool_of_the_same_name_and_parameters() {
        let h = Harness::start(
            Agent::new("A", "inst").tool(refund()),
            vec![call("r1", "refund", r#"{"order_id":"A1","amount":"7"}"#), text("Done.")],
        )
        .await;
        h.session.mock_tools(MockScope::Session, [refund_mock()]).await.unwrap();
        let result = h.session.run("refund A1").await.unwrap();
        let mut expect = result.expect();
        expect.next_event().is_function_call("refund").with_validated_args(json!({"amount": 7}));
        expect.next_event().is_function_call_output().with_output("mock refunded 7 on A1");
        assert_eq!(h.llm.requests()[0].tools, ["refund"]);
        h.close().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_mock_taking_a_json_value_receives_the_validated_arguments() {
        // Any tool can be mocked without naming its argument type: a `Value` takes them all.
        let h = Harness::start(
            Agent::new("A", "inst").tool(refund()),
            vec![call("r1", "refund", r#"{"order_id":"A1","amount":"7","x":1}"#), text("Done.")],
        )
        .await;
        let mock = FunctionTool::new("refund", "", |_c: RunContext, a: Value| async move {
            Ok::<_, ToolError>(format!("mock got {a}"))
        });
        h.session.mock_tools(MockScope::Session, [mock]).await.unwrap();
        let result = h.session.run("refund A1").await.unwrap();
        result.contains_function_call_output(r#"mock got {"order_id":"A1","amount":7}"#, false);
        h.close().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_calls_output_in_a_run_is_its_provisional_text_and_its_end_follows_the_reply() {
    // docs/testing.md: a call that waits (a place, approval) is answered at once with its
    // template, before its siblings' results; its result comes after the step's reply.
    let mut h = Harness::start(
        Agent::new("A", "inst")
            .tool(sleeper("fetch", 1_000, "fetched").max_concurrent(1))
            .tool(sleeper("refund", 100, "refunded").requires_approval()),
        vec![
            ScriptedResponse::calls([
                ScriptedCall::new("c1", "fetch", "{}"),
                ScriptedCall::new("c2", "fetch", "{}"),
                ScriptedCall::new("c3", "refund", "{}"),
            ]),
            text("Fetching; the refund waits for approval."),
        ],
    )
    .await;
    let result = h.session.run("go").await.unwrap();
    let mut expect = result.expect();
    expect.skip_next(3); // the three calls, in call order
    expect.next_event().is_function_call_output().containing("waits for other calls");
    expect.next_event().is_function_call_output().containing("needs approval");
    expect.next_event().is_function_call_output().with_output("fetched");
    expect.next_event().is_message(Role::Assistant).containing("waits for approval");
    expect.no_more_events();
    h.session.approve("c3").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    let reply = at_ms(h.events(), |k| matches!(k, EventKind::FunctionToolsExecuted { .. }));
    let ends: Vec<(u64, String)> = ended_at(h.events());
    assert_eq!(reply, 1_010);
    assert_eq!(
        ends,
        [
            (1_010, "c1 done fetched".to_string()),
            (1_120, "c3_final done refunded".to_string()),
            (2_010, "c2_final done fetched".to_string())
        ]
    );
    h.close().await;
}
