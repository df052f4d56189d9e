//! ToolSearchToolset in a session (docs/scenarios.md C-80, C-81, C-83's loaded sources, C-87).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use colloquy::prelude::*;
use colloquy::toolsets::{
    BoxFuture, KeywordStrategy, SearchItem, SearchStrategy, SyncSearchStrategy, ToolSearch,
};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

#[derive(Deserialize, JsonSchema)]
struct Symbol {
    symbol: String,
}

#[derive(Deserialize, JsonSchema)]
struct Query {
    query: String,
}

#[derive(Deserialize, JsonSchema)]
struct Expression {
    expression: String,
}

fn weather() -> Toolset {
    Toolset::new("Weather")
        .tool(FunctionTool::new(
            "weather_tool",
            "Get weather for a city",
            |_c, a: City| async move { Ok::<_, ToolError>(format!("sunny in {}", a.city)) },
        ))
        .tool(FunctionTool::new(
            "forecast_tool",
            "Get weather forecast for a city",
            |_c, a: City| async move { Ok::<_, ToolError>(format!("rain in {}", a.city)) },
        ))
}

fn finance() -> Toolset {
    Toolset::new("Finance").tool(FunctionTool::new(
        "stock_tool",
        "Get stock price for a symbol",
        |_c, a: Symbol| async move { Ok::<_, ToolError>(format!("{} is up", a.symbol)) },
    ))
}

fn academic() -> Toolset {
    Toolset::new("Academic").tool(FunctionTool::new(
        "search_papers",
        "Search academic papers on arxiv",
        |_c, a: Query| async move { Ok::<_, ToolError>(format!("papers on {}", a.query)) },
    ))
}

fn calculator() -> FunctionTool {
    FunctionTool::new("calculator", "Calculate a math expression", |_c, a: Expression| async move {
        Ok::<_, ToolError>(format!("{} = 42", a.expression))
    })
}

fn tools_of(request: &colloquy::llm::RecordedRequest) -> Vec<String> {
    request.tools.clone()
}

