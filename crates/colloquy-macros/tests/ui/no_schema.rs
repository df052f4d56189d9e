use colloquy::prelude::*;

/// A type without a JSON schema.
struct Airport(String);

#[function_tool]
async fn lookup(airport: Airport) -> Result<String, ToolError> {
    Ok(airport.0)
}

fn main() {}
