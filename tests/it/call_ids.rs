//! Call ids belong to the runtime (decision 24): a model that reuses an id
//! across responses or within one, or sends none, never makes the session lose a call.

use std::time::Duration;

use crate::common::*;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

/// A cancellable background booking: an update at once, the result after 500 ms.
fn book() -> FunctionTool {
    FunctionTool::new("book", "Book.", |ctx: RunContext, a: City| async move {
        ctx.update(format!("Looking up {}", a.city)).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok::<_, ToolError>(format!("Booked {}", a.city))
    })
    .cancellable()
}

fn calls(list: &[(&str, &str, &str)]) -> ScriptedResponse {
    ScriptedResponse::calls(
        list.iter().map(|(id, name, args)| ScriptedCall::new(*id, *name, *args)),
    )
}

/// Two turns whose responses both call `book` as `call_0`; both bookings still run.
async fn two_bookings_under_one_id() -> Harness {
    let script = vec![
        call("call_0", "book", r#"{"city":"Tokyo"}"#),
        text("Booking Tokyo."),
        call("call_0", "book", r#"{"city":"Oslo"}"#),
        text("Booking Oslo too."),
    ];
    let h = Harness::start(Agent::new("A", "inst").tool(book()), script).await;
    h.turn("book Tokyo").await;
    h.turn("and Oslo").await;
    h
}

#[tokio::test(start_paused = true)]
async fn an_id_reused_by_the_next_response_gets_a_fresh_one_and_both_calls_finish() {
    let mut h = two_bookings_under_one_id().await;
    let running: Vec<String> =
        h.session.running_tool_calls().await.unwrap().into_iter().map(|c| c.call_id).collect();
    assert_eq!(running, ["call_0", "call_0_2"]);
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let ended: Vec<String> = h.tool_events().into_iter().filter(|e| e.starts_with("E(")).collect();
    assert_eq!(
        ended,
        [r#"E(call_0_final,done,"Booked Tokyo")"#, r#"E(call_0_2_final,done,"Booked Oslo")"#]
    );
    let history = h.hist().await;
    for output in
        [r#"out(#call_0_final,"Booked Tokyo",ok"#, r#"out(#call_0_2_final,"Booked Oslo",ok"#]
    {
        assert!(history.iter().any(|i| i.starts_with(output)), "{output} missing: {history:#?}");
    }
    // The model sees the id the runtime gave: its second call is `call_0_2` in later requests.
    let last = h.requests().pop().unwrap();
    assert!(
        show(&last.items).iter().any(|i| i.starts_with(r#"call(book#call_0_2 {"city": "Oslo"})"#))
    );
}

#[tokio::test(start_paused = true)]
async fn a_reused_id_can_still_be_cancelled_by_the_id_each_call_got() {
    let mut h = two_bookings_under_one_id().await;
    h.session.cancel_tool_call("call_0").await.expect("the first call is found");
    h.session.wait_for_quiet().await.unwrap();
    let ended: Vec<String> = h.tool_events().into_iter().filter(|e| e.starts_with("E(")).collect();
    assert_eq!(
        ended,
        ["E(call_0_final,cancelled,null)", r#"E(call_0_2_final,done,"Booked Oslo")"#]
    );
}

#[tokio::test(start_paused = true)]
async fn an_id_repeated_within_one_response_and_empty_ids_are_told_apart() {
    let weather =
        FunctionTool::new("weather", "Weather.", |_ctx: RunContext, a: City| async move {
            Ok::<_, ToolError>(format!("sunny in {}", a.city))
        });
    let script = vec![
        calls(&[
            ("c1", "weather", r#"{"city":"Rome"}"#),
            ("c1", "weather", r#"{"city":"Lima"}"#),
            ("", "weather", r#"{"city":"Oslo"}"#),
            ("", "weather", r#"{"city":"Kyiv"}"#),
        ]),
        text("All sunny."),
    ];
    let mut h = Harness::start(Agent::new("A", "inst").tool(weather), script).await;
    h.turn("weather?").await;
    let started: Vec<String> =
        h.tool_events().into_iter().filter(|e| e.starts_with("S(")).collect();
    assert_eq!(started, ["S(c1)", "S(c1_2)", "S(call_1)", "S(call_2)"]);
    let history = h.hist().await;
    let outputs: Vec<&String> = history.iter().filter(|i| i.starts_with("out(")).collect();
    assert_eq!(
        outputs,
        [
            r#"out(#c1,"sunny in Rome",ok,rr=T)"#,
            r#"out(#c1_2,"sunny in Lima",ok,rr=T)"#,
            r#"out(#call_1,"sunny in Oslo",ok,rr=T)"#,
            r#"out(#call_2,"sunny in Kyiv",ok,rr=T)"#,
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn ids_of_a_restored_history_stay_taken() {
    let first = Harness::start(
        Agent::new("A", "inst").tool(sleeper("nap", 10, "rested")),
        vec![call("c1", "nap", "{}"), text("Rested.")],
    )
    .await;
    first.turn("nap").await;
    let stored = first.session.history().await.unwrap();
    first.session.close().await.unwrap();
    let builder = Session::builder().history(stored);
    let mut again = Harness::start_with(
        builder,
        Agent::new("A", "inst").tool(sleeper("nap", 10, "rested")),
        vec![call("c1", "nap", "{}"), text("Rested again.")],
    )
    .await;
    again.turn("nap again").await;
    let started: Vec<String> =
        again.tool_events().into_iter().filter(|e| e.starts_with("S(")).collect();
    assert_eq!(started, ["S(c1_2)"]);
}
