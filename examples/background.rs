//! A background tool: the agent answers at once while the tool keeps working, then narrates
//! its progress and the result when the conversation is idle. Run it with
//! `cargo run --example background`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "time"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use colloquy::prelude::*;
use std::time::Duration;

async fn search(origin: &str, destination: &str) -> Vec<String> {
    tokio::time::sleep(Duration::from_millis(800)).await; // an airline API, say
    vec![format!("{origin}-{destination} 08:15"), "11:40".into(), "18:05".into()]
}

async fn book_best(flights: Vec<String>) -> String {
    tokio::time::sleep(Duration::from_millis(500)).await;
    format!("BK-{}", flights.len() * 1000 + 7)
}

/// Book a flight.
///
/// * `origin` - Departure city.
/// * `destination` - Arrival city.
#[function_tool]
async fn book_flight(
    ctx: RunContext,
    origin: String,
    destination: String,
) -> Result<Value, ToolError> {
    ctx.update(format!("Looking up flights from {origin} to {destination}…")).await?;
    let flights = search(&origin, &destination).await;
    ctx.update(format!("Found {} flights, picking the best one…", flights.len())).await?;
    Ok(json!({ "confirmation": book_best(flights).await }))
}

/// Plays one turn; returns the transcript of the assistant's messages.
pub(crate) async fn run() -> Result<Vec<String>, SessionError> {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new(
            "c1",
            "book_flight",
            r#"{"origin":"Paris","destination":"Tokyo"}"#,
        )]),
        ScriptedResponse::text("Sure, let me look that up."),
        ScriptedResponse::text("I found three flights and I'm picking the best one."),
        ScriptedResponse::text("You're booked! Your confirmation number is BK-3007."),
    ]);
    let session = Session::builder()
        .llm(llm)
        .start(Agent::new("travel", "You are a travel agent.").tool(book_flight()))
        .await?;
    session.user_turn("Book me a flight from Paris to Tokyo.").await?;
    session.wait_for_quiet().await?; // the tool and its news, not just the first answer
    session.wait_for_idle().await?;
    let said = session
        .history()
        .await?
        .iter()
        .filter_map(|item| item.as_message())
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.text.clone())
        .collect();
    session.close().await?;
    Ok(said)
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    for line in run().await? {
        println!("agent › {line}");
    }
    Ok(())
}
