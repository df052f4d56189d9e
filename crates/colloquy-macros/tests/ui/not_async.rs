use colloquy::prelude::*;

/// Not async.
#[function_tool]
fn lookup(city: String) -> Result<String, ToolError> {
    Ok(city)
}

fn main() {}
