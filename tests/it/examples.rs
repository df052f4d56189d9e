//! The examples in `examples/` run here, on the paused clock, so they keep working.

#[path = "../../examples/quickstart.rs"]
#[allow(dead_code)] // its `main` is for `cargo run --example`
mod quickstart;

#[path = "../../examples/background.rs"]
#[allow(dead_code)]
mod background;

#[path = "../../examples/handoff.rs"]
#[allow(dead_code)]
mod handoff;

#[path = "../../examples/tool_search.rs"]
#[allow(dead_code)]
mod tool_search;

#[path = "../../examples/audit_hook.rs"]
#[allow(dead_code)]
mod audit_hook;

#[path = "../../examples/openai.rs"]
#[allow(dead_code)]
mod openai;

use crate::wire;
use colloquy::chat::ChatItem;

#[tokio::test(start_paused = true)]
async fn tool_search_finds_the_right_tool_among_200() {
    let (tools, answer) = tool_search::run("cancel my hotel room booking").await.unwrap();
    assert_eq!(tools[0], ["tool_search"], "200 tools hidden behind one");
    assert_eq!(tools[1].len(), 11, "the hotel toolset loaded whole: {:?}", tools[1]);
    assert!(tools[1].iter().all(|t| t == "tool_search" || t.ends_with("_hotel")));
    assert_eq!(answer, r#"Done: cancel_hotel: done for "the user's request""#);
    let (tools, answer) = tool_search::run("what is the stock quote for ACME").await.unwrap();
    assert!(tools[1].contains(&"price_stock".to_string()), "{:?}", tools[1]);
    assert!(answer.starts_with("Done: "), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn quickstart_answers_with_the_tool_result() {
    let (history, shown) = quickstart::run().await.expect("quickstart runs");
    let kinds: Vec<&str> = history
        .iter()
        .map(|item| match item {
            ChatItem::Message(_) => "message",
            ChatItem::FunctionCall(_) => "function_call",
            ChatItem::FunctionCallOutput(_) => "function_call_output",
            ChatItem::AgentHandoff(_) => "agent_handoff",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["agent_handoff", "message", "function_call", "function_call_output", "message"]
    );
    let output = history[3].as_function_call_output().unwrap();
    assert_eq!(output.output, "It is sunny and 22°C in Paris.");
    let answer = history[4].as_message().unwrap();
    assert_eq!(answer.text, "It's sunny and 22°C in Paris today.");
    assert_eq!(shown, answer.text, "the reply printed from its text events");
}

#[tokio::test(start_paused = true)]
async fn background_narrates_progress_then_the_result() {
    let said = background::run().await.expect("background example runs");
    assert_eq!(
        said,
        [
            "Sure, let me look that up.",
            "I found three flights and I'm picking the best one.",
            "You're booked! Your confirmation number is BK-3007.",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn handoff_keeps_the_session_scoped_lookup_and_billing_reports_it() {
    let lines = handoff::run().await.expect("handoff example runs");
    assert_eq!(
        lines,
        [
            "user: Hi, my account is A-17.",
            "receptionist: I'm pulling up your account.",
            "user: I have a question about an invoice.",
            "billing: Hi, billing here. Let me see your account.",
            "billing: Your account has two unpaid invoices, 120 EUR in total.",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn audit_hook_logs_each_call_with_its_session() {
    let (lines, [a, b]) = audit_hook::run().await.expect("audit_hook example runs");
    assert_ne!(a, b);
    // The same call id in both sessions: the session id tells them apart.
    assert_eq!(
        lines,
        [
            format!(r#"{a} c1 order_status {{"order_id":"A-1"}}"#),
            format!(r#"{b} c1 order_status {{"order_id":"B-2"}}"#),
        ]
    );
}

/// On the real clock: it talks HTTP to a replay server on 127.0.0.1 (docs/testing.md).
#[tokio::test]
async fn the_openai_example_books_in_the_background_on_a_real_wire() {
    let replies = ["book_call", "looking", "booked"]
        .map(|name| colloquy_replay::Reply::sse(&wire::recording("openai", name)));
    let server = colloquy_replay::ReplayServer::start(replies.into()).await.unwrap();
    let llm = colloquy::openai::OpenAi::new().base_url(format!("{}/v1", server.base_url()));
    let run = openai::run(llm, "Book me a flight to Tokyo.");
    let said = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("the example finished within 20 s")
        .expect("the example runs");
    assert_eq!(said, ["Let me book that.", "I'm on it.", "You're booked: FL-1."]);
    let last = &server.received()[2].body["messages"];
    assert!(last.to_string().contains("Booked FL-1 to Tokyo"), "{last:#}");
}
