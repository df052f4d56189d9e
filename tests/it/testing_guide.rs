//! The worked example of `docs/testing.md`, run as a test. The guide's Rust block must stay
//! identical to the code between the markers below (checked by `the_guide_shows_this_code`).

// guide:start
use colloquy::MockScope;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct BookFlight {
    /// Departure city.
    origin: String,
    /// Arrival city.
    destination: String,
}

fn book_flight() -> FunctionTool {
    FunctionTool::new(
        "book_flight",
        "Book a flight.",
        |_ctx: RunContext, a: BookFlight| async move {
            // The real body calls the airline; tests mock it.
            Err::<String, _>(ToolError::internal(format!(
                "no airline in tests ({} -> {})",
                a.origin, a.destination
            )))
        },
    )
}

#[tokio::test(start_paused = true)]
async fn books_a_flight_and_confirms_it() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::text("Booking it.").with_call(ScriptedCall::new(
            "c1",
            "book_flight",
            r#"{"origin":"Paris","destination":"Tokyo"}"#,
        )),
        ScriptedResponse::text("Done: your confirmation is BK-1."),
    ])
    .recording();
    let session = Session::builder()
        .llm(llm.clone())
        .start(Agent::new("travel", "You book flights.").tool(book_flight()))
        .await
        .unwrap();

    // Same argument type as the real tool (decision 6); arguments are still validated
    // against the real schema, and the model still sees the real schema.
    let mock = FunctionTool::new("book_flight", "", |_ctx: RunContext, a: BookFlight| async move {
        tokio::time::sleep(std::time::Duration::from_secs(20)).await; // virtual time
        Ok::<_, ToolError>(format!("BK-1 {} -> {}", a.origin, a.destination))
    });
    session.mock_tools(MockScope::Agent("travel".into()), [mock]).await.unwrap();

    let result = session.run("Book me Paris to Tokyo").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_message(Role::Assistant).with_text("Booking it.");
    expect.next_event().is_function_call("book_flight").with_args(json!({"origin": "Paris"}));
    expect.next_event().is_function_call_output().with_output("BK-1 Paris -> Tokyo");
    expect.next_event().is_message(Role::Assistant).containing("BK-1");
    expect.no_more_events();

    // What the model was sent, request by request.
    let requests = llm.requests();
    assert_eq!(requests[1].tool_choice, Some(colloquy::ToolChoice::Auto));
    session.close().await.unwrap();
}
// guide:end

#[test]
fn the_guide_shows_this_code() {
    let guide = include_str!("../../docs/testing.md");
    let this = include_str!("testing_guide.rs");
    let start = this.find("// guide:start\n").unwrap() + "// guide:start\n".len();
    let end = this.find("// guide:end").unwrap();
    let block_start = guide.find("```rust\n").unwrap() + "```rust\n".len();
    let block_end = block_start + guide[block_start..].find("```\n").unwrap();
    assert_eq!(&guide[block_start..block_end], &this[start..end], "docs/testing.md is out of date");
}

#[test]
fn the_guide_scenario_file_plays() {
    let guide = include_str!("../../docs/testing.md");
    let start = guide.find("```json\n").unwrap() + "```json\n".len();
    let end = start + guide[start..].find("```\n").unwrap();
    let trace = colloquy_scenario::run_str(&guide[start..end]).expect("the guide's file plays");
    let history = serde_json::to_value(&trace.history).unwrap();
    assert_eq!(history[4]["output"], "BK-1 Paris -> Tokyo");
    assert_eq!(history[5]["text"], "Done: your confirmation is BK-1.");
}
