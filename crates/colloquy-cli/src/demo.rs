//! The built-in demo: a travel agent with a weather tool and a booking tool, on the scripted
//! LLM. No network, no keys.

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use colloquy::llm::ScriptedCall;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::transcript::Transcript;

/// Arguments of `get_weather`.
#[derive(Deserialize, JsonSchema)]
pub struct WeatherArgs {
    /// City name.
    pub city: String,
    /// How many days of forecast (1-7).
    #[serde(default = "one_day")]
    #[schemars(range(min = 1, max = 7))]
    pub days: u32,
}

fn one_day() -> u32 {
    1
}

/// Arguments of `book_flight`.
#[derive(Deserialize, JsonSchema)]
pub struct BookingArgs {
    /// Departure city.
    pub origin: String,
    /// Arrival city.
    pub destination: String,
    /// Day of travel.
    pub date: String,
}

#[derive(Serialize)]
struct Booking {
    confirmation: String,
    departs: &'static str,
    seat: &'static str,
}

/// A weather tool with canned forecasts; it takes `pause` to answer.
pub fn weather_tool(pause: Duration) -> FunctionTool {
    FunctionTool::new(
        "get_weather",
        "Get the weather forecast for a city.",
        move |_ctx: RunContext, args: WeatherArgs| async move {
            tokio::time::sleep(pause).await;
            let days = ["sunny, 24°C", "light rain, 19°C", "cloudy, 21°C"];
            let forecast: Vec<String> = days
                .iter()
                .cycle()
                .take(args.days as usize)
                .enumerate()
                .map(|(i, d)| format!("day {}: {d}", i + 1))
                .collect();
            Ok::<_, ToolError>(format!("{}: {}", args.city, forecast.join("; ")))
        },
    )
}

/// A background booking tool: it narrates its progress with `ctx.update()` while it works,
/// each step taking `pause`. A booking is done once: while one runs, the same trip is refused
/// (the model reads that it is already running), and for ten minutes after it ended `done` the
/// same trip gets the remembered confirmation instead of a second booking.
pub fn booking_tool(pause: Duration) -> FunctionTool {
    let trip = DuplicateScope::args(["origin", "destination", "date"]);
    booking_body(pause)
        .on_duplicate(OnDuplicate::Reject, trip)
        .idempotent(Duration::from_secs(600))
        .note_remembered()
}

fn booking_body(pause: Duration) -> FunctionTool {
    FunctionTool::new(
        "book_flight",
        "Book a flight between two cities on a given day.",
        move |ctx: RunContext, args: BookingArgs| async move {
            if args.origin.eq_ignore_ascii_case(&args.destination) {
                return Err(ToolError::new("origin and destination are the same city"));
            }
            let route = format!("{} to {}", args.origin, args.destination);
            ctx.update(format!("Searching {} flights from {route}…", args.date)).await?;
            tokio::time::sleep(pause).await;
            ctx.update("Found 3 flights; holding a window seat on the 08:15…").await?;
            tokio::time::sleep(pause).await;
            let confirmation = format!("CQ-{}", 4800 + ctx.call_id().len() * 7);
            Ok(Json(Booking { confirmation, departs: "08:15", seat: "14A" }))
        },
    )
}

/// The travel agent; it ends the call itself once the user says goodbye.
pub fn travel_agent(pause: Duration) -> Agent {
    Agent::new("travel", "You are a friendly travel agent. Use tools to check and book.")
        .tool(weather_tool(pause))
        .tool(booking_tool(pause * 2))
        .toolset(colloquy::toolsets::EndCallTool::new().toolset())
}

/// What the user says, turn by turn.
pub const USER_TURNS: [&str; 3] = [
    "What's the weather in Paris this weekend?",
    "Lovely. Book me a flight from London to Paris on Saturday.",
    "Perfect, thanks. Bye!",
];

/// The scripted model's answers, in request order.
pub fn script(latency: Duration) -> Vec<ScriptedResponse> {
    let at = |r: ScriptedResponse| r.with_latency(latency);
    vec![
        at(ScriptedResponse::text("Let me check the forecast for Paris.").with_call(
            ScriptedCall::new("call_weather", "get_weather", r#"{"city":"Paris","days":2}"#),
        )),
        at(ScriptedResponse::text(
            "Saturday looks sunny at 24°C; Sunday brings light rain and 19°C. Pack a light jacket!",
        )),
        at(ScriptedResponse::text("Booking that for you now.").with_call(ScriptedCall::new(
            "call_booking",
            "book_flight",
            r#"{"origin":"London","destination":"Paris","date":"Saturday"}"#,
        ))),
        at(ScriptedResponse::text("I'm searching flights now; I'll keep you posted.")),
        at(ScriptedResponse::text(
            "Good news: I found three flights and I'm holding a window seat.",
        )),
        at(ScriptedResponse::text(
            "You're booked on Saturday's 08:15 from London to Paris, seat 14A. Your confirmation is CQ-4884.",
        )),
        at(ScriptedResponse::calls([ScriptedCall::new("call_end", "end_call", "{}")])),
        at(ScriptedResponse::text("Have a wonderful trip to Paris. Goodbye!")),
    ]
}

/// Plays the demo, writing the transcript to `out` as the events arrive. `pace` scales every
/// simulated delay (zero for `--fast`).
pub async fn run(out: impl Write, color: bool, pace: Duration) -> Result<(), Box<dyn Error>> {
    let mut transcript = Transcript::new(out, color);
    transcript
        .heading("colloquy demo: a travel agent on the scripted LLM (no network, no keys)")?;
    let mut builder = Session::builder().llm(ScriptedLlm::new(script(pace * 3)));
    let mut events = builder.subscribe();
    let session = builder.start(travel_agent(pace * 4)).await?;
    let conversation = async {
        for turn in USER_TURNS {
            // The user takes a moment to type.
            tokio::time::sleep(pace * 3).await;
            session.user_turn(turn).await?;
            // Background tools keep working after the reply: wait for them and their news.
            // The agent ends the call after the goodbye: then the waits fail, as it closes.
            if session.wait_for_quiet().await.is_err() || session.wait_for_idle().await.is_err() {
                break;
            }
        }
        session.close().await // already closed by the agent: nothing to do
    };
    tokio::pin!(conversation);
    let mut talking = true;
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => transcript.event(&event)?,
                None => break, // the session closed and every event was printed
            },
            result = &mut conversation, if talking => {
                result?;
                talking = false;
            }
        }
    }
    // The stream ends when the session has closed; its actors may still be stopping, and
    // `close` returns only once they have: finish it, so nothing is cut off at exit.
    if talking {
        conversation.await?;
    }
    Ok(())
}
