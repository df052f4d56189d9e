use colloquy::prelude::*;

/// A tuple pattern has no name to give the argument.
#[function_tool]
async fn lookup((city, country): (String, String)) -> Result<String, ToolError> {
    Ok(format!("{city}, {country}"))
}

fn main() {}
