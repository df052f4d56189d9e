//! The Messages stream, one server-sent event at a time: `message_start` (input tokens),
//! `content_block_start` / `_delta` / `_stop` (text, and `tool_use` blocks whose input arrives
//! as `input_json_delta` pieces), `message_delta` (stop reason, output tokens),
//! `message_stop`; `ping` and unknown events or block types (thinking, citations) are
//! ignored; an `error` event is the provider's error. Only data that is not JSON is an
//! invalid chunk.

use colloquy_core::{FinishReason, Usage};
use colloquy_llm::http::SseDecoder;
use colloquy_llm::{LlmChunk, LlmError, ToolCallDelta, excerpt};
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
}

impl SseDecoder for MessagesDecoder {
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<LlmChunk>) -> Result<bool, LlmError> {
        if data.trim().is_empty() {
            return Ok(false);
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::InvalidChunk { detail: format!("{e}: {}", excerpt(data)) })?;
        // The `type` field names the event too; it is the one to trust when both are there.
        let kind = event.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                let usage = event.pointer("/message/usage");
                let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64);
                self.cached_tokens = count("cache_read_input_tokens").unwrap_or(0);
                self.prompt_tokens = count("input_tokens").unwrap_or(0)
                    + self.cached_tokens
                    + count("cache_creation_input_tokens").unwrap_or(0);
            }
            "content_block_start" => self.block_start(&event, out),
            "content_block_delta" => self.block_delta(&event, out),
            "content_block_stop" => self.block_stop(&event, out),
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stopped = true;
                    out.push(LlmChunk::Finish(stop_reason(reason)));
                }
                if let Some(output) = event.pointer("/usage/output_tokens").and_then(Value::as_u64)
                {
                    out.push(LlmChunk::Usage(Usage {
                        prompt_tokens: self.prompt_tokens,
                        completion_tokens: output,
                        cached_prompt_tokens: self.cached_tokens,
                    }));
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let message = match event.pointer("/error/message").and_then(Value::as_str) {
                    Some(message) => excerpt(message),
                    None => excerpt(&event.to_string()),
                };
                return Err(LlmError::Provider { message });
            }
            _ => {}
        }
        Ok(false)
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

impl MessagesDecoder {
    fn block_start(&mut self, event: &Value, out: &mut Vec<LlmChunk>) {
        let block_index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let Some(block) = event.get("content_block") else { return };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) =
                    block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                {
                    out.push(LlmChunk::Text(text.to_string()));
                }
            }
            Some("tool_use") => {
                let index = self.calls;
                self.calls += 1;
                // A complete input in the start block (some proxies send it so) counts as its
                // argument text; the usual empty `{}` placeholder does not.
                let arguments = match block.get("input") {
                    Some(Value::Object(input)) if !input.is_empty() => block["input"].to_string(),
                    _ => String::new(),
                };
                self.tool_blocks.push((block_index, index, !arguments.is_empty()));
                out.push(LlmChunk::ToolCall(ToolCallDelta {
                    index,
                    id: block.get("id").and_then(Value::as_str).map(String::from),
                    name: block.get("name").and_then(Value::as_str).map(String::from),
                    arguments,
                }));
            }
            _ => {}
        }
    }

    fn block_delta(&mut self, event: &Value, out: &mut Vec<LlmChunk>) {
        let block_index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let Some(delta) = event.get("delta") else { return };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                if let Some(text) =
                    delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
                {
                    out.push(LlmChunk::Text(text.to_string()));
                }
            }
            Some("input_json_delta") => {
                let piece = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                let open = self.tool_blocks.iter_mut().find(|(b, _, _)| *b == block_index);
                if let Some((_, index, has_text)) = open
                    && !piece.is_empty()
                {
                    *has_text = true;
                    let delta = ToolCallDelta {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: piece.into(),
                    };
                    out.push(LlmChunk::ToolCall(delta));
                }
            }
            _ => {}
        }
    }

    /// A `tool_use` block that ends without any input text had no arguments: `{}`.
    fn block_stop(&mut self, event: &Value, out: &mut Vec<LlmChunk>) {
        let block_index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
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
    }
}
