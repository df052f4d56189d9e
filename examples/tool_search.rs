//! An agent with 200 tools that sees only `tool_search`: it searches (BM25), the matching
//! toolset loads for the next step of the same turn, and it calls the right tool. Driven by
//! the embedded scripted LLM, whose fallback plays a model: it searches with the user's words,
//! then calls the loaded tool whose name best matches them. Run it with
//! `cargo run --example tool_search`.
//!
//! In a host's own `Cargo.toml` this program needs:
//!
//! ```toml
//! [dependencies]
//! colloquy-agents = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! tracing-subscriber = { version = "0.3", features = ["env-filter"] } # RUST_LOG in `main`
//! ```

use colloquy::prelude::*;
use colloquy::toolsets::{SEARCH_TOOL, ToolSearch};

/// Twenty domains, each a toolset of ten tools: 200 tools behind one search tool.
const DOMAINS: [(&str, &str); 20] = [
    ("flight", "a flight between two airports"),
    ("hotel", "a hotel room in a city"),
    ("car", "a rental car at a pickup location"),
    ("train", "a train ticket between two stations"),
    ("restaurant", "a restaurant table for a party"),
    ("invoice", "a customer invoice and its payment"),
    ("subscription", "a customer subscription plan"),
    ("refund", "a refund for an order"),
    ("order", "an online shop order"),
    ("parcel", "a parcel shipment and its tracking"),
    ("appointment", "a doctor appointment slot"),
    ("prescription", "a medical prescription"),
    ("weather", "the weather forecast for a city"),
    ("stock", "a stock quote for a ticker symbol"),
    ("currency", "a currency exchange rate"),
    ("calendar", "a calendar meeting with attendees"),
    ("email", "an email message in the mailbox"),
    ("ticket", "a support ticket for a customer issue"),
    ("account", "a user account profile and password"),
    ("loyalty", "loyalty points on a member card"),
];

const ACTIONS: [(&str, &str); 10] = [
    ("search", "Search for"),
    ("get", "Get the details of"),
    ("create", "Create"),
    ("update", "Update"),
    ("cancel", "Cancel"),
    ("list", "List every"),
    ("price", "Quote the price of"),
    ("status", "Check the status of"),
    ("share", "Share the summary of"),
    ("remind", "Set a reminder about"),
];

fn catalogue() -> Vec<Toolset> {
    DOMAINS
        .iter()
        .map(|(domain, what)| {
            let mut set = Toolset::new(*domain);
            for (action, verb) in ACTIONS {
                let name = format!("{action}_{domain}");
                let description = format!("{verb} {what}.");
                let parameters = json!({
                    "type": "object",
                    "properties": { "query": { "type": "string", "description": "What to act on" } },
                    "required": ["query"],
                });
                let reply = format!("{name}: done");
                let tool = FunctionTool::raw(name, description, parameters, move |_ctx, args| {
                    let reply = format!("{reply} for {}", args["query"]);
                    async move { Ok::<_, ToolError>(reply) }
                })
                .expect("an object schema");
                set = set.tool(tool);
            }
            set
        })
        .collect()
}

/// The scripted model: searches with the user's words, calls the loaded tool whose name shares
/// the most words with them, then answers with its result.
fn model() -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(|i, request| {
        let items = request.items.items();
        let last = items.last().map(|item| &**item);
        let user = items.iter().rev().find_map(|item| item.as_message()).map(|m| m.text.clone());
        let words: Vec<String> =
            user.unwrap_or_default().split_whitespace().map(str::to_lowercase).collect();
        let matches = |name: &str| name.split('_').filter(|p| words.iter().any(|w| w == p)).count();
        match last {
            Some(ChatItem::Message(user)) => {
                let args = json!({ "query": user.text }).to_string();
                ScriptedResponse::calls([ScriptedCall::new(format!("s{i}"), SEARCH_TOOL, args)])
            }
            Some(ChatItem::FunctionCallOutput(out)) if out.name == SEARCH_TOOL => {
                let loaded = request.tools.iter().filter(|t| t.name != SEARCH_TOOL);
                // The best match; the first of equals (max_by_key keeps the last).
                let tool = loaded.rev().max_by_key(|t| matches(&t.name));
                let Some(tool) = tool else {
                    return ScriptedResponse::text("I could not find a tool for that.");
                };
                let args = json!({ "query": "the user's request" }).to_string();
                ScriptedResponse::calls([ScriptedCall::new(
                    format!("c{i}"),
                    tool.name.clone(),
                    args,
                )])
            }
            Some(ChatItem::FunctionCallOutput(out)) => {
                ScriptedResponse::text(format!("Done: {}", out.output))
            }
            _ => ScriptedResponse::text("How can I help?"),
        }
    })
}

/// One turn; returns the tools each LLM request listed and the final answer.
pub(crate) async fn run(question: &str) -> Result<(Vec<Vec<String>>, String), SessionError> {
    let mut search = ToolSearch::new("catalogue").max_results(3);
    for set in catalogue() {
        search = search.toolset(set);
    }
    let search = search.build();
    let llm = model().recording();
    let agent = Agent::new("assistant", "Search for the tools you need.").toolset(search.toolset());
    let session = Session::builder().llm(llm.clone()).start(agent).await?;
    session.user_turn(question).await?;
    session.wait_for_idle().await?;
    let history = session.history().await?;
    session.close().await?;
    let tools = llm.requests().iter().map(|r| r.tools.clone()).collect();
    let answer = history.iter().rev().find_map(|i| i.as_message()).map(|m| m.text.clone());
    Ok((tools, answer.unwrap_or_default()))
}

#[tokio::main]
async fn main() -> Result<(), SessionError> {
    tracing_subscriber::fmt::init(); // RUST_LOG=debug shows the runtime's logs
    let (tools, answer) = run("cancel my hotel room booking").await?;
    for (i, listed) in tools.iter().enumerate() {
        println!("request {i}: {} tools visible: {listed:?}", listed.len());
    }
    println!("answer: {answer}");
    Ok(())
}
