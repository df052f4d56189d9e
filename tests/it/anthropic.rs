//! Whole sessions on `Anthropic` against a local server replaying recorded Messages streams
//! (tests/it/wire/anthropic). Real sockets, so the real clock with short timeouts
//! (docs/testing.md); every request the server receives must pass the API's rules.

use std::sync::Arc;

use crate::wire;
use crate::wire::{Chat, KEY, Provider, book_flight, bounded, errors, options, started, weather};
use colloquy::anthropic::Anthropic;
use colloquy::llm::http::HttpOptions;
use colloquy::llm::{FinishReason, LlmErrorKind, Usage};
use colloquy::prelude::*;
use colloquy_replay::Reply;
use serde_json::json;

static ANTHROPIC: Provider = Provider {
    name: "anthropic",
    path: "/v1/messages",
    base_path: "",
    check: wire::check_anthropic,
    llm: |base, options| {
        Arc::new(
            Anthropic::new()
                .base_url(base)
                .api_key(KEY)
                .model("claude-sonnet-4-5")
                .http_options(options),
        )
    },
    overflows: &[
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
    ],
};

crate::failure_cases!(&ANTHROPIC);

fn recorded(name: &str) -> Reply {
    Reply::sse(&wire::recording("anthropic", name))
}

async fn chat(agent: Agent, replies: Vec<Reply>, options: HttpOptions) -> Chat {
    Chat::start(&ANTHROPIC, agent, replies, options).await
}

#[tokio::test]
async fn plain_text_streams_into_the_history_with_usage() {
    bounded(async {
        let mut chat =
            chat(Agent::new("a", "You are terse."), vec![recorded("text")], options()).await;
        let events = chat.turn("hi").await;
        assert_eq!(chat.assistant_messages().await, [("Hello there!".to_string(), false)]);
        let ended = events.iter().find_map(|e| match e {
            EventKind::LlmStepEnded { finish_reason, usage, .. } => Some((finish_reason, usage)),
            _ => None,
        });
        let usage = Usage { prompt_tokens: 21, completion_tokens: 3, cached_prompt_tokens: 0 };
        assert_eq!(ended, Some((&Some(FinishReason::Stop), &Some(usage))));
        let request = &chat.requests()[0];
        assert_eq!(request.header("x-api-key"), Some(KEY));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.header("authorization"), None);
        let body = &request.body;
        assert_eq!(body["model"], "claude-sonnet-4-5");
        assert_eq!(body["system"], "You are terse.");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        );
    })
    .await;
}

#[tokio::test]
async fn a_tool_use_assembled_from_input_json_deltas_runs_and_its_result_goes_back() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let replies = vec![recorded("one_call_many_chunks"), recorded("sunny_in_paris")];
        let mut chat = chat(agent, replies, options()).await;
        chat.turn("weather in Paris?").await;
        assert_eq!(chat.assistant_messages().await, [("It's sunny in Paris.".to_string(), false)]);
        let requests = chat.requests();
        assert_eq!(requests[0].body["tools"][0]["name"], "get_weather");
        assert_eq!(requests[0].body["tools"][0]["input_schema"]["required"][0], "city");
        let messages = requests[1].body["messages"].as_array().unwrap().clone();
        assert_eq!(
            messages[1..],
            [
                json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_01Wx8", "name": "get_weather", "input": {"city": "Paris"}}
                ]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01Wx8", "content": "sunny in Paris"}
                ]}),
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn three_tool_uses_after_text_run_and_their_results_share_one_user_turn() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let replies = vec![recorded("three_calls"), recorded("three_answers")];
        let mut chat = chat(agent, replies, options()).await;
        let events = chat.turn("weather in Oslo, Rome, Lima?").await;
        assert_eq!(started(&events), ["toolu_a", "toolu_b", "toolu_c"]);
        let texts: Vec<String> = chat.assistant_messages().await.into_iter().map(|m| m.0).collect();
        assert_eq!(texts, ["Checking all three.", "Oslo, Rome and Lima are all sunny."]);
        let requests = chat.requests();
        let last_turn = requests[1].body["messages"].as_array().unwrap().last().unwrap().clone();
        let results: Vec<&str> = last_turn["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["content"].as_str().unwrap())
            .collect();
        assert_eq!(results, ["sunny in Oslo", "sunny in Rome", "sunny in Lima"]);
    })
    .await;
}

#[tokio::test]
async fn a_background_tool_sends_its_update_and_final_pairs_in_valid_requests() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(book_flight());
        let replies = vec![recorded("book_call"), recorded("looking"), recorded("booked")];
        let mut chat = chat(agent, replies, options()).await;
        chat.turn("book Tokyo").await;
        chat.session.wait_for_quiet().await.unwrap();
        chat.session.wait_for_idle().await.unwrap();
        let texts: Vec<String> = chat.assistant_messages().await.into_iter().map(|m| m.0).collect();
        assert_eq!(texts, ["Let me book that.", "I'm on it.", "You're booked: FL-1."]);
        let requests = chat.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[1].body["tool_choice"], json!({"type": "none"}));
        let body = &requests[2].body;
        let uses: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().unwrap())
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        assert_eq!(uses, ["toolu_book_1", "toolu_book_1_final"]);
        // The deferred reply's instructions join the system prompt.
        assert!(body["system"].as_str().unwrap().starts_with("inst\n\n"));
    })
    .await;
}

#[tokio::test]
async fn an_overloaded_error_event_is_the_providers_error() {
    bounded(async {
        let mut chat = chat(Agent::new("a", "inst"), vec![recorded("overloaded")], options()).await;
        let errors = errors(&chat.turn("hi").await);
        assert_eq!(errors, [(Some(LlmErrorKind::Provider), "Overloaded".to_string())]);
    })
    .await;
}
