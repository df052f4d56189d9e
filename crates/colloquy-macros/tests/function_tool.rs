//! `#[function_tool]` through the public API: the schema it writes equals the hand-written
//! argument struct's, the tool runs in a session like any typed tool, options become flags.

mod common;

use colloquy::prelude::*;
use colloquy::tools::{DuplicateScope, OnDuplicate};
use colloquy_model::tool::parameters_schema;
use schemars::JsonSchema;
use serde::Deserialize;

/// Book a flight between two airports.
///
/// Seats are held for ten minutes.
///
/// * `origin` - IATA code of the departure airport.
/// * `destination` - IATA code of the arrival airport.
/// * `passengers` - How many people travel (default 1).
#[function_tool(cancellable, on_duplicate = "confirm", duplicate_scope = "name_and_args")]
async fn book_flight(
    origin: String,
    ctx: RunContext,
    destination: String,
    passengers: Option<u8>,
) -> Result<String, ToolError> {
    let _ = ctx.call_id();
    Ok(format!("{origin}-{destination} for {}", passengers.unwrap_or(1)))
}

// The struct a user would write by hand for the same tool (its doc comment would become the
// schema's description, so it has none).
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct BookFlight {
    /// IATA code of the departure airport.
    origin: String,
    /// IATA code of the arrival airport.
    destination: String,
    /// How many people travel (default 1).
    #[serde(default)]
    passengers: Option<u8>,
}

/// Current weather.
#[function_tool(name = "get_weather")]
async fn weather(city: String) -> Result<String, ToolError> {
    Ok(format!("sunny in {city}"))
}

#[test]
fn the_schema_name_and_description_come_from_the_function() {
    let tool = book_flight();
    assert_eq!(tool.name(), "book_flight");
    assert_eq!(
        tool.description(),
        "Book a flight between two airports.\n\nSeats are held for ten minutes."
    );
    // The confirm policy adds its flag to the schema, as it does to any tool's.
    let mut schema = tool.parameters().clone();
    schema["properties"].as_object_mut().unwrap().remove("lk_agents_confirm_duplicate");
    assert_eq!(schema, parameters_schema::<BookFlight>());
    assert_eq!(tool.parameters()["required"], serde_json::json!(["origin", "destination"]));
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["origin", "destination", "passengers"], "the parameters' order is kept");
}

#[test]
fn options_become_the_builders_flags() {
    let tool = book_flight();
    assert!(tool.flags().cancellable);
    assert_eq!(tool.duplicate_policy(), (OnDuplicate::Confirm, DuplicateScope::NameAndArgs));
    let weather = weather();
    assert_eq!((weather.name(), weather.description()), ("get_weather", "Current weather."));
    assert!(!weather.flags().cancellable);
}

/// Refund an order.
#[function_tool(on_duplicate = "reject", duplicate_scope = ["order_id"])]
async fn refund(order_id: String, amount: f64) -> Result<String, ToolError> {
    Ok(format!("refunded {amount} on {order_id}"))
}

#[test]
fn a_list_of_names_scopes_duplicates_to_those_arguments() {
    let tool = refund();
    assert_eq!(tool.duplicate_policy(), (OnDuplicate::Reject, DuplicateScope::args(["order_id"])));
    let key = |v: serde_json::Value| tool.duplicate_key(v.as_object().unwrap());
    assert_eq!(
        key(serde_json::json!({"order_id": "A1", "amount": 25})),
        key(serde_json::json!({"order_id": "A1", "amount": "30"})),
        "one refund per order, whatever the amount"
    );
    assert_ne!(
        key(serde_json::json!({"order_id": "A1", "amount": 25})),
        key(serde_json::json!({"order_id": "A2", "amount": 25}))
    );
}

/// Look up an order.
#[function_tool(deadline = "1500ms", heartbeat = "1s")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    Ok(order_id)
}

#[tokio::test(start_paused = true)]
async fn deadline_and_heartbeat_bound_the_calls_as_the_builder_would() {
    let tool = lookup_order();
    let limits = tool.limits();
    assert_eq!(limits.deadline, Some(std::time::Duration::from_millis(1_500)));
    assert_eq!(limits.heartbeat, Some(std::time::Duration::from_secs(1)));
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new("c1", "lookup_order", r#"{"order_id":"A1"}"#)]),
        ScriptedResponse::text("Sorry, the lookup is slow."),
    ])
    .recording();
    let session = Session::builder()
        .llm(llm.clone())
        .start(Agent::new("desk", "inst").tool(tool))
        .await
        .unwrap();
    session.user_turn("where is A1?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    // No update for 1 s comes before the 1.5 s deadline.
    let output = llm.requests()[1].items.iter().find_map(|item| match item {
        ChatItem::FunctionCallOutput(o) => Some((o.output.clone(), o.is_error)),
        _ => None,
    });
    let why = "Tool `lookup_order` timed out: no update for 1 s".to_string();
    assert_eq!(output, Some((why, true)));
    session.close().await.unwrap();
}

