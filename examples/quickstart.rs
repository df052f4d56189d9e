//! The smallest complete colloquy program: a travel agent with one tool, driven by the
//! embedded scripted LLM. Run it with `cargo run --example quickstart`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use colloquy::prelude::*;

/// Look up the current weather in a city.
///
/// * `city` - The city to look up.
#[function_tool]
async fn lookup_weather(city: String) -> Result<String, ToolError> {
    Ok(format!("It is sunny and 22°C in {city}."))
}

/// Runs one turn and returns the session history.
pub async fn run() -> Result<Vec<ChatItem>, SessionError> {
    let script = [
        ScriptedResponse::calls([ScriptedCall::new("c1", "lookup_weather", r#"{"city":"Paris"}"#)]),
        ScriptedResponse::text("It's sunny and 22°C in Paris today."),
    ];
    let session = Session::builder()
        .llm(ScriptedLlm::new(script)) // the embedded default; or OpenAi / Anthropic
        .start(Agent::new("travel", "You are a travel agent.").tool(lookup_weather()))
        .await?;
    let mut events = session.subscribe(); // lossless stream of SessionEvent
    session.user_turn("What's the weather in Paris?").await?;
    session.wait_for_idle().await?;
    let history = session.history().await?;
    session.close().await?;
    while let Some(event) = events.recv().await {
        if let EventKind::ToolCallEnded { call_id, status, message, .. } = event.kind {
            println!("[{} ms] {call_id} ended {status:?}: {message:?}", event.at_ms);
        }
    }
    Ok(history)
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    let history = run().await?;
    println!("{history:#?}");
    Ok(())
}
