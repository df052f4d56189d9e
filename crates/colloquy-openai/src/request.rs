//! A request in the Chat Completions shape: pure functions of the [`LlmRequest`].
//!
//! Rules the API enforces and this mapping keeps (docs/providers.md): every `tool` message
//! answers an entry of the `tool_calls` of the assistant message just before it (several
//! `tool` messages follow one assistant message, in call order); every call is answered;
//! call ids are at most 40 characters ([`call_id`], the same mapping in every request).

use colloquy_llm::turns::{Turn, provider_call_id, sendable_arguments, turns};
use colloquy_llm::{LlmRequest, ToolChoice};
use colloquy_model::ToolSchema;
use serde_json::{Map, Value, json};

/// Settings of every request, beside the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestOptions {
    /// `parallel_tool_calls`, sent when set and the request has tools.
    pub parallel_tool_calls: Option<bool>,
    /// Strict function schemas: every property required, optional ones nullable,
    /// `additionalProperties: false`, and `"strict": true`.
    pub strict_tools: bool,
    /// `temperature`, when set.
    pub temperature: Option<f32>,
    /// `max_completion_tokens`, when set.
    pub max_completion_tokens: Option<u32>,
}

/// The longest tool-call id the API accepts.
pub const MAX_CALL_ID: usize = 40;

/// The id sent for a call id (see [`provider_call_id`]).
pub fn call_id(id: &str) -> String {
    provider_call_id(id, MAX_CALL_ID, |c| c.is_ascii_graphic())
}

/// The JSON body of a streaming request.
///
/// ```
/// use colloquy_openai::request::{body, RequestOptions};
/// # use colloquy_llm::{LlmRequest, RequestKind};
/// # use std::sync::Arc;
/// let request = LlmRequest {
///     kind: RequestKind::UserTurn, agent: "a".into(), speech_id: "s1".into(),
///     instructions: Arc::from("Be brief."), extra_instructions: None,
///     items: Arc::default(), tools: Arc::from(Vec::new()), tool_choice: None,
/// };
/// let body = body("gpt-4.1-mini", &request, &RequestOptions::default());
/// assert_eq!(body["messages"][0]["content"], "Be brief.");
/// assert_eq!(body["stream"], true);
/// ```
pub fn body(model: &str, request: &LlmRequest, options: &RequestOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("messages".into(), Value::Array(messages(request)));
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|t| tool(t, options.strict_tools)).collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(parallel) = options.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), parallel.into());
        }
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    if let Some(t) = options.temperature {
        body.insert("temperature".into(), f64::from(t).into());
    }
    if let Some(n) = options.max_completion_tokens {
        body.insert("max_completion_tokens".into(), n.into());
    }
    Value::Object(body)
}

/// The messages: instructions, the conversation's turns, then this reply's extra
/// instructions.
pub fn messages(request: &LlmRequest) -> Vec<Value> {
    let mut messages = Vec::with_capacity(request.items.len() + 2);
    if !request.instructions.is_empty() {
        messages.push(json!({ "role": "system", "content": &*request.instructions }));
    }
    for turn in turns(request.items.iter()) {
        match turn {
            Turn::User(text) => messages.push(json!({ "role": "user", "content": text })),
            Turn::System(text) => messages.push(json!({ "role": "system", "content": text })),
            Turn::Assistant { text, calls } if calls.is_empty() => {
                messages.push(json!({ "role": "assistant", "content": text }));
            }
            Turn::Assistant { text, calls } => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(c, _)| {
                        // The text as sent when it is an object (byte for byte, so a server's
                        // prompt cache still matches); mended otherwise.
                        let arguments = match serde_json::from_str::<Value>(&c.arguments) {
                            Ok(Value::Object(_)) => c.arguments.clone(),
                            _ => sendable_arguments(&c.arguments).to_string(),
                        };
                        json!({
                            "id": call_id(&c.call_id),
                            "type": "function",
                            "function": { "name": c.name, "arguments": arguments },
                        })
                    })
                    .collect();
                messages.push(
                    json!({ "role": "assistant", "content": text, "tool_calls": tool_calls }),
                );
                for (c, output) in calls {
                    messages.push(json!({
                        "role": "tool",
                        "tool_call_id": call_id(&c.call_id),
                        "content": output.output,
                    }));
                }
            }
        }
    }
    if let Some(extra) = &request.extra_instructions {
        messages.push(json!({ "role": "system", "content": extra }));
    }
    messages
}

