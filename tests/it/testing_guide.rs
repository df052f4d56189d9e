//! The worked example of `docs/testing.md`, run as a test. The guide's Rust block must stay
//! identical to the code between the markers below (checked by `the_guide_shows_this_code`).

// guide:start
use colloquy::prelude::*;

/// Book a flight.
///
/// * `origin` - Departure city.
/// * `destination` - Arrival city.
/// * `passengers` - How many people travel.
#[function_tool]
async fn book_flight(
    origin: String,
    destination: String,
    passengers: u32,
) -> Result<String, ToolError> {
    // The real body calls the airline; tests mock it.
    Err(ToolError::internal(format!(
        "no airline in tests ({origin} -> {destination}, {passengers})"
    )))
}

/// The mock: the real tool's name and the same parameters, so the same argument type
/// (mocks are typed, decision 6). The model still sees the real tool's schema, and the
/// arguments are still validated against it.
#[function_tool(name = "book_flight")]
async fn book_flight_mock(
    origin: String,
    destination: String,
    passengers: u32,
) -> Result<String, ToolError> {
    tokio::time::sleep(std::time::Duration::from_secs(20)).await; // virtual time
    Ok(format!("BK-1 {origin} -> {destination} ({passengers} seats)"))
}

#[tokio::test(start_paused = true)]
async fn books_a_flight_and_confirms_it() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::text("Booking it.").with_call(ScriptedCall::new(
            "c1",
            "book_flight",
            r#"{"origin":"Paris","destination":"Tokyo","passengers":"2"}"#,
        )),
        ScriptedResponse::text("Done: your confirmation is BK-1."),
    ])
    .recording();
    let session = Session::builder()
        .llm(llm.clone())
        .start(Agent::new("travel", "You book flights.").tool(book_flight()))
        .await
        .unwrap();
    session.mock_tools(MockScope::Agent("travel".into()), [book_flight_mock()]).await.unwrap();

    let result = session.run("Book me Paris to Tokyo for two").await.unwrap();
    let mut expect = result.expect();
    expect.next_event().is_message(Role::Assistant).with_text("Booking it.");
    expect
        .next_event()
        .is_function_call("book_flight")
        .with_args(json!({"origin": "Paris", "passengers": "2"})) // what the model sent
        .with_validated_args(json!({"passengers": 2})); // what the tool received
    expect.next_event().is_function_call_output().containing("BK-1 Paris -> Tokyo");
    expect.next_event().is_message(Role::Assistant).containing("BK-1");
    expect.no_more_events();

    // What the model was sent, request by request.
    let requests = llm.requests();
    assert_eq!(requests[1].tool_choice, Some(ToolChoice::Auto));
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
    assert_eq!(history[4]["output"], "BK-1 Paris -> Tokyo (2 seats)");
    assert_eq!(history[5]["text"], "Done: your confirmation is BK-1.");
}

#[tokio::test(start_paused = true)]
async fn the_guides_failure_listing_is_what_a_failure_prints() {
    let guide = include_str!("../../docs/testing.md");
    let start = guide.find("```text\nrun expectation failed").unwrap() + "```text\n".len();
    let end = start + guide[start..].find("```\n").unwrap();
    let llm = ScriptedLlm::new([
        ScriptedResponse::text("Booking it.").with_call(ScriptedCall::new(
            "c1",
            "book_flight",
            r#"{"origin":"Paris","destination":"Tokyo","passengers":"2"}"#,
        )),
        ScriptedResponse::text("Done: your confirmation is BK-1."),
    ]);
    let session = Session::builder()
        .llm(llm)
        .start(Agent::new("travel", "You book flights.").tool(book_flight()))
        .await
        .unwrap();
    session.mock_tools(MockScope::Session, [book_flight_mock()]).await.unwrap();
    let result = session.run("Book me Paris to Tokyo for two").await.unwrap();
    let panic = std::panic::catch_unwind(|| {
        let mut expect = result.expect();
        expect.skip_next(1);
        expect
            .next_event()
            .is_function_call("book_flight")
            .with_validated_args(json!({"passengers": 3}));
    })
    .unwrap_err();
    let printed = panic.downcast_ref::<String>().unwrap();
    assert_eq!(printed, &guide[start..end]);
    session.close().await.unwrap();
}