/// Refund an order, once someone agrees.
#[function_tool(requires_approval)]
async fn approved_refund(order_id: String) -> Result<String, ToolError> {
    Ok(format!("refunded {order_id}"))
}

#[tokio::test(start_paused = true)]
async fn requires_approval_makes_each_call_wait_for_the_host() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new(
            "c1",
            "approved_refund",
            r#"{"order_id":"A1"}"#,
        )]),
        ScriptedResponse::text("I asked for approval."),
        ScriptedResponse::text("Refunded."),
    ]);
    let session = Session::builder()
        .llm(llm)
        .start(Agent::new("desk", "inst").tool(approved_refund()))
        .await
        .unwrap();
    session.user_turn("refund A1").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let running = session.running_tool_calls().await.unwrap();
    assert!(running[0].awaiting_approval);
    session.approve("c1").await.unwrap();
    session.wait_for_quiet().await.unwrap();
    let history = session.history().await.unwrap();
    let last_output = history.iter().rev().find_map(|item| match item {
        ChatItem::FunctionCallOutput(o) => Some(o.output.clone()),
        _ => None,
    });
    assert_eq!(last_output.as_deref(), Some("refunded A1"));
    session.close().await.unwrap();
}

/// Charge an order.
#[function_tool(max_concurrent = 2, idempotent = "10m")]
async fn charge(order_id: String) -> Result<String, ToolError> {
    Ok(format!("charged {order_id}"))
}

#[test]
fn max_concurrent_and_idempotent_set_what_the_builder_sets() {
    let tool = charge();
    let caps = tool.concurrency_limits();
    assert_eq!(caps.len(), 1);
    assert_eq!((&*caps[0].group, caps[0].max), ("tool:charge", 2));
    assert_eq!(tool.remembers_for(), Some(std::time::Duration::from_secs(600)));
    // Keyed by name and validated arguments.
    let args = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
    let key = |v| tool.result_key(&args(v));
    assert_eq!(
        key(serde_json::json!({"order_id": "A1"})),
        key(serde_json::json!({"order_id": "A1"}))
    );
    assert_ne!(
        key(serde_json::json!({"order_id": "A1"})),
        key(serde_json::json!({"order_id": "A2"}))
    );
}

/// Pay an order, once: the payment service deduplicates by the call's idempotency key.
#[function_tool(on_interrupted = "rerun")]
async fn pay(ctx: RunContext, order_id: String) -> Result<String, ToolError> {
    Ok(format!("paid {order_id} under {}", ctx.idempotency_key()))
}

#[test]
fn on_interrupted_sets_what_the_builder_sets() {
    use colloquy::tools::OnInterrupted;
    assert_eq!(pay().limits().on_interrupted, Some(OnInterrupted::Rerun));
    assert_eq!(charge().limits().on_interrupted, None, "the session's default applies");
}

#[tokio::test(start_paused = true)]
async fn the_tool_runs_in_a_session_and_bad_arguments_reach_the_model() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "get_weather", r#"{"city": "Oslo"}"#),
            ScriptedCall::new("c2", "book_flight", r#"{"origin": "OSL", "destination": "LIM"}"#),
            ScriptedCall::new("c3", "book_flight", r#"{"origin": "OSL"}"#),
        ]),
        ScriptedResponse::text("Done."),
    ]);
    let session = Session::builder()
        .llm(llm)
        .start(Agent::new("a", "inst").tool(weather()).tool(book_flight()))
        .await
        .unwrap();
    session.user_turn("go").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let outputs: Vec<(String, bool)> = session
        .history()
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.as_function_call_output())
        .map(|o| (o.output.clone(), o.is_error))
        .collect();
    assert_eq!(
        outputs,
        [
            ("sunny in Oslo".to_string(), false),
            ("OSL-LIM for 1".to_string(), false),
            ("Error parsing arguments for `book_flight`: destination: missing".to_string(), true),
        ]
    );
    session.close().await.unwrap();
}

/// Reads a seat count.
///
/// * `seats` - A number, as text.
#[function_tool]
async fn count_seats(seats: String) -> Result<String, ToolError> {
    let n: u32 = seats.parse()?; // any error type: an internal error
    if n == 0 {
        return Err(ToolError::new("no seats asked for")); // the model reads this one
    }
    Ok(format!("{n} seats"))
}