fn tool(schema: &ToolSchema, strict: bool) -> Value {
    let mut function = Map::new();
    function.insert("name".into(), schema.name.clone().into());
    if !schema.description.is_empty() {
        function.insert("description".into(), schema.description.clone().into());
    }
    let parameters = match strict {
        true => strict_schema(&schema.parameters),
        false => Value::clone(&schema.parameters),
    };
    function.insert("parameters".into(), parameters);
    if strict {
        function.insert("strict".into(), true.into());
    }
    json!({ "type": "function", "function": function })
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::Named(name) => json!({ "type": "function", "function": { "name": name } }),
    }
}

/// A schema in the form strict mode requires: in every object schema, every property listed
/// in `required` (the ones that were optional become nullable) and `additionalProperties:
/// false`; nested schemas (`properties`, `items`, `anyOf`, `$defs`…) likewise.
///
/// ```
/// use colloquy_openai::request::strict_schema;
/// use serde_json::json;
/// let s = strict_schema(&json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" }, "days": { "type": "integer" } },
///     "required": ["city"],
/// }));
/// assert_eq!(s["required"], json!(["city", "days"]));
/// assert_eq!(s["properties"]["days"]["type"], json!(["integer", "null"]));
/// assert_eq!(s["additionalProperties"], false);
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let Value::Object(object) = schema else { return schema.clone() };
    let mut object: Map<String, Value> =
        object.iter().map(|(k, v)| (k.clone(), strict_children(k, v))).collect();
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        let required: Vec<String> = match schema.get("required") {
            Some(Value::Array(r)) => {
                r.iter().filter_map(|v| v.as_str().map(String::from)).collect()
            }
            _ => Vec::new(),
        };
        let mut all = Vec::with_capacity(properties.len());
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                *property = nullable(std::mem::take(property));
            }
            all.push(Value::String(name.clone()));
        }
        object.insert("required".into(), Value::Array(all));
        object.insert("additionalProperties".into(), false.into());
    } else if object.get("type").and_then(Value::as_str) == Some("object") {
        object.insert("additionalProperties".into(), false.into());
    }
    Value::Object(object)
}

/// Applies [`strict_schema`] to the schemas under one keyword.
fn strict_children(keyword: &str, value: &Value) -> Value {
    match (keyword, value) {
        ("properties" | "$defs" | "definitions", Value::Object(map)) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), strict_schema(v))).collect())
        }
        ("items" | "additionalProperties" | "not", v @ Value::Object(_)) => strict_schema(v),
        ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(list)) => {
            Value::Array(list.iter().map(strict_schema).collect())
        }
        _ => value.clone(),
    }
}

/// A schema that also accepts `null`.
fn nullable(schema: Value) -> Value {
    match schema {
        Value::Object(mut object) => match object.get("type").cloned() {
            Some(Value::String(t)) if t != "null" => {
                object.insert("type".into(), json!([t, "null"]));
                Value::Object(object)
            }
            Some(Value::Array(mut types)) => {
                if !types.iter().any(|t| t == "null") {
                    types.push("null".into());
                }
                object.insert("type".into(), Value::Array(types));
                Value::Object(object)
            }
            Some(_) => Value::Object(object),
            None => json!({ "anyOf": [Value::Object(object), { "type": "null" }] }),
        },
        other => other,
    }
}
