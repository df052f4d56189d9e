//! ToolProxyToolset in a session (docs/scenarios.md C-88): a constant tool list, schemas from
//! `tool_search`, any hidden tool run inline by `call_tool`.

use crate::common::*;
use colloquy::prelude::*;
use colloquy::toolsets::ToolSearch;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

#[derive(Deserialize, JsonSchema)]
struct Forecast {
    city: String,
    days: u32,
}

fn weather() -> Toolset {
    Toolset::new("Weather")
        .tool(FunctionTool::new(
            "weather_tool",
            "Get weather for a city.",
            |_c, a: City| async move {
                if a.city == "Atlantis" {
                    return Err(ToolError::new("Atlantis has no weather service"));
                }
                Ok(format!("sunny in {}", a.city))
            },
        ))
        .tool(FunctionTool::new(
            "forecast_tool",
            "Get a forecast for a city.",
            |ctx: RunContext, a: Forecast| async move {
                ctx.update(format!("looking {} days ahead", a.days)).await?;
                Ok::<_, ToolError>(format!("{}-day forecast for {}: mostly sunny", a.days, a.city))
            },
        ))
}

fn finance() -> Toolset {
    Toolset::new("Finance").tool(FunctionTool::new(
        "stock_tool",
        "Get stock price for a symbol",
        |_c, a: City| async move { Ok::<_, ToolError>(format!("{} is up", a.city)) },
    ))
}

#[tokio::test(start_paused = true)]
async fn c88_search_returns_schemas() {
    let proxy = ToolSearch::new("proxy").toolset(weather()).toolset(finance()).build_proxy();
    let found = proxy.search("weather").await.unwrap();
    let objects: Vec<serde_json::Value> =
        found.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objects.len(), 2, "the whole Weather toolset: {found}");
    assert_eq!(objects[0]["name"], "weather_tool");
    assert!(objects[0]["description"].as_str().unwrap().contains("Get weather for a city"));
    assert_eq!(objects[0]["parameters"]["properties"]["city"]["type"], "string");
    assert_eq!(objects[1]["name"], "forecast_tool");
    assert_eq!(proxy.search("xyz").await.unwrap_err().message(), "No tools found matching 'xyz'.");
    assert_eq!(proxy.search("").await.unwrap_err().message(), "query cannot be empty");
}

#[tokio::test(start_paused = true)]
async fn c88_call_tool_runs_any_hidden_tool_inline() {
    let proxy = ToolSearch::new("proxy").toolset(weather()).toolset(finance()).build_proxy();
    let calls = [
        ("c1", r#"{"name": "forecast_tool", "parameters": {"city": "Tokyo", "days": 3}}"#),
        ("c2", r#"{"name": "nonexistent_tool", "parameters": {}}"#),
        ("c3", r#"{"name": "weather_tool", "parameters": {}}"#),
        (
            "c4",
            r#"{"name": "forecast_tool", "parameters": {"city": "Oslo", "days": "not_a_number"}}"#,
        ),
        ("c5", r#"{"name": "weather_tool", "parameters": {"city": "Atlantis"}}"#),
        ("c6", r#"{"name": "", "parameters": {}}"#),
        ("c7", r#"{"name": "weather_tool"}"#),
        ("c8", r#"{"name": "weather_tool", "parameters": 5}"#),
        ("c9", r#"{"name": "stock_tool", "parameters": "{\"city\": \"ACME\"}"}"#),
    ];
    let step = ScriptedResponse::calls(
        calls.iter().map(|(id, args)| ScriptedCall::new(*id, "call_tool", *args)),
    );
    let script =
        vec![call("s1", "tool_search", r#"{"query":"weather"}"#), step, text("ok"), text("more")];
    let mut h = Harness::start(Agent::new("A", "inst").toolset(proxy.toolset()), script).await;
    h.turn("go").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    // The tool list never changes.
    for request in h.requests() {
        assert_eq!(request.tools, ["tool_search", "call_tool"]);
    }
    let ctx = h.ctx("A").await;
    let out = |id: &str| ctx.iter().find(|i| i.starts_with(&format!("out(#{id},"))).cloned();
    // forecast_tool updated inside call_tool: the update is call_tool's first output, the
    // result its `_final` pair.
    assert_eq!(
        out("c1").unwrap(),
        format!(
            "out(#c1,{:?},ok,rr=T)",
            colloquy::templates::defaults::UPDATE
                .replace("{function_name}", "call_tool")
                .replace("{message}", "looking 3 days ahead")
        )
    );
    assert_eq!(
        out("c1_final").unwrap(),
        r#"out(#c1_final,"3-day forecast for Tokyo: mostly sunny",ok,rr=T)"#
    );
    assert_eq!(
        out("c2").unwrap(),
        r#"out(#c2,"unknown tool 'nonexistent_tool', use search_tools to discover available tools",ERR,rr=T)"#
    );
    let c3 = out("c3").unwrap();
    assert!(
        c3.contains("Error parsing arguments for `weather_tool`") && c3.contains("city: missing"),
        "{c3}"
    );
    let c4 = out("c4").unwrap();
    assert!(
        c4.contains("Error parsing arguments for `forecast_tool`") && c4.contains("days"),
        "{c4}"
    );
    assert_eq!(out("c5").unwrap(), r#"out(#c5,"Atlantis has no weather service",ERR,rr=T)"#);
    assert_eq!(out("c6").unwrap(), r#"out(#c6,"tool name cannot be empty",ERR,rr=T)"#);
    assert_eq!(out("c7").unwrap(), r#"out(#c7,"parameters is required",ERR,rr=T)"#);
    assert_eq!(
        out("c8").unwrap(),
        r#"out(#c8,"parameters must be a dictionary or a string",ERR,rr=T)"#
    );
    // Any wrapped tool can be called, searched or not; parameters may be JSON text.
    assert_eq!(out("c9").unwrap(), r#"out(#c9,"ACME is up",ok,rr=T)"#);
    let started: Vec<String> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStarted { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert!(started.iter().all(|n| n == "tool_search" || n == "call_tool"), "{started:?}");
    h.close().await;
}
