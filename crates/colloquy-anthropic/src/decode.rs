//! The Messages stream, one server-sent event at a time: `message_start` (input tokens),
//! `content_block_start` / `_delta` / `_stop` (text, and `tool_use` blocks whose input arrives
//! as `input_json_delta` pieces), `message_delta` (stop reason, output tokens),
//! `message_stop`; `ping` and unknown events or block types (thinking, citations) are
//! ignored, though a `thinking_delta` moves the stall deadline
//! ([`SseDecoder::unseen_output`]); an `error` event is the provider's error. Only data that
//! is not JSON is an invalid chunk.

use std::borrow::Cow;

use colloquy_llm::http::SseDecoder;
use colloquy_llm::{LlmChunk, LlmError, ToolCallDelta, excerpt};
use colloquy_model::{FinishReason, Usage};
use serde::Deserialize;
use serde_json::Value;

/// Decodes one response's events.
#[derive(Debug, Default)]
pub struct MessagesDecoder {
    /// Prompt tokens from `message_start` (cache reads and writes included).
    prompt_tokens: u64,
    cached_tokens: u64,
    /// The call index of each open `tool_use` block (by block index), and whether it has
    /// received argument text.
    tool_blocks: Vec<(u64, usize, bool)>,
    calls: usize,
    stopped: bool,
    /// The last event was a `thinking_delta`: not kept, but the model is working.
    thought: bool,
}

impl SseDecoder for MessagesDecoder {
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<LlmChunk>) -> Result<bool, LlmError> {
        self.thought = false;
        if data.trim().is_empty() {
            return Ok(false);
        }
        // The usual shapes read straight into borrowed fields; anything else (an error, a
        // field of an unexpected type) is read leniently through a `Value`.
        let value: Value;
        let event = match serde_json::from_str::<Event>(data) {
            Ok(event) if event.kind.as_deref() != Some("error") => event,
            _ => {
                value = serde_json::from_str(data).map_err(|e| LlmError::InvalidChunk {
                    detail: format!("{e}: {}", excerpt(data)),
                })?;
                Event::lenient(&value)?
            }
        };
        Ok(self.apply(event, name, out))
    }

    fn unseen_output(&self) -> bool {
        self.thought
    }

    fn end_of_body(&mut self, _out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        match self.stopped {
            true => Ok(()),
            false => Err(LlmError::StreamCut {
                detail: "the response ended without a stop reason or message_stop".into(),
            }),
        }
    }
}

/// One event's content, read either way.
#[derive(Debug, Default, Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A content delta (`text_delta`, `input_json_delta`) or a message delta (`stop_reason`).
#[derive(Debug, Default, Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl<'a> Event<'a> {
    /// The event read from any JSON (a field of an unexpected type counts as absent), or the
    /// provider's error if it is an `error` event.
    fn lenient(value: &'a Value) -> Result<Self, LlmError> {
        let text = |v: &'a Value, key: &str| v.get(key).and_then(Value::as_str).map(Cow::Borrowed);
        let kind = text(value, "type");
        if kind.as_deref() == Some("error") {
            let message = match value.pointer("/error/message").and_then(Value::as_str) {
                Some(message) => excerpt(message),
                None => excerpt(&value.to_string()),
            };
            return Err(LlmError::Provider { message });
        }
        let usage = |v: Option<&Value>| {
            v.filter(|u| u.is_object()).map(|u| {
                let count = |key: &str| u.get(key).and_then(Value::as_u64);
                WireUsage {
                    input_tokens: count("input_tokens"),
                    output_tokens: count("output_tokens"),
                    cache_read_input_tokens: count("cache_read_input_tokens"),
                    cache_creation_input_tokens: count("cache_creation_input_tokens"),
                }
            })
        };
        Ok(Event {
            kind,
            index: value.get("index").and_then(Value::as_u64),
            delta: value.get("delta").filter(|d| d.is_object()).map(|d| Delta {
                kind: text(d, "type"),
                text: text(d, "text"),
                partial_json: text(d, "partial_json"),
                thinking: text(d, "thinking"),
                stop_reason: text(d, "stop_reason"),
            }),
            content_block: value.get("content_block").filter(|b| b.is_object()).map(|b| Block {
                kind: text(b, "type"),
                text: text(b, "text"),
                id: text(b, "id"),
                name: text(b, "name"),
                input: b.get("input").cloned(),
            }),
            message: value.get("message").map(|m| MessageStart { usage: usage(m.get("usage")) }),
            usage: usage(value.get("usage")),
        })
    }
}

