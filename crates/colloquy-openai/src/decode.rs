//! The Chat Completions stream, one server-sent event at a time.
//!
//! Tolerant the way real OpenAI-compatible servers need: unknown fields are ignored; null,
//! missing or empty values (`"finish_reason": ""`) count as absent; usage may come after the
//! finish chunk, with or without `choices`; a body that ends after a finish reason but without
//! `[DONE]` is complete. Only a chunk that is not JSON is an invalid chunk; an `error` object
//! in the stream is the provider's error.

use colloquy_core::{FinishReason, Usage};
use colloquy_llm::http::SseDecoder;
use colloquy_llm::{LlmChunk, LlmError, ToolCallDelta, excerpt};
use serde_json::Value;

/// Decodes one response's events.
#[derive(Debug, Default)]
pub struct ChatCompletionsDecoder {
    finished: bool,
    /// For servers that omit `index`: the index each call id got, the index of the last
    /// delta, and the first unused index.
    calls: Vec<(usize, String)>,
    last: usize,
    next: usize,
}

impl SseDecoder for ChatCompletionsDecoder {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        out: &mut Vec<LlmChunk>,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::InvalidChunk { detail: format!("{e}: {}", excerpt(data)) })?;
        if let Some(error) = present(chunk.get("error")) {
            return Err(LlmError::Provider { message: provider_message(error) });
        }
        if let Some(Value::Array(choices)) = chunk.get("choices") {
            // One completion is asked for: the choice with index 0 (or the only one).
            let choice =
                choices.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0);
            if let Some(choice) = choice {
                self.choice(choice, out);
            }
        }
        if let Some(usage) = present(chunk.get("usage")).and_then(usage) {
            out.push(LlmChunk::Usage(usage));
        }
        Ok(false)
    }

    fn end_of_body(&mut self, _out: &mut Vec<LlmChunk>) -> Result<(), LlmError> {
        match self.finished {
            true => Ok(()),
            false => Err(LlmError::StreamCut {
                detail: "the response ended without a finish reason or [DONE]".into(),
            }),
        }
    }
}

impl ChatCompletionsDecoder {
    fn choice(&mut self, choice: &Value, out: &mut Vec<LlmChunk>) {
        if let Some(delta) = present(choice.get("delta")) {
            for key in ["content", "refusal"] {
                if let Some(text) = text(delta.get(key)) {
                    out.push(LlmChunk::Text(text.to_string()));
                }
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                for call in calls {
                    out.push(LlmChunk::ToolCall(self.call_delta(call)));
                }
            }
        }
        if let Some(reason) = text(choice.get("finish_reason")) {
            self.finished = true;
            out.push(LlmChunk::Finish(finish_reason(reason)));
        }
    }

    fn call_delta(&mut self, call: &Value) -> ToolCallDelta {
        let id = text(call.get("id")).map(String::from);
        let function = call.get("function");
        let name = text(function.and_then(|f| f.get("name"))).map(String::from);
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            // Some servers send the arguments as an object rather than its text.
            Some(v @ Value::Object(_)) => v.to_string(),
            _ => String::new(),
        };
        let index = match (call.get("index").and_then(Value::as_u64), &id) {
            (Some(index), _) => index as usize,
            // Without an index, a new id starts a new call; no id continues the last one.
            (None, Some(id)) => self.index_of(id).unwrap_or(self.next),
            (None, None) => self.last,
        };
        if let Some(id) = &id
            && self.index_of(id).is_none()
        {
            self.calls.push((index, id.clone()));
        }
        self.last = index;
        self.next = self.next.max(index + 1);
        ToolCallDelta { index, id, name, arguments }
    }
}

impl ChatCompletionsDecoder {
    fn index_of(&self, id: &str) -> Option<usize> {
        self.calls.iter().find(|(_, known)| known == id).map(|(index, _)| *index)
    }
}

/// A value that is there: not missing and not null.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// A non-empty string.
fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

fn usage(usage: &Value) -> Option<Usage> {
    let count = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = usage.get("prompt_tokens");
    let completion = usage.get("completion_tokens");
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    let cached = usage.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens"));
    Some(Usage {
        prompt_tokens: count(prompt),
        completion_tokens: count(completion),
        cached_prompt_tokens: count(cached),
    })
}

/// The message of an `error` object (`{"message": …}`), or the value itself.
pub(crate) fn provider_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => excerpt(message),
        None => excerpt(&error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[&str]) -> (Vec<LlmChunk>, Result<(), LlmError>) {
        let mut decoder = ChatCompletionsDecoder::default();
        let mut out = Vec::new();
        for data in events {
            match decoder.event("", data, &mut out) {
                Ok(true) => return (out, Ok(())),
                Ok(false) => {}
                Err(e) => return (out, Err(e)),
            }
        }
        let end = decoder.end_of_body(&mut out);
        (out, end)
    }

    #[test]
    fn text_refusal_finish_and_late_usage() {
        let (chunks, end) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":""}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":"no"},"logprobs":null,"x":1}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
        ]);
        assert_eq!(end, Ok(()));
        assert_eq!(
            chunks,
            [
                LlmChunk::Text("Hi".into()),
                LlmChunk::Text("no".into()),
                LlmChunk::Finish(FinishReason::Length),
                LlmChunk::Usage(Usage {
                    prompt_tokens: 9,
                    completion_tokens: 2,
                    cached_prompt_tokens: 4
                }),
            ]
        );
    }

    #[test]
    fn calls_by_index_and_without_one() {
        let (chunks, _) = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"h","arguments":{"a":1}}}]}}]}"#,
        ]);
        let deltas: Vec<(usize, Option<&str>, &str)> = chunks
            .iter()
            .filter_map(|c| match c {
                LlmChunk::ToolCall(d) => Some((d.index, d.id.as_deref(), d.arguments.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, [(1, Some("b"), ""), (1, None, "{}"), (2, Some("x"), r#"{"a":1}"#)]);
    }

    #[test]
    fn bad_chunks_errors_and_cut_streams() {
        let (_, end) = decode(&["{not json"]);
        assert!(matches!(end, Err(LlmError::InvalidChunk { .. })));
        let (_, end) = decode(&[r#"{"error":{"message":"overloaded","type":"server_error"}}"#]);
        assert_eq!(end, Err(LlmError::Provider { message: "overloaded".into() }));
        let (_, end) = decode(&[r#"{"choices":[{"delta":{"content":"Hel"}}]}"#]);
        assert!(matches!(end, Err(LlmError::StreamCut { .. })));
        let (_, end) = decode(&[r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#]);
        assert_eq!(end, Ok(()));
        // JSON of an unexpected shape is not an error: there is just nothing in it.
        let (chunks, _) = decode(&[r#"{"choices":7}"#, "[1,2]", "[DONE]"]);
        assert!(chunks.is_empty());
    }
}
