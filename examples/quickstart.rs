//! The smallest complete colloquy program: a travel agent with one tool, driven by the
//! embedded scripted LLM, its reply printed as it streams. Run it with
//! `cargo run --example quickstart`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use std::io::Write;

use colloquy::events::EventFilter;
use colloquy::prelude::*;

/// Look up the current weather in a city.
///
/// * `city` - The city to look up.
#[function_tool]
async fn lookup_weather(city: String) -> Result<String, ToolError> {
    Ok(format!("It is sunny and 22°C in {city}."))
}

/// Runs one turn, printing the reply as it streams; returns the session history and the text
/// printed.
pub(crate) async fn run() -> Result<(Vec<ChatItem>, String), SessionError> {
    let script = [
        ScriptedResponse::calls([ScriptedCall::new("c1", "lookup_weather", r#"{"city":"Paris"}"#)]),
        ScriptedResponse::text("It's sunny and 22°C in Paris today."),
    ];
    let mut builder = Session::builder().llm(ScriptedLlm::new(script)); // or OpenAi / Anthropic
    // Before `start`, so no event is missed; `ALL` adds the agent's text as it streams
    // (`subscribe()` gives every event but that).
    let mut events = builder.subscribe_to(EventFilter::ALL);
    let session = builder
        .start(Agent::new("travel", "You are a travel agent.").tool(lookup_weather()))
        .await?;
    // A chat window: the reply as it arrives, no `SpeechSink` needed.
    let printer = tokio::spawn(async move {
        let mut shown = String::new();
        while let Some(event) = events.recv().await {
            match event.kind {
                EventKind::AgentText { delta, .. } => {
                    print!("{delta}");
                    let _ = std::io::stdout().flush();
                    shown.push_str(&delta);
                }
                EventKind::SpeechDone { .. } => println!(),
                EventKind::ToolCallEnded { call_id, status, message, .. } => {
                    println!("[{} ms] {call_id} ended {status:?}: {message:?}", event.at_ms);
                }
                _ => {}
            }
        }
        shown // the stream ends when the session closes
    });
    session.user_turn("What's the weather in Paris?").await?;
    session.wait_for_idle().await?;
    let history = session.history().await?;
    session.close().await?;
    let shown = printer.await.unwrap_or_default();
    Ok((history, shown))
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    let (history, _) = run().await?;
    println!("{history:#?}");
    Ok(())
}
