//! Every LLM request the scenario files make (tests/scenarios), mapped to each provider's
//! wire request, satisfies that provider's rules (checkers in tests/wire). The scenarios hold
//! every history shape the runtime makes: background pairs inserted by timestamp, running-call
//! placeholders, interrupted messages, handoffs, several agents, deferred replies.

use std::path::PathBuf;
use std::sync::Arc;

use crate::wire;
use colloquy::chat::{ChatContext, ChatItem};
use colloquy::llm::{LlmRequest, RecordedRequest};
use colloquy::tools::ToolSchema;
use serde_json::{Value, json};

fn scenario_requests() -> Vec<(String, RecordedRequest)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut requests = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let trace = colloquy_scenario::run_file(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, r) in trace.recorded_requests.into_iter().enumerate() {
            requests.push((format!("{name} request {i}"), r));
        }
    }
    assert!(requests.len() > 100, "the scenarios make few requests: {}", requests.len());
    requests
}

fn request(recorded: &RecordedRequest, items: Vec<ChatItem>) -> LlmRequest {
    let parameters = Arc::new(json!({"type": "object", "properties": {}}));
    let tools: Vec<ToolSchema> = recorded
        .tools
        .iter()
        .map(|name| ToolSchema {
            name: name.clone(),
            description: format!("The {name} tool."),
            parameters: Arc::clone(&parameters),
        })
        .collect();
    LlmRequest {
        kind: recorded.kind,
        agent: recorded.agent.as_str().into(),
        speech_id: recorded.speech_id.as_str().into(),
        instructions: Arc::from("You are a helpful agent."),
        extra_instructions: recorded.instructions.clone(),
        items: Arc::new(ChatContext::from_items(items)),
        tools: tools.into(),
        tool_choice: recorded.tool_choice.clone(),
    }
}

/// The same items with every call id made 60 characters longer (the shape of long provider
/// ids and their derived `_update_N` / `_final` ids).
fn long_ids(items: &[ChatItem]) -> Vec<ChatItem> {
    let long = |id: &str| format!("{id}_{}", "q".repeat(60));
    items
        .iter()
        .cloned()
        .map(|mut item| {
            match &mut item {
                ChatItem::FunctionCall(c) => c.call_id = long(&c.call_id),
                ChatItem::FunctionCallOutput(o) => o.call_id = long(&o.call_id),
                _ => {}
            }
            item
        })
        .collect()
}

fn check_all(map: impl Fn(&LlmRequest) -> Value, check: impl Fn(&Value) -> Result<(), String>) {
    for (name, recorded) in scenario_requests() {
        for items in [recorded.items.clone(), long_ids(&recorded.items)] {
            let body = map(&request(&recorded, items));
            if let Err(e) = check(&body) {
                panic!("{name}: {e}\n{body:#}");
            }
        }
    }
}

#[test]
fn every_scenario_request_maps_to_a_valid_openai_request() {
    let options = colloquy_openai::RequestOptions::default();
    check_all(|r| colloquy_openai::request::body("m", r, &options), wire::check_openai);
}

#[test]
fn every_call_and_output_of_a_scenario_reaches_openai() {
    // Placeholders and late outputs are attached, not dropped: each answered call is sent.
    for (name, recorded) in scenario_requests() {
        let body = colloquy_openai::request::body(
            "m",
            &request(&recorded, recorded.items.clone()),
            &Default::default(),
        );
        let sent =
            body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").count();
        let answered = recorded
            .items
            .iter()
            .filter_map(ChatItem::as_function_call)
            .filter(|c| {
                recorded
                    .items
                    .iter()
                    .any(|i| i.as_function_call_output().is_some_and(|o| o.call_id == c.call_id))
            })
            .map(|c| c.call_id.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len();
        assert_eq!(sent, answered, "{name}");
    }
}

#[test]
fn the_checkers_refuse_what_the_providers_refuse() {
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}});
    let user = json!({"role": "user", "content": "hi"});
    let asks = json!({"role": "assistant", "content": null, "tool_calls": [call("a")]});
    let answer = json!({"role": "tool", "tool_call_id": "a", "content": "ok"});
    let openai = |messages: Vec<Value>| wire::check_openai(&json!({ "messages": messages }));
    assert!(openai(vec![user.clone(), asks.clone(), answer.clone()]).is_ok());
    assert!(openai(vec![user.clone(), asks.clone()]).is_err(), "unanswered call");
    assert!(openai(vec![user.clone(), asks.clone(), user.clone(), answer.clone()]).is_err());
    assert!(openai(vec![user.clone(), answer.clone()]).is_err(), "orphan output");
    let long = json!({"role": "assistant", "tool_calls": [call(&"x".repeat(41))]});
    assert!(openai(vec![user.clone(), long]).is_err(), "id over 40");

    let text =
        |role: &str, t: &str| json!({"role": role, "content": [{"type": "text", "text": t}]});
    let uses = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]});
    let result = json!({"type": "tool_result", "tool_use_id": "a", "content": "ok"});
    let anthropic = |messages: Vec<Value>| wire::check_anthropic(&json!({ "messages": messages }));
    let answered = json!({"role": "user", "content": [result.clone()]});
    assert!(anthropic(vec![text("user", "hi"), uses.clone(), answered.clone()]).is_ok());
    assert!(anthropic(vec![text("assistant", "hi")]).is_err(), "starts with the assistant");
    assert!(anthropic(vec![text("user", "a"), text("user", "b")]).is_err(), "roles repeat");
    assert!(anthropic(vec![text("user", "hi"), uses.clone(), text("user", "x")]).is_err());
    let late = json!({"role": "user", "content": [{"type": "text", "text": "x"}, result]});
    assert!(anthropic(vec![text("user", "hi"), uses, late]).is_err(), "result after text");
    assert!(anthropic(vec![text("user", " ")]).is_err(), "empty text");
}

#[test]
fn every_scenario_request_maps_to_a_valid_anthropic_request() {
    let options = colloquy_anthropic::RequestOptions::default();
    check_all(|r| colloquy_anthropic::request::body("m", r, &options), wire::check_anthropic);
}