#[tokio::test(start_paused = true)]
async fn question_mark_on_any_error_is_an_internal_error_and_tool_errors_stay_verbatim() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "count_seats", r#"{"seats": "many"}"#),
            ScriptedCall::new("c2", "count_seats", r#"{"seats": "0"}"#),
            ScriptedCall::new("c3", "count_seats", r#"{"seats": "2"}"#),
        ]),
        ScriptedResponse::text("Done."),
    ]);
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("a", "inst").tool(count_seats())).await.unwrap();
    session.user_turn("seats?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let outputs = common::outputs(&session).await;
    assert_eq!(outputs, ["An internal error occurred.", "no seats asked for", "2 seats"]);
    session.close().await.unwrap();
    let mut ended = None;
    while let Some(event) = events.recv().await {
        if let EventKind::ToolCallEnded { call_id, message, .. } = event.kind
            && call_id == "c1"
        {
            ended = message;
        }
    }
    assert_eq!(ended.as_deref(), Some("invalid digit found in string"), "the host sees the cause");
}

/// Plans a trip.
///
/// * `city` - Where to.
/// * `nights` - How long.
#[function_tool]
async fn plan_trip(city: String, #[default = 3] nights: u32) -> Result<String, ToolError> {
    Ok(format!("{nights} nights in {city}"))
}

#[tokio::test(start_paused = true)]
async fn a_parameter_default_is_in_the_schema_and_fills_a_missing_argument() {
    let tool = plan_trip();
    assert_eq!(tool.parameters()["properties"]["nights"]["default"], 3);
    assert_eq!(tool.parameters()["required"], serde_json::json!(["city"]));
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new("c1", "plan_trip", r#"{"city": "Kyoto"}"#)]),
        ScriptedResponse::text("Planned."),
    ]);
    let session = Session::builder().llm(llm).start(Agent::new("a", "i").tool(tool)).await.unwrap();
    session.user_turn("plan").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    let output = history.iter().find_map(|i| i.as_function_call_output()).unwrap();
    assert_eq!(output.output, "3 nights in Kyoto");
    session.close().await.unwrap();
}

/// A booking as the tool returns it.
#[derive(serde::Serialize)]
struct Booking {
    confirmation: String,
    seat: &'static str,
}

/// Books a seat.
#[function_tool]
async fn reserve(flight: String) -> Result<Booking, ToolError> {
    Ok(Booking { confirmation: format!("{flight}-7"), seat: "14A" })
}

/// Parses a number, with the parser's own error type.
#[function_tool]
async fn parse_number(text: String) -> Result<u32, std::num::ParseIntError> {
    text.parse()
}

#[tokio::test(start_paused = true)]
async fn any_serializable_value_and_any_error_type_can_be_returned() {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "reserve", r#"{"flight": "LH1"}"#),
            ScriptedCall::new("c2", "parse_number", r#"{"text": "42"}"#),
            ScriptedCall::new("c3", "parse_number", r#"{"text": "x"}"#),
        ]),
        ScriptedResponse::text("Done."),
    ]);
    let agent = Agent::new("a", "i").tool(reserve()).tool(parse_number());
    let session = Session::builder().llm(llm).start(agent).await.unwrap();
    session.user_turn("go").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let outputs = common::outputs(&session).await;
    assert_eq!(
        outputs,
        [r#"{"confirmation":"LH1-7","seat":"14A"}"#, "42", "An internal error occurred."]
    );
    session.close().await.unwrap();
}

/// Refund part of an order (the block of every option in docs/tools.md).
///
/// * `order_id` - The order's number.
/// * `amount` - How much to refund, in euros.
#[function_tool(
    name = "refund_order",
    description = "Refund an order.",
    cancellable,
    on_duplicate = "reject",
    duplicate_scope = ["order_id"],
    deadline = "30s",
    heartbeat = "10s",
    retry(attempts = 3, backoff = "200ms"),
    requires_approval,
    max_concurrent = 4,
    idempotent = "10m",
    note_remembered,
    ignore_on_enter
)]
async fn every_option(
    ctx: RunContext,
    order_id: String,
    #[default = 10.0] amount: f64,
) -> Result<String, ToolError> {
    ctx.update(format!("Refunding {amount} EUR on {order_id}…")).await?;
    Ok(format!("refunded {amount} EUR on {order_id}"))
}

#[test]
fn every_option_of_the_tools_page_sets_its_builder() {
    let tool = every_option();
    assert_eq!(tool.name(), "refund_order");
    assert!(tool.flags().cancellable && tool.flags().ignore_on_enter);
    assert_eq!(tool.limits().deadline, Some(std::time::Duration::from_secs(30)));
    assert_eq!(tool.retry_policy().map(|r| r.attempts), Some(3));
    let args = serde_json::json!({"order_id": "A1"}).as_object().cloned().unwrap_or_default();
    assert!(tool.needs_approval(&args));
    assert!(tool.notes_remembered());
    assert_eq!(tool.remembers_for(), Some(std::time::Duration::from_secs(600)));
    assert_eq!(tool.concurrency_limits()[0].max, 4);
}
