//! Tools as methods of an agent type (`#[function_tools]` on the `impl` block): every call
//! reaches the value the tools share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

mod common;

use colloquy::prelude::*;

/// A travel desk whose bookings share one counter (a database pool, in a real agent).
struct TravelDesk {
    bookings: AtomicU32,
}

#[function_tools]
impl TravelDesk {
    /// Book a seat.
    ///
    /// * `city` - Where to.
    #[function_tool(cancellable)]
    async fn book(&self, city: String, ctx: RunContext) -> Result<String, ToolError> {
        let _ = ctx.call_id();
        let n = self.bookings.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("booking {n}: {city}"))
    }

    /// How many bookings so far.
    #[function_tool(name = "count_bookings")]
    async fn count(&self) -> Result<String, ToolError> {
        Ok(self.bookings.load(Ordering::SeqCst).to_string())
    }

    /// Not a tool: stays an ordinary method.
    fn reset(&self) {
        self.bookings.store(0, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn method_tools_share_the_agents_state_across_calls() {
    let desk = Arc::new(TravelDesk { bookings: AtomicU32::new(0) });
    let tools = Arc::clone(&desk).tools();
    let names: Vec<&str> = tools.iter().map(FunctionTool::name).collect();
    assert_eq!(names, ["book", "count_bookings"]);
    assert!(tools[0].flags().cancellable);
    assert_eq!(tools[0].description(), "Book a seat.");
    assert_eq!(tools[0].parameters()["properties"]["city"]["description"], "Where to.");
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([ScriptedCall::new("c1", "book", r#"{"city": "Rome"}"#)]),
        ScriptedResponse::text("Booked."),
        ScriptedResponse::calls([
            ScriptedCall::new("c2", "book", r#"{"city": "Lima"}"#),
            ScriptedCall::new("c3", "count_bookings", "{}"),
        ]),
        ScriptedResponse::text("Two bookings."),
    ]);
    let session =
        Session::builder().llm(llm).start(Agent::new("desk", "inst").tools(tools)).await.unwrap();
    session.user_turn("book Rome").await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.user_turn("and Lima").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let outputs = common::outputs(&session).await;
    assert_eq!(outputs[0], "booking 1: Rome");
    assert_eq!(outputs[1], "booking 2: Lima");
    assert_eq!(desk.bookings.load(Ordering::SeqCst), 2, "the host's value saw both calls");
    desk.reset();
    assert_eq!(desk.bookings.load(Ordering::SeqCst), 0);
    session.close().await.unwrap();
}
