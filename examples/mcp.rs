//! An agent with an MCP server's tools: the MCP project's reference server ("everything",
//! from npm) over stdio, its `get-sum` tool called by the embedded scripted LLM. Run it with
//! `cargo run --example mcp` (needs `npx`), or give any stdio server's command as arguments:
//! `cargo run --example mcp -- node path/to/server.js stdio`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "process"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use colloquy::mcp::McpToolset;
use colloquy::prelude::*;
use tokio::process::Command;

/// Connects to the server `command` starts, lets the model add two numbers with it, and
/// returns what the agent said.
pub(crate) async fn run(command: Command) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let server = McpToolset::stdio("everything", command).connect().await?;
    let script = [
        ScriptedResponse::calls([ScriptedCall::new("c1", "get-sum", r#"{"a": 19, "b": 23}"#)]),
        ScriptedResponse::text("19 and 23 make 42."),
    ];
    let session = Session::builder()
        .llm(ScriptedLlm::new(script)) // or OpenAi / Anthropic: the model picks the tool
        .start(Agent::new("helper", "Use the tools.").toolset(server.toolset()))
        .await?;
    session.user_turn("What is 19 + 23?").await?;
    session.wait_for_quiet().await?;
    let history = session.history().await?;
    session.close().await?;
    let said = history
        .iter()
        .filter_map(|item| match item {
            ChatItem::FunctionCallOutput(o) => Some(format!("tool: {}", o.output)),
            ChatItem::Message(m) if m.role == Role::Assistant => Some(m.text.clone()),
            _ => None,
        })
        .collect();
    Ok(said)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init(); // RUST_LOG=colloquy_mcp=debug shows the server's stderr
    let mut args = std::env::args().skip(1);
    let command = match args.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
        None => {
            let mut npx = Command::new("npx");
            npx.args(["-y", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"]);
            npx
        }
    };
    for line in run(command).await? {
        println!("{line}");
    }
    Ok(())
}