#[tokio::test(start_paused = true)]
async fn c80_c81_loaded_tools_are_visible_in_the_same_turn_and_errors_keep_them() {
    let search = ToolSearch::new("search").toolset(weather()).toolset(finance()).build();
    let script = vec![
        call("s1", "tool_search", r#"{"query":"weather"}"#),
        call("f1", "forecast_tool", r#"{"city":"Oslo"}"#),
        text("done"),
        ScriptedResponse::calls([
            ScriptedCall::new("s2", "tool_search", r#"{"query":"xyz"}"#),
            ScriptedCall::new("s3", "tool_search", r#"{"query":""}"#),
            ScriptedCall::new("s4", "tool_search", "{}"),
            ScriptedCall::new("x1", "stock_tool", r#"{"symbol":"ACME"}"#),
        ]),
        text("still there"),
    ];
    let h = Harness::start(Agent::new("A", "inst").toolset(search.toolset()), script).await;
    h.turn("weather in Oslo?").await;
    let reqs = h.requests();
    assert_eq!(tools_of(&reqs[0]), ["tool_search"]);
    // The whole Weather toolset, in the very next step of the same turn; never Finance.
    assert_eq!(tools_of(&reqs[1]), ["tool_search", "weather_tool", "forecast_tool"]);
    assert_eq!(tools_of(&reqs[2]), ["tool_search", "weather_tool", "forecast_tool"]);
    let ctx = h.ctx("A").await;
    assert!(ctx.contains(&r#"out(#s1,"Tools loaded successfully.",ok,rr=T)"#.to_string()));
    assert!(ctx.contains(&r#"out(#f1,"rain in Oslo",ok,rr=T)"#.to_string()), "{ctx:?}");

    h.turn("more").await;
    let ctx = h.ctx("A").await;
    for expected in [
        r#"out(#s2,"No tools found matching 'xyz'.",ERR,rr=T)"#,
        r#"out(#s3,"query cannot be empty",ERR,rr=T)"#,
        r#"out(#s4,"query cannot be empty",ERR,rr=T)"#,
    ] {
        assert!(ctx.contains(&expected.to_string()), "{expected} in {ctx:?}");
    }
    // A tool that is not loaded cannot be called: it is unknown to the model.
    let x1 = ctx.iter().find(|i| i.starts_with("out(#x1,")).unwrap();
    assert!(x1.contains("ERR") && x1.contains("stock_tool"), "{x1}");
    let reqs = h.requests();
    assert_eq!(tools_of(reqs.last().unwrap()), ["tool_search", "weather_tool", "forecast_tool"]);
    assert_eq!(search.loaded(), ["weather_tool", "forecast_tool"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c83_searches_load_sources_in_rank_order() {
    let search = ToolSearch::new("search")
        .toolset(weather())
        .toolset(finance())
        .toolset(academic())
        .tool(calculator())
        .build();
    let cases: [(&str, &[&str]); 5] = [
        ("weather", &["weather_tool", "forecast_tool"]),
        ("weather stock", &["stock_tool", "weather_tool", "forecast_tool"]),
        ("tool", &["weather_tool", "forecast_tool", "stock_tool"]),
        ("weather forecast calculator", &["weather_tool", "forecast_tool", "calculator"]),
        ("a", &["calculator", "weather_tool", "forecast_tool", "stock_tool"]),
    ];
    for (query, loaded) in cases {
        assert_eq!(search.search(query).await.unwrap(), loaded, "{query}");
    }
    // Whitespace is not empty: it finds nothing, and the loaded set stays.
    let err = search.search("   ").await.unwrap_err();
    assert_eq!(err.message(), "No tools found matching '   '.");
    assert_eq!(search.loaded(), ["calculator", "weather_tool", "forecast_tool", "stock_tool"]);
}

/// A synchronous custom strategy: returns every item whose name contains the query, without
/// any limit; counts how often it indexes.
#[derive(Default)]
struct Contains {
    builds: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

impl SyncSearchStrategy for Contains {
    fn build_index(&mut self, _items: &[SearchItem]) {
        self.builds.fetch_add(1, Ordering::SeqCst);
    }
    fn search(&self, query: &str, items: &[SearchItem], _max: usize) -> Vec<usize> {
        (0..items.len()).filter(|&i| items[i].name.contains(query)).collect()
    }
    fn cleanup(&mut self) {
        self.cleanups.fetch_add(1, Ordering::SeqCst);
    }
}

/// An asynchronous custom strategy wrapping keyword scoring.
struct Later(KeywordStrategy);

impl SearchStrategy for Later {
    fn build_index<'a>(&'a mut self, items: &'a [SearchItem]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            SyncSearchStrategy::build_index(&mut self.0, items);
        })
    }
    fn search<'a>(
        &'a self,
        query: &'a str,
        items: &'a [SearchItem],
        max: usize,
    ) -> BoxFuture<'a, Vec<usize>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            SyncSearchStrategy::search(&self.0, query, items, max)
        })
    }
    fn cleanup(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async { SyncSearchStrategy::cleanup(&mut self.0) })
    }
}

#[tokio::test(start_paused = true)]
async fn c87_custom_strategies_setup_reload_close_and_nested_toolsets() {
    let contains = Contains::default();
    let (builds, cleanups) = (Arc::clone(&contains.builds), Arc::clone(&contains.cleanups));
    // Nested: OuterToolset holds Weather and the calculator; any match loads all three.
    let outer = Toolset::new("Outer").toolset(weather()).tool(calculator());
    let search = ToolSearch::new("search")
        .toolset(outer)
        .toolset(finance())
        .max_results(1)
        .strategy(contains)
        .build();
    search.setup(false).await;
    search.setup(false).await;
    assert_eq!(builds.load(Ordering::SeqCst), 1, "setup indexes once");
    search.setup(true).await;
    assert_eq!(builds.load(Ordering::SeqCst), 2, "reload indexes again");
    // No truncation of a custom strategy's results (max_results is 1).
    assert_eq!(
        search.search("_tool").await.unwrap(),
        ["calculator", "weather_tool", "forecast_tool", "stock_tool"]
    );
    search.close().await;
    assert_eq!(cleanups.load(Ordering::SeqCst), 1);
    assert!(search.loaded().is_empty());
    // After close the next search sets up again.
    assert_eq!(
        search.search("calc").await.unwrap(),
        ["calculator", "weather_tool", "forecast_tool"]
    );
    assert_eq!(builds.load(Ordering::SeqCst), 3);

    let asynchronous = ToolSearch::new("s2")
        .toolset(weather())
        .tool(calculator())
        .strategy(Later(KeywordStrategy::default()))
        .build();
    assert_eq!(asynchronous.search("calculate").await.unwrap(), ["calculator"]);
    asynchronous.close().await;
}
