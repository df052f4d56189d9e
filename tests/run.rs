//! The testing API: `SessionHandle::run` and its `RunResult` expectations (C-71, decision 9).

mod common;

use std::time::Duration;

use colloquy::prelude::*;
use common::*;
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