impl MessagesDecoder {
    /// Applies one event; true when it ends the response.
    fn apply(&mut self, event: Event, name: &str, out: &mut Vec<LlmChunk>) -> bool {
        // The `type` field names the event too; it is the one to trust when both are there.
        let kind = event.kind.as_deref().unwrap_or(name);
        let block_index = event.index.unwrap_or(0);
        match kind {
            "message_start" => {
                let usage = event.message.and_then(|m| m.usage).unwrap_or_default();
                self.cached_tokens = usage.cache_read_input_tokens.unwrap_or(0);
                self.prompt_tokens = usage.input_tokens.unwrap_or(0)
                    + self.cached_tokens
                    + usage.cache_creation_input_tokens.unwrap_or(0);
            }
            "content_block_start" => {
                if let Some(block) = event.content_block {
                    self.block_start(block_index, block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.block_delta(block_index, delta, out);
                }
            }
            "content_block_stop" => self.block_stop(block_index, out),
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stopped = true;
                    out.push(LlmChunk::Finish(stop_reason(&reason)));
                }
                if let Some(output) = event.usage.and_then(|u| u.output_tokens) {
                    out.push(LlmChunk::Usage(Usage {
                        prompt_tokens: self.prompt_tokens,
                        completion_tokens: output,
                        cached_prompt_tokens: self.cached_tokens,
                    }));
                }
            }
            "message_stop" => return true,
            _ => {}
        }
        false
    }

    fn block_start(&mut self, block_index: u64, block: Block, out: &mut Vec<LlmChunk>) {
        match block.kind.as_deref() {
            Some("text") => {
                if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                    out.push(LlmChunk::Text(text.into_owned()));
                }
            }
            Some("tool_use") => {
                let index = self.calls;
                self.calls += 1;
                // A complete input in the start block (some proxies send it so) counts as its
                // argument text; the usual empty `{}` placeholder does not.
                let arguments = match &block.input {
                    Some(input @ Value::Object(fields)) if !fields.is_empty() => input.to_string(),
                    _ => String::new(),
                };
                self.tool_blocks.push((block_index, index, !arguments.is_empty()));
                out.push(LlmChunk::ToolCall(ToolCallDelta {
                    index,
                    id: block.id.map(Cow::into_owned),
                    name: block.name.map(Cow::into_owned),
                    arguments,
                }));
            }
            _ => {}
        }
    }

    fn block_delta(&mut self, block_index: u64, delta: Delta, out: &mut Vec<LlmChunk>) {
        match delta.kind.as_deref() {
            Some("text_delta") => {
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    out.push(LlmChunk::Text(text.into_owned()));
                }
            }
            Some("thinking_delta") => {
                self.thought = delta.thinking.is_some_and(|t| !t.is_empty());
            }
            Some("input_json_delta") => {
                let piece = delta.partial_json.unwrap_or_default();
                let open = self.tool_blocks.iter_mut().find(|(b, _, _)| *b == block_index);
                if let Some((_, index, has_text)) = open
                    && !piece.is_empty()
                {
                    *has_text = true;
                    let arguments = piece.into_owned();
                    let delta = ToolCallDelta { index: *index, id: None, name: None, arguments };
                    out.push(LlmChunk::ToolCall(delta));
                }
            }
            _ => {}
        }
    }

    /// A `tool_use` block that ends without any input text had no arguments: `{}`.
    fn block_stop(&mut self, block_index: u64, out: &mut Vec<LlmChunk>) {
        if let Some(at) = self.tool_blocks.iter().position(|(b, _, _)| *b == block_index) {
            let (_, index, has_text) = self.tool_blocks.remove(at);
            if !has_text {
                let delta = ToolCallDelta { index, id: None, name: None, arguments: "{}".into() };
                out.push(LlmChunk::ToolCall(delta));
            }
        }
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[(&str, &str)]) -> (Vec<LlmChunk>, Result<bool, LlmError>) {
        let mut decoder = MessagesDecoder::default();
        let mut out = Vec::new();
        for (name, data) in events {
            match decoder.event(name, data, &mut out) {
                Ok(true) => return (out, Ok(true)),
                Ok(false) => {}
                Err(e) => return (out, Err(e)),
            }
        }
        let end = decoder.end_of_body(&mut out).map(|()| false);
        (out, end)
    }

    #[test]
    fn text_and_a_tool_use_assembled_with_usage() {
        let (chunks, end) = decode(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking."}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        assert_eq!(end, Ok(true));
        let call = |index, id: Option<&str>, name: Option<&str>, arguments: &str| {
            LlmChunk::ToolCall(ToolCallDelta {
                index,
                id: id.map(String::from),
                name: name.map(String::from),
                arguments: arguments.into(),
            })
        };
        assert_eq!(
            chunks,
            [
                LlmChunk::Text("Checking.".into()),
                call(0, Some("toolu_1"), Some("f"), ""),
                call(0, None, None, "{\"a\":"),
                call(0, None, None, "1}"),
                call(1, Some("toolu_2"), Some("g"), ""),
                call(1, None, None, "{}"),
                LlmChunk::Finish(FinishReason::ToolCalls),
                LlmChunk::Usage(Usage {
                    prompt_tokens: 15,
                    completion_tokens: 30,
                    cached_prompt_tokens: 5
                }),
            ]
        );
    }

    #[test]
    fn errors_garbage_and_cuts() {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let (_, end) = decode(&[("error", overloaded)]);
        assert_eq!(end, Err(LlmError::Provider { message: "Overloaded".into() }));
        let (_, end) = decode(&[("content_block_delta", "{oops")]);
        assert!(matches!(end, Err(LlmError::InvalidChunk { .. })));
        let text =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#;
        let (chunks, end) = decode(&[("content_block_delta", text)]);
        assert_eq!(chunks, [LlmChunk::Text("Hi".into())]);
        assert!(matches!(end, Err(LlmError::StreamCut { .. })));
        let (_, end) = decode(&[("x_new_event", r#"{"type":"x_new_event","weird":[1]}"#)]);
        assert!(matches!(end, Err(LlmError::StreamCut { .. })), "unknown events are ignored");
        // A field of an odd type is dropped; the rest of the event still counts.
        let odd = r#"{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"Hi"}}"#;
        let (chunks, _) = decode(&[("content_block_delta", odd)]);
        assert_eq!(chunks, [LlmChunk::Text("Hi".into())]);
    }

    #[test]
    fn thinking_is_unseen_output_and_pings_are_not() {
        let mut decoder = MessagesDecoder::default();
        let mut out = Vec::new();
        let mut seen = |name: &str, data: &str| {
            decoder.event(name, data, &mut out).unwrap();
            decoder.unseen_output()
        };
        let thinking = r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}}"#;
        assert!(seen("content_block_delta", thinking));
        assert!(!seen("ping", r#"{"type":"ping"}"#));
        let empty =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}"#;
        assert!(!seen("content_block_delta", empty));
        assert!(out.is_empty(), "thinking is not kept: {out:?}");
    }
}
