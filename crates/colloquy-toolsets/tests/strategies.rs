//! The strategies, number for number against the reference (docs/scenarios.md C-83, C-85).

use colloquy_model::{FunctionTool, Toolset};
use colloquy_toolsets::{
    Bm25Strategy, KeywordStrategy, SearchEntry, SearchItem, SyncSearchStrategy, items,
};
use serde_json::json;

fn item(name: &str, description: &str, parameters: &[(&str, &str)]) -> SearchItem {
    SearchItem {
        name: name.into(),
        description: description.into(),
        parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        source: 0,
    }
}

/// C-85's five items.
fn five() -> Vec<SearchItem> {
    vec![
        item("get_weather", "Get current weather for a city", &[("city", "City name")]),
        item(
            "get_forecast",
            "Get weather forecast for upcoming days",
            &[("city", "City name"), ("days", "Number of days")],
        ),
        item(
            "get_stock_price",
            "Get stock price for a symbol",
            &[("symbol", "Stock ticker symbol")],
        ),
        item("search_papers", "Search academic papers on arxiv", &[("query", "Search query")]),
        item("calculator", "Calculate a math expression", &[("expression", "Math expression")]),
    ]
}

/// `(name, score rounded to 4 decimals)` of the results.
fn ranked(
    bm25: &Bm25Strategy,
    items: &[SearchItem],
    query: &str,
    max: usize,
) -> Vec<(String, f64)> {
    let scores = bm25.scores(query);
    bm25.search(query, items, max)
        .into_iter()
        .map(|i| (items[i].name.clone(), (scores[i] * 10_000.0).round() / 10_000.0))
        .collect()
}

