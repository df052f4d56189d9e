use colloquy::prelude::*;

/// Misspelt option.
#[function_tool(cancelable)]
async fn lookup(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {}
