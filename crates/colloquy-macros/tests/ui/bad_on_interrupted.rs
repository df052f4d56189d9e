use colloquy::prelude::*;

/// A policy no one knows.
#[function_tool(on_interrupted = "retry")]
async fn pay(amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("paid {amount_cents}"))
}

fn main() {}
