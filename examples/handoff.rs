//! A receptionist hands the caller to billing while a session-scoped account lookup keeps
//! running; the lookup's result is reported by billing. Run it with
//! `cargo run --example handoff`.
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

use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Account {
    /// The caller's account number.
    account: String,
}

/// Session-scoped: it survives the handoff and reports to whichever agent is current.
fn account_lookup() -> Toolset {
    Toolset::new_async("accounts").tool(FunctionTool::new(
        "lookup_account",
        "Look up a caller's account history.",
        |ctx: RunContext, a: Account| async move {
            ctx.update(format!("Pulling up account {}…", a.account)).await?;
            tokio::time::sleep(Duration::from_millis(1500)).await; // a slow back office
            Ok::<_, ToolError>(format!("account {}: 2 unpaid invoices, 120 EUR", a.account))
        },
    ))
}

fn billing() -> Agent {
    Agent::new("billing", "You are the billing specialist.")
        .on_enter_reply("Introduce yourself as billing.")
}

fn receptionist() -> Agent {
    Agent::new("receptionist", "You greet callers and route them.").tool(FunctionTool::new(
        "transfer_to_billing",
        "Transfer the caller to billing.",
        |_ctx: RunContext, _a: colloquy::tools::NoArgs| async move {
            Ok::<_, ToolError>(Handoff::to(billing()))
        },
    ))
}

/// Plays the call; returns who said what, in order.
pub(crate) async fn run() -> Result<Vec<String>, SessionError> {
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new(
            "c1",
            "lookup_account",
            r#"{"account":"A-17"}"#,
        )]),
        ScriptedResponse::text("I'm pulling up your account."),
        ScriptedResponse::calls([ScriptedCall::new("c2", "transfer_to_billing", "{}")]),
        ScriptedResponse::text("Hi, billing here. Let me see your account."),
        ScriptedResponse::text("Your account has two unpaid invoices, 120 EUR in total."),
    ]);
    let session =
        Session::builder().llm(llm).toolset(account_lookup()).start(receptionist()).await?;
    session.user_turn("Hi, my account is A-17.").await?;
    session.wait_for_idle().await?;
    session.user_turn("I have a question about an invoice.").await?;
    session.wait_for_quiet().await?;
    session.wait_for_idle().await?;
    let history = session.history().await?;
    session.close().await?;
    let mut agent = String::new();
    let mut lines = Vec::new();
    for item in history {
        match item {
            ChatItem::AgentHandoff(h) => agent = h.new_agent,
            ChatItem::Message(m) if m.role == Role::User => lines.push(format!("user: {}", m.text)),
            ChatItem::Message(m) => lines.push(format!("{agent}: {}", m.text)),
            _ => {}
        }
    }
    Ok(lines)
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    for line in run().await? {
        println!("{line}");
    }
    Ok(())
}
