use colloquy::prelude::*;

/// Refund an order; `orderid` is misspelt in the scope.
#[function_tool(on_duplicate = "reject", duplicate_scope = ["orderid"])]
async fn refund(order_id: String, amount: f64) -> Result<String, ToolError> {
    Ok(format!("{order_id} {amount}"))
}

fn main() {}
