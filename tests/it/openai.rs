//! Whole sessions on `OpenAi` against a local server replaying recorded Chat Completions
//! streams (tests/it/wire/openai). Real sockets, so the real clock with short timeouts
//! (docs/testing.md); every request the server receives must pass the API's rules.

use std::sync::Arc;

use crate::wire;
use crate::wire::{Chat, KEY, Provider, book_flight, bounded, options, started, weather};
use colloquy::llm::http::HttpOptions;
use colloquy::llm::{FinishReason, Usage};
use colloquy::openai::OpenAi;
use colloquy::prelude::*;
use colloquy_replay::Reply;

static OPENAI: Provider = Provider {
    name: "openai",
    path: "/v1/chat/completions",
    base_path: "/v1",
    check: wire::check_openai,
    llm: |base, options| {
        Arc::new(
            OpenAi::new().base_url(base).api_key(KEY).model("gpt-4.1-mini").http_options(options),
        )
    },
    overflows: &[
        // OpenAI
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        // llama.cpp's server
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5210,"n_ctx":4096}}"#,
        // vLLM
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
    ],
};

crate::failure_cases!(&OPENAI);

fn recorded(name: &str) -> Reply {
    Reply::sse(&wire::recording("openai", name))
}

async fn chat(agent: Agent, replies: Vec<Reply>, options: HttpOptions) -> Chat {
    Chat::start(&OPENAI, agent, replies, options).await
}

#[tokio::test]
async fn plain_text_streams_into_the_history_with_usage() {
    bounded(async {
        let agent = Agent::new("a", "You are terse.");
        let mut chat = chat(agent, vec![recorded("text")], options()).await;
        let events = chat.turn("hi").await;
        assert_eq!(chat.assistant_messages().await, [("Hello there!".to_string(), false)]);
        let ended = events.iter().find_map(|e| match e {
            EventKind::LlmStepEnded { finish_reason, usage, .. } => Some((finish_reason, usage)),
            _ => None,
        });
        let usage = Usage { prompt_tokens: 21, completion_tokens: 3, cached_prompt_tokens: 0 };
        assert_eq!(ended, Some((&Some(FinishReason::Stop), &Some(usage))));
        let request = &chat.requests()[0];
        assert_eq!(request.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        let body = &request.body;
        assert_eq!(body["model"], "gpt-4.1-mini");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(
            body["messages"][0],
            serde_json::json!({"role": "system", "content": "You are terse."})
        );
        assert_eq!(body["messages"][1], serde_json::json!({"role": "user", "content": "hi"}));
    })
    .await;
}

#[tokio::test]
async fn a_call_split_across_chunks_runs_and_its_output_goes_back() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let replies = vec![recorded("one_call_many_chunks"), recorded("sunny_in_paris")];
        let mut chat = chat(agent, replies, options()).await;
        chat.turn("weather in Paris?").await;
        assert_eq!(chat.assistant_messages().await, [("It's sunny in Paris.".to_string(), false)]);
        let requests = chat.requests();
        assert_eq!(requests.len(), 2);
        let first = &requests[0].body;
        assert_eq!(first["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(first["tools"][0]["function"]["parameters"]["required"][0], "city");
        let messages = requests[1].body["messages"].as_array().unwrap().clone();
        let tail = &messages[messages.len() - 2..];
        assert_eq!(tail[0]["role"], "assistant");
        assert_eq!(tail[0]["tool_calls"][0]["id"], "call_Wx8Pq2");
        assert_eq!(tail[0]["tool_calls"][0]["function"]["arguments"], r#"{"city": "Paris"}"#);
        assert_eq!(
            tail[1],
            serde_json::json!({"role": "tool", "tool_call_id": "call_Wx8Pq2", "content": "sunny in Paris"})
        );
    })
    .await;
}

#[tokio::test]
async fn three_interleaved_parallel_calls_are_assembled_by_index() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let replies = vec![recorded("three_parallel_calls"), recorded("three_answers")];
        let mut chat = chat(agent, replies, options()).await;
        let events = chat.turn("weather in Oslo, Rome, Lima?").await;
        assert_eq!(started(&events), ["call_a", "call_b", "call_c"]);
        let requests = chat.requests();
        let messages = requests[1].body["messages"].as_array().unwrap().clone();
        let outputs: Vec<(&str, &str)> = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        assert_eq!(
            outputs,
            [("call_a", "sunny in Oslo"), ("call_b", "sunny in Rome"), ("call_c", "sunny in Lima")]
        );
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
        // The provisional output answers the call at once, and the tool reply may not call.
        assert_eq!(requests[1].body["tool_choice"], "none");
        let last = requests[2].body["messages"].as_array().unwrap();
        let ids: Vec<&str> = last.iter().filter_map(|m| m["tool_call_id"].as_str()).collect();
        assert_eq!(ids, ["call_book_1", "call_book_1_final"]);
        let final_output = last.iter().find(|m| m["tool_call_id"] == "call_book_1_final").unwrap();
        assert!(final_output["content"].as_str().unwrap().contains("Booked FL-1"));
        // The deferred reply's instructions come last, as a system message.
        assert_eq!(last.last().unwrap()["role"], "system");
        // Each step is one assistant message with its own calls; the final pair is a message
        // of its own, never attached to the text the tool reply wrote.
        let shape: Vec<String> = last[..last.len() - 1].iter().map(message_shape).collect();
        assert_eq!(
            shape,
            [
                "system inst",
                "user book Tokyo",
                "assistant Let me book that. [call_book_1]",
                "tool call_book_1",
                "assistant I'm on it.",
                "assistant - [call_book_1_final]",
                "tool call_book_1_final",
            ]
        );
    })
    .await;
}