fn pairs(list: &[(&str, f64)]) -> Vec<(String, f64)> {
    list.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

#[test]
fn c85_bm25_on_the_five_item_catalogue() {
    let items = five();
    let mut bm25 = Bm25Strategy::default();
    bm25.build_index(&items);
    assert_eq!(bm25.lengths(), [21, 25, 25, 19, 14]);
    assert!((bm25.avgdl() - 20.8).abs() < 1e-9);
    let r = |q: &str, max: usize| ranked(&bm25, &items, q, max);
    assert_eq!(r("weather", 5), pairs(&[("get_weather", 1.6808), ("get_forecast", 1.1744)]));
    assert_eq!(
        r("weather forecast", 5),
        pairs(&[("get_forecast", 3.7504), ("get_weather", 1.6808)])
    );
    assert_eq!(r("get", 2), pairs(&[("get_weather", 1.0348), ("get_forecast", 1.0015)]));
    assert_eq!(
        r("get", 5),
        pairs(&[("get_weather", 1.0348), ("get_forecast", 1.0015), ("get_stock_price", 1.0015)])
    );
    assert_eq!(
        r("get_weather", 5),
        pairs(&[("get_weather", 2.7156), ("get_forecast", 2.1760), ("get_stock_price", 1.0015)])
    );
    assert_eq!(r("ticker symbol", 5), pairs(&[("get_stock_price", 3.6914)]));
    assert_eq!(r("academic papers arxiv", 5)[0], ("search_papers".to_string(), 6.7807));
    assert_eq!(r("calculator", 5)[0], ("calculator".to_string(), 2.5161));
    assert_eq!(r("stock price", 5)[0], ("get_stock_price".to_string(), 5.2670));
    assert!(r("Weather.", 5).is_empty(), "punctuation is part of a token");
    assert_eq!(
        r("weather weather", 5),
        pairs(&[("get_weather", 3.3616), ("get_forecast", 2.3489)]),
        "a repeated query term counts twice"
    );
    assert!(r("", 5).is_empty());
    bm25.cleanup();
    assert!(bm25.search("weather", &items, 5).is_empty());
}

fn tool(name: &str, description: &str, param: &str) -> FunctionTool {
    let schema = json!({
        "type": "object",
        "properties": { param: { "type": "string" } },
        "required": [param],
    });
    FunctionTool::raw(name, description, schema, |_ctx, _args| async { Ok("ok") }).unwrap()
}

/// Catalogue T of docs/scenarios.md §M.
pub fn catalogue_t() -> Vec<SearchEntry> {
    let weather = Toolset::new("Weather")
        .tool(tool("weather_tool", "Get weather for a city", "city"))
        .tool(tool("forecast_tool", "Get weather forecast for a city", "city"));
    let finance =
        Toolset::new("Finance").tool(tool("stock_tool", "Get stock price for a symbol", "symbol"));
    let academic = Toolset::new("Academic").tool(tool(
        "search_papers",
        "Search academic papers on arxiv",
        "query",
    ));
    let calculator = tool("calculator", "Calculate a math expression", "expression");
    vec![weather.into(), finance.into(), academic.into(), calculator.into()]
}

#[test]
fn c83_bm25_on_catalogue_t() {
    let items = items(&catalogue_t());
    assert_eq!(items.iter().map(|i| i.source).collect::<Vec<_>>(), [0, 0, 1, 2, 3]);
    let mut bm25 = Bm25Strategy::default();
    bm25.build_index(&items);
    assert_eq!(bm25.lengths(), [17, 19, 19, 17, 12]);
    assert!((bm25.avgdl() - 16.8).abs() < 1e-9);
    let idf = |t: &str| (bm25.idf(t).unwrap() * 10_000.0).round() / 10_000.0;
    assert_eq!(
        (idf("weather"), idf("tool"), idf("get"), idf("for")),
        (0.8755, 0.5390, 0.5390, 0.5390)
    );
    assert_eq!((idf("a"), idf("arxiv")), (0.2877, 1.3863));
    let r = |q: &str| ranked(&bm25, &items, q, 5);
    assert_eq!(r("weather"), pairs(&[("weather_tool", 1.6801), ("forecast_tool", 1.2002)]));
    assert_eq!(
        r("weather stock"),
        pairs(&[("stock_tool", 2.6069), ("weather_tool", 1.6801), ("forecast_tool", 1.2002)])
    );
    assert_eq!(
        r("tool"),
        pairs(&[("weather_tool", 0.8957), ("forecast_tool", 0.8699), ("stock_tool", 0.8699)])
    );
    assert_eq!(
        r("weather forecast calculator"),
        pairs(&[("forecast_tool", 3.8070), ("calculator", 2.4882), ("weather_tool", 1.6801)])
    );
    assert_eq!(
        r("a"),
        pairs(&[
            ("calculator", 0.4525),
            ("weather_tool", 0.4094),
            ("forecast_tool", 0.3944),
            ("stock_tool", 0.3944)
        ])
    );
}

#[test]
fn keyword_scoring_weighs_name_description_and_parameters() {
    let items = five();
    let mut kw = KeywordStrategy::default();
    kw.build_index(&items);
    // "weather": name (3) and description (2) of get_weather, the forecast's description only.
    assert_eq!(kw.scores("weather", &items), [5.0, 2.0, 0.0, 0.0, 0.0]);
    // Duplicated keywords count once: "city" is in get_weather's description and parameters
    // (2 + 1) and the forecast's parameters (1), "days" in the forecast's description and
    // parameters (2 + 1).
    assert_eq!(kw.scores("city city days", &items), [3.0, 4.0, 0.0, 0.0, 0.0]);
    // A keyword is a regular expression…
    assert_eq!(kw.search("^get_(stock|weather)", &items, 5), [0, 2]);
    // …or a literal when it is not a valid one.
    assert!(kw.search("(", &items, 5).is_empty());
    assert_eq!(kw.search("stock price", &items, 1), [2]);
    // Unindexed items are indexed lazily.
    kw.cleanup();
    assert_eq!(kw.search("calculate", &items, 5), [4]);
}
