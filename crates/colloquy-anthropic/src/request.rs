//! A request in the Messages shape: pure functions of the [`LlmRequest`].
//!
//! Rules the API enforces and this mapping keeps (docs/providers.md): roles alternate and
//! the first and last turns are the user's; the `tool_result` blocks answering an assistant
//! turn's `tool_use` blocks open the very next user turn; text blocks are never empty;
//! `tool_use` ids match `[A-Za-z0-9_-]+` ([`call_id`], the same mapping in every request); a
//! `tool_use` input is an object. Instructions, and a reply's extra instructions, go in the
//! `system` field.

use colloquy_llm::turns::{Turn, provider_call_id, sendable_arguments, turns};
use colloquy_llm::{LlmRequest, ToolChoice};
use colloquy_model::ToolSchema;
use serde_json::{Map, Value, json};

/// Settings of every request, beside the model.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOptions {
    /// `max_tokens` (the API requires it).
    pub max_tokens: u32,
    /// `temperature`, when set.
    pub temperature: Option<f32>,
    /// `Some(false)` sends `disable_parallel_tool_use: true` with the tool choice.
    pub parallel_tool_calls: Option<bool>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        Self { max_tokens: 4096, temperature: None, parallel_tool_calls: None }
    }
}

/// The user turn that opens a conversation whose history starts with the agent (an
/// `on_enter` greeting): the API wants the user first.
pub const OPENING: &str = "(The conversation begins.)";
/// The user turn sent after a history that ends with the agent (a `generate_reply` right
/// after it spoke): a last assistant turn would be continued, not answered.
pub const CONTINUE: &str = "(Continue.)";

/// The id sent for a call id (see [`provider_call_id`]).
pub fn call_id(id: &str) -> String {
    provider_call_id(id, 64, |c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The JSON body of a streaming request.
///
/// ```
/// use colloquy_anthropic::request::{body, RequestOptions};
/// # use colloquy_llm::{LlmRequest, RequestKind};
/// # use std::sync::Arc;
/// let request = LlmRequest {
///     kind: RequestKind::UserTurn, agent: "a".into(), speech_id: "s1".into(),
///     instructions: Arc::from("Be brief."), extra_instructions: None,
///     items: Arc::default(), tools: Arc::from(Vec::new()), tool_choice: None,
/// };
/// let body = body("claude-sonnet-4-5", &request, &RequestOptions::default());
/// assert_eq!(body["system"], "Be brief.");
/// assert_eq!(body["messages"][0]["role"], "user");
/// ```
pub fn body(model: &str, request: &LlmRequest, options: &RequestOptions) -> Value {
    let (system, messages) = conversation(request);
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("max_tokens".into(), options.max_tokens.into());
    if !system.is_empty() {
        body.insert("system".into(), system.into());
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), true.into());
    if !request.tools.is_empty() {
        body.insert("tools".into(), request.tools.iter().map(tool).collect());
        let choice = tool_choice(request.tool_choice.as_ref(), options.parallel_tool_calls);
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), f64::from(t).into());
    }
    Value::Object(body)
}

/// The system prompt and the alternating messages.
pub fn conversation(request: &LlmRequest) -> (String, Vec<Value>) {
    let mut system = vec![request.instructions.to_string()];
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for turn in turns(request.items.iter()) {
        match turn {
            Turn::User(text) => push(&mut messages, "user", text_block(text)),
            Turn::System(text) => system.push(text.to_string()),
            Turn::Assistant { text, calls } => {
                let mut blocks: Vec<Value> =
                    text.as_deref().and_then(text_block).into_iter().collect();
                blocks.extend(calls.iter().map(|(c, _)| {
                    json!({ "type": "tool_use", "id": call_id(&c.call_id), "name": c.name, "input": sendable_arguments(&c.arguments) })
                }));
                for block in blocks {
                    push(&mut messages, "assistant", Some(block));
                }
                for (c, output) in calls {
                    let mut result = Map::new();
                    result.insert("type".into(), "tool_result".into());
                    result.insert("tool_use_id".into(), call_id(&c.call_id).into());
                    if !output.output.is_empty() {
                        result.insert("content".into(), output.output.clone().into());
                    }
                    if output.is_error {
                        result.insert("is_error".into(), true.into());
                    }
                    push(&mut messages, "user", Some(Value::Object(result)));
                }
            }
        }
    }
    if messages.first().is_none_or(|(role, _)| *role != "user") {
        messages.insert(0, ("user", vec![json!({ "type": "text", "text": OPENING })]));
    }
    if messages.last().is_some_and(|(role, _)| *role == "assistant") {
        push(&mut messages, "user", text_block(CONTINUE));
    }
    system.extend(request.extra_instructions.clone());
    system.retain(|s| !s.trim().is_empty());
    let messages = messages
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    (system.join("\n\n"), messages)
}

/// Appends a block to the last message if it has the same role (roles must alternate).
fn push(messages: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, block: Option<Value>) {
    let Some(block) = block else { return };
    match messages.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        _ => messages.push((role, vec![block])),
    }
}

/// A text block, or nothing for blank text (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// A call's input: its arguments when they are a JSON object; otherwise the text the model
/// sent, under `_invalid_arguments`, so the model sees what it sent beside the error output.
fn tool(schema: &ToolSchema) -> Value {
    let mut tool = Map::new();
    tool.insert("name".into(), schema.name.clone().into());
    if !schema.description.is_empty() {
        tool.insert("description".into(), schema.description.clone().into());
    }
    tool.insert("input_schema".into(), Value::clone(&schema.parameters));
    Value::Object(tool)
}

fn tool_choice(choice: Option<&ToolChoice>, parallel: Option<bool>) -> Option<Value> {
    let mut value = match choice {
        None if parallel.is_none() => return None,
        None | Some(ToolChoice::Auto) => json!({ "type": "auto" }),
        Some(ToolChoice::None) => return Some(json!({ "type": "none" })),
        Some(ToolChoice::Required) => json!({ "type": "any" }),
        Some(ToolChoice::Named(name)) => json!({ "type": "tool", "name": name }),
    };
    if parallel == Some(false) {
        value["disable_parallel_tool_use"] = true.into();
    }
    Some(value)
}
