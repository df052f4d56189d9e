//! A session watched by `Metrics`: the model looks an order up (done) and tries a refund
//! (error), then the session closes and the exposition is printed, as `/metrics` serves it.
//!
//! ```text
//! cargo run -p colloquy-ops --example metrics
//! ```

use std::time::Duration;

use colloquy_actors::{Session, SessionError};
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, FunctionTool, RunContext, ToolError};
use colloquy_ops::Metrics;

/// Runs the session and returns the exposition.
pub(crate) async fn run() -> Result<String, SessionError> {
    let lookup =
        FunctionTool::new("lookup_order", "Finds an order.", |_ctx: RunContext, _: NoArgs| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, ToolError>("order 5: shipped")
        });
    let refund =
        FunctionTool::new("refund", "Refunds an order.", |_ctx: RunContext, _: NoArgs| async {
            Err::<String, _>(ToolError::new("refunds are closed today"))
        });
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "lookup_order", "{}"),
            ScriptedCall::new("c2", "refund", "{}"),
        ]),
        ScriptedResponse::text("Your order has shipped; I could not refund it today."),
    ]);
    let metrics = Metrics::new();
    let agent = Agent::new("desk", "You help with orders.").tool(lookup).tool(refund);
    let session = Session::builder().llm(llm).start(agent).await?;
    let watching = metrics.watch(&session);
    session.user_turn("Where is order 5? Refund it.").await?;
    session.wait_for_idle().await?;
    session.close().await?;
    // The watch ends with the session's event stream: every event is counted.
    let _ = watching.await;
    Ok(metrics.render())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), SessionError> {
    print!("{}", run().await?);
    Ok(())
}
