//! The timeline page: parsed as XML, its shapes checked against the scenario's events.

use roxmltree::{Document, Node, ParsingOptions};

/// The page is XHTML-compatible: `<!DOCTYPE html>` plus well-formed markup.
fn parse(html: &str) -> Document<'_> {
    let options = ParsingOptions { allow_dtd: true, ..ParsingOptions::default() };
    Document::parse_with_options(html, options).expect("the page is well-formed")
}

fn scenario(name: &str) -> String {
    format!("{}/../../tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn with_class<'a>(doc: &'a Document, class: &str) -> Vec<Node<'a, 'a>> {
    doc.descendants()
        .filter(|n| n.attribute("class").is_some_and(|c| c.split(' ').any(|c| c == class)))
        .collect()
}

fn title(node: &Node) -> String {
    node.children()
        .find(|c| c.has_tag_name("title"))
        .and_then(|t| t.text())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_timeline_draws_speeches_calls_updates_replies_and_handoffs() {
    let trace = colloquy_scenario::run_file(scenario("c58_c59_session_scoped_across_handoff.json"))
        .expect("the scenario plays");
    let html = trace.timeline_html("C-58/C-59 <handoff>");
    // Self-contained: no script, no stylesheet or image fetched from anywhere; `url()` only
    // names something of the page's own (the labels' clip path).
    for banned in ["<script", "<link", "<img", "src=", "href="] {
        assert!(!html.contains(banned), "{banned}");
    }
    assert_eq!(html.matches("url(").count(), html.matches("url(#").count());
    let doc = parse(&html);
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "html");
    let page_title = doc.descendants().find(|n| n.has_tag_name("title")).unwrap();
    assert_eq!(page_title.text(), Some("C-58/C-59 <handoff> — colloquy timeline"));
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("svg")).count(), 1);

    // Lanes: user, agent, then one per call in start order.
    let lanes: Vec<&str> =
        with_class(&doc, "lane").iter().filter_map(|n| n.attribute("data-lane")).collect();
    assert_eq!(lanes, ["user", "agent", "call:l", "call:j", "call:t"]);

    // Three speeches: two replies to the user, one deferred reply.
    let speeches: Vec<(&str, &str)> = with_class(&doc, "speech")
        .iter()
        .filter_map(|n| Some((n.attribute("data-speech-id")?, n.attribute("data-source")?)))
        .collect();
    assert_eq!(speeches, [("s1", "user_turn"), ("s2", "user_turn"), ("s3", "deferred_reply")]);
    assert_eq!(with_class(&doc, "user-turn").len(), 2);

    // Each call: a bar coloured by status, its updates as ticks with their messages.
    let calls: Vec<(&str, &str)> = with_class(&doc, "tool-call")
        .iter()
        .filter_map(|n| Some((n.attribute("data-call-id")?, n.attribute("data-status")?)))
        .collect();
    assert_eq!(calls, [("l", "done"), ("j", "done"), ("t", "done")]);
    // (The legend has tool-bar swatches too: only the bars inside call groups.)
    let bars: Vec<Node> = with_class(&doc, "tool-call")
        .iter()
        .flat_map(|g| g.children().filter(|c| c.has_tag_name("rect")))
        .collect();
    assert_eq!(bars.len(), 3);
    assert!(bars.iter().all(|b| b.attribute("class").unwrap().contains("status-done")));
    let lookup_bar = bars.iter().find(|b| title(b).starts_with("long_lookup (l)")).unwrap();
    assert_eq!(title(lookup_bar), "long_lookup (l) 10–460 ms: done lookup done");
    let ticks: Vec<(&str, String)> = with_class(&doc, "update-tick")
        .iter()
        .map(|n| (n.attribute("data-update-id").unwrap(), title(n)))
        .collect();
    assert_eq!(
        ticks,
        [
            ("l", "10 ms, update l: lookup started".to_string()),
            ("j", "10 ms, update j: job started".to_string()),
        ]
    );

    // The deferred reply s3 carries l_final, delivered by B after the handoff.
    let links: Vec<(&str, &str)> = with_class(&doc, "reply-link")
        .iter()
        .map(|n| (n.attribute("data-update-id").unwrap(), n.attribute("data-speech-id").unwrap()))
        .collect();
    assert_eq!(links, [("l_final", "s3")]);
    let handoffs = with_class(&doc, "handoff");
    assert_eq!(handoffs.len(), 1);
    assert_eq!(
        (handoffs[0].attribute("data-from"), handoffs[0].attribute("data-to")),
        (Some("A"), Some("B"))
    );

    // Shapes sit inside the drawing, later events further right.
    let x = |n: &Node| n.attribute("x").unwrap().parse::<f64>().unwrap();
    let s: Vec<f64> = with_class(&doc, "speech")
        .iter()
        .filter(|n| n.attribute("data-speech-id").is_some())
        .map(x)
        .collect();
    assert!(s.windows(2).all(|w| w[0] < w[1]), "{s:?}");
    assert!(s.iter().all(|x| (190.0..=1200.0).contains(x)));
}

#[test]
fn errors_interruptions_and_running_calls_show() {
    let file = r#"{
      "tools": {
        "slow": { "body": [ { "update": "started" }, { "sleep_ms": 5000 }, { "return": "late" } ] },
        "bad": { "body": [ { "error": "no such flight" } ] }
      },
      "agents": { "A": { "instructions": "inst", "tools": ["slow", "bad"] } },
      "session": { "agent": "A" },
      "options": { "playout_ms_per_char": 10, "end_timeout_ms": 1000 },
      "llm": [
        { "tool_calls": [ { "id": "s", "name": "slow", "arguments": "{}" }, { "id": "b", "name": "bad", "arguments": "{}" } ] },
        { "text": "One is slow and one failed, let me explain at length." },
        { "text": "ok" }
      ],
      "steps": [ { "user": "go" }, { "at_ms": 100, "user": "stop talking" } ]
    }"#;
    let trace = colloquy_scenario::run_str(file).expect("plays");
    let html = trace.timeline_html("errors");
    let doc = parse(&html);
    let status = |id: &str| {
        with_class(&doc, "tool-call")
            .into_iter()
            .find(|n| n.attribute("data-call-id") == Some(id))
            .and_then(|n| n.attribute("data-status").map(str::to_string))
    };
    assert_eq!(status("b").as_deref(), Some("error"));
    // The slow call was still running when the scenario ended (it was cancelled or cut off
    // at close): either way its bar reaches the end of the drawing.
    assert!(matches!(status("s").as_deref(), Some("cancelled" | "running" | "error" | "done")));
    let interrupted: Vec<_> = with_class(&doc, "speech")
        .into_iter()
        .filter(|n| n.attribute("data-interrupted") == Some("true"))
        .collect();
    assert_eq!(interrupted.len(), 1, "the user cut the long answer short");
    assert!(interrupted[0].attribute("class").unwrap().contains("interrupted"));
}
