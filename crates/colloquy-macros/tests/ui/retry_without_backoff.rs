use colloquy::tools::{function_tool, ToolError};

/// A retry needs its backoff.
#[function_tool(retry(attempts = 3))]
async fn lookup(id: String) -> Result<String, ToolError> {
    Ok(id)
}

fn main() {}
