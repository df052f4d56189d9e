//! A host's first program (decision 57): a support desk with two tools, one in the background, a
//! `Host`, a speech sink, filtered events, `inspect()` and the testing API, written with
//! `use colloquy::prelude::*;` alone (and std, and tokio for `#[tokio::test]`). If a name a
//! first program needs leaves the prelude, this module stops compiling.

use colloquy::prelude::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Look up an order.
///
/// * `order_id` - The order's number.
#[function_tool]
async fn lookup_order(order_id: String) -> Result<Value, ToolError> {
    Ok(json!({ "order_id": order_id, "status": "shipped" }))
}

/// Refund part of an order, in the background.
///
/// * `order_id` - The order's number.
/// * `amount` - How much to refund, in euros.
#[function_tool(cancellable, on_duplicate = "reject", deadline = "30s")]
async fn refund(ctx: RunContext, order_id: String, amount: f64) -> Result<String, ToolError> {
    ctx.update(format!("Refunding {amount} EUR on {order_id}…")).await?;
    tokio::time::sleep(Duration::from_secs(3)).await; // the payment provider
    Ok(format!("refunded {amount} EUR on {order_id}"))
}

/// The refund, as tests run it: the same parameters, so the same argument type (decision 6).
#[function_tool(name = "refund")]
async fn refund_mock(order_id: String, amount: f64) -> Result<String, ToolError> {
    Ok(format!("mock refund {amount} on {order_id}"))
}

/// Keeps what the agent said, as a terminal or a TTS engine would play it.
#[derive(Clone, Default)]
struct Transcript(Arc<Mutex<Vec<String>>>);

impl SpeechSink for Transcript {
    fn play(&self, mut playout: Playout) {
        let lines = Arc::clone(&self.0);
        tokio::spawn(async move {
            let mut line = String::new();
            while let Some(delta) = playout.next_text().await {
                line.push_str(&delta);
            }
            lines.lock().map(|mut l| l.push(line)).ok();
            playout.done();
        });
    }
}

/// The desk on any model: the scripted one in tests, `OpenAi` or `Anthropic` in production.
async fn open_desk(
    host: &Host,
    llm: impl Llm,
    sink: Transcript,
) -> Result<SessionHandle, SessionError> {
    let agent = Agent::new("desk", "You help with orders.").tool(lookup_order()).tool(refund());
    Session::builder().host(host).llm(llm).speech_sink(sink).start(agent).await
}

#[cfg(all(feature = "openai", feature = "anthropic"))]
#[test]
fn the_real_models_are_in_the_prelude() {
    let openai = OpenAi::new().base_url("http://127.0.0.1:8080/v1").model("local");
    let anthropic = Anthropic::new().api_key("sk-test").model("claude-sonnet-4-5");
    assert_eq!((openai.model_name(), anthropic.model_name()), ("local", "claude-sonnet-4-5"));
}

#[tokio::test(start_paused = true)]
async fn a_support_desk_runs_on_the_prelude_alone() {
    let host = Host::new().await.unwrap();
    let transcript = Transcript::default();
    let llm = ScriptedLlm::new([
        ScriptedResponse::text("Let me check.").with_call(ScriptedCall::new(
            "c1",
            "refund",
            r#"{"order_id": "42", "amount": "25"}"#,
        )),
        ScriptedResponse::text("Your refund is on its way."),
        ScriptedResponse::text("Done: refunded."),
    ]);
    let session = open_desk(&host, llm, transcript.clone()).await.unwrap();
    let mut tools = session.subscribe_to(EventFilter::tool_execution());
    session.user_turn("Refund 25 EUR on order 42").await.unwrap();
    session.wait_for_idle().await.unwrap();

    let snapshot: SessionSnapshot = session.inspect().await.unwrap();
    fn running(node: &ActorNode, call_id: &str) -> bool {
        node.call_id.as_deref() == Some(call_id)
            || node.children.iter().any(|child| running(child, call_id))
    }
    assert!(running(&snapshot.tree, "c1"), "the refund still runs: {:?}", snapshot.tree);

    tokio::time::sleep(Duration::from_secs(5)).await;
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();
    let mut ended = Vec::new();
    while let Some(event) = tools.recv().await {
        if let EventKind::ToolCallEnded { call_id, status: ToolCallStatus::Done, .. } = event.kind {
            ended.push(call_id);
        }
    }
    assert_eq!(ended, ["c1"]);
    let said = transcript.0.lock().unwrap().clone();
    assert_eq!(said.first().map(String::as_str), Some("Let me check."));
    assert_eq!(host.sessions().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn its_test_mocks_the_refund_and_matches_what_the_tool_received() {
    let host = Host::new().await.unwrap();
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new(
            "c1",
            "refund",
            r#"{"order_id": "42", "amount": "25"}"#,
        )]),
        ScriptedResponse::text("Refunded 25 EUR."),
    ]);
    let session = open_desk(&host, llm, Transcript::default()).await.unwrap();
    session.mock_tools(MockScope::Agent("desk".into()), [refund_mock()]).await.unwrap();
    let result: RunResult = session.run("Refund 25 EUR on order 42").await.unwrap();
    let mut expect = result.expect();
    expect
        .next_event()
        .is_function_call("refund")
        .with_args(json!({"amount": "25"}))
        .with_validated_args(json!({"order_id": "42", "amount": 25.0}));
    expect.next_event().is_function_call_output().containing("mock refund 25");
    expect.next_event().is_message(Role::Assistant).matching(|text| text.contains("25 EUR"));
    expect.no_more_events();
    session.close().await.unwrap();
}
