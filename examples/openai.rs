//! A real model: an agent on OpenAI (or any OpenAI-compatible server) with a background
//! booking tool, printing the session's events as they happen.
//!
//! ```sh
//! export OPENAI_API_KEY=…        # or OPENAI_BASE_URL=http://127.0.0.1:8000/v1 for a local server
//! cargo run --example openai -- "Book me a flight to Tokyo"
//! ```
//!
//! `RUST_LOG=debug` shows the runtime's logs. `colloquy::anthropic::Anthropic::from_env()` in
//! place of `OpenAi::from_env()` talks to Anthropic's API instead.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "time"] }
//! serde = { version = "1", features = ["derive"] } # the argument struct
//! schemars = "1"
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use std::time::Duration;

use colloquy::llm::Llm;
use colloquy::openai::OpenAi;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `book_flight`.
#[derive(Deserialize, JsonSchema)]
struct BookFlight {
    /// The destination city.
    city: String,
}

/// Books in the background: the first update reaches the model at once, so the agent talks
/// while the booking goes on; the result is delivered when the conversation is idle.
fn book_flight() -> FunctionTool {
    FunctionTool::new(
        "book_flight",
        "Book a flight to a city.",
        |ctx: RunContext, args: BookFlight| async move {
            ctx.update(format!("Looking up flights to {}…", args.city)).await?;
            tokio::time::sleep(Duration::from_millis(300)).await; // an airline's API, say
            Ok::<_, ToolError>(format!("Booked FL-1 to {}", args.city))
        },
    )
}

/// Plays one user turn on `llm`, printing events as they come, until the booking's result
/// has been spoken; returns the agent's messages.
pub(crate) async fn run(llm: impl Llm, request: &str) -> Result<Vec<String>, SessionError> {
    let agent = Agent::new("travel", "You are a travel agent. Book flights with book_flight.")
        .tool(book_flight());
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(agent).await?;
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event.kind {
                EventKind::ConversationItemAdded { .. } | EventKind::AgentState { .. } => {}
                kind => println!("{:>6} ms  {kind:?}", event.at_ms),
            }
        }
    });
    session.user_turn(request).await?;
    session.wait_for_quiet().await?; // the tool and its news, not just the first answer
    session.wait_for_idle().await?;
    let said = session
        .history()
        .await?
        .iter()
        .filter_map(|item| item.as_message().filter(|m| m.role == Role::Assistant))
        .map(|m| m.text.clone())
        .collect();
    session.close().await?;
    let _ = printer.await;
    Ok(said)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG: errors only unless it says otherwise
    let llm = OpenAi::from_env()?; // OPENAI_API_KEY / OPENAI_BASE_URL / COLLOQUY_MODEL
    let request = std::env::args().nth(1).unwrap_or_else(|| "Book me a flight to Tokyo.".into());
    for line in run(llm, &request).await? {
        println!("agent › {line}");
    }
    Ok(())
}
