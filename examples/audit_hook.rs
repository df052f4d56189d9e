//! One `Host`, two sessions, one audit hook: every tool call of either session passes the same
//! `before_tool_call` hook, which logs the session it belongs to (`PendingToolCall::session_id`)
//! beside the call. Both models use the call id `c1`: the session id is what tells the two
//! calls apart in the log. Run it with `cargo run --example audit_hook`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "time"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use std::sync::{Arc, Mutex};

use colloquy::prelude::*;

/// Look up where an order is.
///
/// * `order_id` - The order's number.
#[function_tool]
async fn order_status(order_id: String) -> Result<String, ToolError> {
    Ok(format!("order {order_id} has shipped"))
}

/// A scripted model that looks `order` up, then answers.
fn model(order: &str) -> ScriptedLlm {
    ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new(
            "c1",
            "order_status",
            format!(r#"{{"order_id":"{order}"}}"#),
        )]),
        ScriptedResponse::text(format!("Your order {order} has shipped.")),
    ])
}

/// Runs one turn in each of two sessions of one host; returns the audit log, one line per
/// call (`SESSION CALL TOOL ARGUMENTS`), and the two session ids.
pub(crate) async fn run() -> Result<(Vec<String>, [String; 2]), SessionError> {
    let host = Host::new().await?;
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    // One hook for every session: a clone per session, all writing to the same log.
    let audit = {
        let log = Arc::clone(&log);
        move |call: PendingToolCall| {
            let log = Arc::clone(&log);
            async move {
                let arguments = Value::Object(call.arguments.clone());
                let line =
                    format!("{} {} {} {arguments}", call.session_id, call.call_id, call.name);
                log.lock().map_err(|_| ToolError::internal("audit log poisoned"))?.push(line);
                Ok::<_, ToolError>(BeforeCall::Run)
            }
        }
    };
    let mut ids = Vec::new();
    for order in ["A-1", "B-2"] {
        let session = Session::builder()
            .host(&host)
            .llm(model(order))
            .before_tool_call(audit.clone())
            .start(Agent::new("support", "You answer questions about orders.").tool(order_status()))
            .await?;
        session.user_turn(format!("Where is my order {order}?")).await?;
        session.wait_for_idle().await?;
        ids.push(session.id().to_string());
    }
    host.close_all("done").await;
    let lines = log.lock().map(|lines| lines.clone()).unwrap_or_default();
    Ok((lines, [ids[0].clone(), ids[1].clone()]))
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    let (lines, _) = run().await?;
    for line in lines {
        println!("audit › {line}");
    }
    Ok(())
}
