//! The demo's tools, which the chat, `serve` and `node` serve too: a weather lookup and a
//! background booking.

use std::time::Duration;

use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
/// same trip gets the remembered confirmation instead of a second booking. A booking cut off
/// by a restart runs again after the resume under the same idempotency key, which a booking
/// system dedupes by: the same confirmation, never a second seat.
pub fn booking_tool(pause: Duration) -> FunctionTool {
    let trip = DuplicateScope::args(["origin", "destination", "date"]);
    booking_body(pause)
        .on_duplicate(OnDuplicate::Reject, trip)
        .idempotent(Duration::from_secs(600))
        .note_remembered()
        .on_interrupted(OnInterrupted::Rerun)
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
