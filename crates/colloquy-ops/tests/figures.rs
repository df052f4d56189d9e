//! Real sessions on the paused clock, watched by `Metrics`: which figure each session moves,
//! and that a watch ends with its session.

#[path = "../examples/metrics.rs"]
#[allow(dead_code)] // its `main` is for `cargo run --example`
mod example;

use std::time::Duration;

use colloquy_actors::{Session, SessionHandle};
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, FunctionTool, RunContext, ToolError};
use colloquy_ops::Metrics;

/// The exposition's lines that start with `prefix`, sorted (a family's series come in no fixed
/// order).
fn lines(text: &str, prefix: &str) -> Vec<String> {
    let mut lines: Vec<String> =
        text.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect();
    lines.sort();
    lines
}

/// Asserts the session figures once every watch has ended: `count` sessions watched, all
/// closed with `reason`, none live.
fn sessions_ended(metrics: &Metrics, reason: &str, count: u32) {
    let expected = [
        format!("colloquy_sessions_closed_total{{reason=\"{reason}\"}} {count}"),
        "colloquy_sessions_live 0".to_string(),
        format!("colloquy_sessions_started_total {count}"),
    ];
    assert_eq!(lines(&metrics.render(), "colloquy_sessions_"), expected);
}

fn tools() -> Agent {
    let lookup = FunctionTool::new("lookup", "Finds it.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, ToolError>("found")
    });
    let fail = FunctionTool::new("fail", "Fails.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Err::<String, _>(ToolError::new("no luck"))
    });
    let wait = FunctionTool::new("wait", "Waits.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<_, ToolError>("waited")
    })
    .cancellable();
    Agent::new("desk", "You help.").tool(lookup).tool(fail).tool(wait)
}

async fn start(responses: Vec<ScriptedResponse>) -> SessionHandle {
    Session::builder().llm(ScriptedLlm::new(responses)).start(tools()).await.expect("starts")
}

/// Waits for a watch to end, on the paused clock (a watch that never ends fails the test).
async fn ended(watching: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the watch ended with its session")
        .expect("the watch did not panic");
}

#[tokio::test(start_paused = true)]
async fn a_done_an_error_and_a_cancelled_call_are_counted_with_their_durations() {
    let metrics = Metrics::new();
    let calls = ["lookup", "fail", "wait"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| ScriptedCall::new(format!("c{}", i + 1), name, "{}"));
    let session =
        start(vec![ScriptedResponse::calls(calls), ScriptedResponse::text("Done.")]).await;
    let watching = metrics.watch(&session);
    session.user_turn("go").await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(lines(&metrics.render(), "colloquy_sessions_live"), ["colloquy_sessions_live 1"]);
    session.cancel_tool_call("c3").await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();
    ended(watching).await;

    let text = metrics.render();
    assert_eq!(
        lines(&text, "colloquy_tool_calls_ended_total"),
        [
            r#"colloquy_tool_calls_ended_total{tool="fail",status="error"} 1"#,
            r#"colloquy_tool_calls_ended_total{tool="lookup",status="done"} 1"#,
            r#"colloquy_tool_calls_ended_total{tool="wait",status="cancelled"} 1"#,
        ]
    );
    // Durations on the session clock, exact on the paused one: `wait` started with the
    // scripted response, 10 ms in, and was cancelled at 1 s.
    assert_eq!(
        lines(&text, "colloquy_tool_call_duration_seconds_sum"),
        [
            r#"colloquy_tool_call_duration_seconds_sum{tool="fail",status="error"} 0.04"#,
            r#"colloquy_tool_call_duration_seconds_sum{tool="lookup",status="done"} 0.2"#,
            r#"colloquy_tool_call_duration_seconds_sum{tool="wait",status="cancelled"} 0.99"#,
        ]
    );
    let lookup =
        lines(&text, r#"colloquy_tool_call_duration_seconds_bucket{le="0.25",tool="lookup""#);
    assert_eq!(
        lookup,
        [r#"colloquy_tool_call_duration_seconds_bucket{le="0.25",tool="lookup",status="done"} 1"#]
    );
    sessions_ended(&metrics, "close", 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_llm_request_is_an_llm_error_and_an_error_event() {
    let metrics = Metrics::new();
    let session = start(vec![ScriptedResponse::error("the model is down")]).await;
    let watching = metrics.watch(&session);
    session.user_turn("hello?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.close_with_reason("caller hung up").await.unwrap();
    ended(watching).await;
    let text = metrics.render();
    assert_eq!(
        lines(&text, "colloquy_llm_errors_total"),
        [r#"colloquy_llm_errors_total{kind="provider"} 1"#]
    );
    assert_eq!(lines(&text, "colloquy_errors_total"), [r#"colloquy_errors_total{source="llm"} 1"#]);
    assert_eq!(
        lines(&text, "colloquy_sessions_closed_total"),
        [r#"colloquy_sessions_closed_total{reason="caller hung up"} 1"#]
    );
    // The scripted model describes no response (no finish reason, no usage): none counted.
    assert!(lines(&text, "colloquy_llm_responses_total").is_empty(), "{text}");
}

/// The watch holds no handle: a session without a host closes when its host app drops its
/// handles, and the watch ends with it.
#[tokio::test(start_paused = true)]
async fn the_watch_neither_keeps_a_session_alive_nor_outlives_it() {
    let metrics = Metrics::new();
    let session = start(vec![ScriptedResponse::text("Hi.")]).await;
    let watching = metrics.watch(&session);
    drop(session);
    ended(watching).await;
    sessions_ended(&metrics, "handles_dropped", 1);
}

/// Many sessions watched one after another leave no task behind and the live count at zero.
#[tokio::test(start_paused = true)]
async fn watches_end_one_per_session() {
    let metrics = Metrics::new();
    let mut watches = Vec::new();
    for _ in 0..20 {
        let session = start(vec![ScriptedResponse::text("Hi.")]).await;
        watches.push(metrics.watch(&session));
        session.user_turn("hi").await.unwrap();
        session.wait_for_idle().await.unwrap();
        session.close().await.unwrap();
    }
    for watching in watches {
        ended(watching).await;
    }
    sessions_ended(&metrics, "close", 20);
}

/// A session watched after it closed never sends `session_closed`: it counts as `_lost`.
#[tokio::test(start_paused = true)]
async fn a_session_watched_after_its_close_counts_as_lost() {
    let metrics = Metrics::new();
    let session = start(vec![]).await;
    session.close().await.unwrap();
    ended(metrics.watch(&session)).await;
    sessions_ended(&metrics, "_lost", 1);
}

#[tokio::test(start_paused = true)]
async fn the_example_prints_a_done_and_an_error_call() {
    let text = example::run().await.expect("the example runs");
    assert_eq!(
        lines(&text, "colloquy_tool_calls_ended_total"),
        [
            r#"colloquy_tool_calls_ended_total{tool="lookup_order",status="done"} 1"#,
            r#"colloquy_tool_calls_ended_total{tool="refund",status="error"} 1"#,
        ]
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}
