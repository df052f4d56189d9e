use colloquy::prelude::*;

/// A deadline no one can read.
#[function_tool(deadline = "soon")]
async fn lookup(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {}