/// A Chat Completions message in a line: role, text (or `-`), and the calls it makes or answers.
fn message_shape(m: &serde_json::Value) -> String {
    let role = m["role"].as_str().unwrap_or_default();
    if role == "tool" {
        return format!("tool {}", m["tool_call_id"].as_str().unwrap_or_default());
    }
    let text = m["content"].as_str().unwrap_or("-");
    let calls: Vec<&str> = m["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    match calls.is_empty() {
        true => format!("{role} {text}"),
        false => format!("{role} {text} [{}]", calls.join(", ")),
    }
}

/// Three sequential LLM steps, each calling a tool once, reach the model as three assistant
/// messages, not one with three parallel calls.
#[tokio::test]
async fn sequential_steps_are_separate_assistant_messages() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let step = |id: &str, city: &str| {
            let call = format!(
                r#"data: {{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"id":"{id}","type":"function","function":{{"name":"get_weather","arguments":"{{\"city\": \"{city}\"}}"}}}}]}},"finish_reason":"tool_calls"}}]}}"#
            );
            Reply::sse(&format!("{call}\n\ndata: [DONE]\n\n"))
        };
        let replies = vec![
            step("call_a", "Paris"),
            step("call_b", "Rome"),
            step("call_c", "Oslo"),
            recorded("text"),
        ];
        let mut chat = chat(agent, replies, options()).await;
        chat.turn("weather in three cities, one at a time").await;
        let requests = chat.requests();
        assert_eq!(requests.len(), 4);
        let last = requests[3].body["messages"].as_array().unwrap();
        let shape: Vec<String> = last.iter().map(message_shape).collect();
        assert_eq!(
            shape,
            [
                "system inst",
                "user weather in three cities, one at a time",
                "assistant - [call_a]",
                "tool call_a",
                "assistant - [call_b]",
                "tool call_b",
                "assistant - [call_c]",
                "tool call_c",
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn a_length_finish_is_reported() {
    bounded(async {
        let mut chat = chat(Agent::new("a", "inst"), vec![recorded("length")], options()).await;
        let events = chat.turn("hi").await;
        assert!(events.iter().any(|e| matches!(
            e,
            EventKind::LlmStepEnded { finish_reason: Some(FinishReason::Length), .. }
        )));
        assert_eq!(chat.assistant_messages().await, [("This answer is cut".to_string(), false)]);
    })
    .await;
}

#[tokio::test]
async fn generate_reply_with_a_named_tool_choice_sends_it() {
    bounded(async {
        let agent = Agent::new("a", "inst").tool(weather());
        let replies = vec![recorded("one_call_many_chunks"), recorded("sunny_in_paris")];
        let chat = chat(agent, replies, options()).await;
        let choice = colloquy::llm::ToolChoice::Named("get_weather".into());
        chat.session.generate_reply_with("Check the weather in Paris.", choice).await.unwrap();
        chat.session.wait_for_idle().await.unwrap();
        let requests = chat.requests();
        assert_eq!(
            requests[0].body["tool_choice"],
            serde_json::json!({"type": "function", "function": {"name": "get_weather"}})
        );
        // The tool reply that follows is the runtime's own: `auto`.
        assert_eq!(requests[1].body["tool_choice"], "auto");
    })
    .await;
}
