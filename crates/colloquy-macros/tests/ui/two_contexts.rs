use colloquy::prelude::*;

/// Two contexts.
#[function_tool]
async fn lookup(a: RunContext, city: String, b: RunContext) -> Result<String, ToolError> {
    let _ = (a, b);
    Ok(city)
}

fn main() {}
