//! The Chat Completions stream, one server-sent event at a time.
//!
//! Tolerant the way real OpenAI-compatible servers need: unknown fields are ignored; null,
//! missing or empty values (`"finish_reason": ""`) count as absent; usage may come after the
//! finish chunk, with or without `choices`; a body that ends after a finish reason but without
//! `[DONE]` is complete. Only a chunk that is not JSON is an invalid chunk; an `error` object
//! in the stream is the provider's error. Reasoning (`reasoning_content`, `reasoning`) is not
//! kept, but it moves the stall deadline ([`SseDecoder::unseen_output`]).

use std::borrow::Cow;

use colloquy_llm::http::SseDecoder;
use colloquy_llm::{LlmChunk, LlmError, ToolCallDelta, excerpt};
use colloquy_model::{FinishReason, Usage};
use serde::Deserialize;
use serde::de::IgnoredAny;
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
    /// The last event carried reasoning (`reasoning_content`, `reasoning`), which colloquy
    /// does not keep but which shows the model is working.
    reasoned: bool,
}

impl SseDecoder for ChatCompletionsDecoder {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        out: &mut Vec<LlmChunk>,
    ) -> Result<bool, LlmError> {
        self.reasoned = false;
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        // The usual shape reads straight into borrowed fields; anything else (an error
        // object, a field of an unexpected type) is read leniently through a `Value`.
        let value: Value;
        let chunk = match serde_json::from_str::<Chunk>(data) {
            Ok(chunk) if chunk.error.is_none() => chunk,
            _ => {
                value = serde_json::from_str(data).map_err(|e| LlmError::InvalidChunk {
                    detail: format!("{e}: {}", excerpt(data)),
                })?;
                if let Some(error) = present(value.get("error")) {
                    return Err(LlmError::Provider { message: provider_message(error) });
                }
                Chunk::lenient(&value)
            }
        };
        self.apply(chunk, out);
        Ok(false)
    }

    fn unseen_output(&self) -> bool {
        self.reasoned
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

/// One chunk's content, read either way; empty strings still to be treated as absent.
#[derive(Debug, Default, Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
    /// Reasoning text: `reasoning_content` (llama.cpp, vLLM, DeepSeek) or `reasoning`.
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct Function<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
}

#[derive(Debug, Default, Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl<'a> Chunk<'a> {
    /// The chunk read from any JSON: a field of an unexpected type counts as absent.
    fn lenient(value: &'a Value) -> Self {
        let choices = value
            .get("choices")
            .and_then(Value::as_array)
            .map(|choices| choices.iter().map(Choice::lenient).collect());
        let usage = present(value.get("usage")).map(|u| WireUsage {
            prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64),
            completion_tokens: u.get("completion_tokens").and_then(Value::as_u64),
            prompt_tokens_details: Some(Details {
                cached_tokens: u
                    .pointer("/prompt_tokens_details/cached_tokens")
                    .and_then(Value::as_u64),
            }),
        });
        Chunk { choices, usage, error: None }
    }
}

impl<'a> Choice<'a> {
    fn lenient(value: &'a Value) -> Self {
        let delta = present(value.get("delta")).map(|d| Delta {
            content: text(d.get("content")),
            refusal: text(d.get("refusal")),
            reasoning_content: text(d.get("reasoning_content")),
            reasoning: text(d.get("reasoning")),
            tool_calls: d
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| calls.iter().map(CallDelta::lenient).collect()),
        });
        Choice {
            index: value.get("index").and_then(Value::as_u64),
            delta,
            finish_reason: text(value.get("finish_reason")),
        }
    }
}

impl<'a> CallDelta<'a> {
    fn lenient(value: &'a Value) -> Self {
        let function = value.get("function").map(|f| Function {
            name: text(f.get("name")),
            arguments: match f.get("arguments") {
                Some(Value::String(s)) => Some(Cow::Borrowed(s.as_str())),
                // Some servers send the arguments as an object rather than its text.
                Some(v @ Value::Object(_)) => Some(Cow::Owned(v.to_string())),
                _ => None,
            },
        });
        CallDelta {
            index: value.get("index").and_then(Value::as_u64),
            id: text(value.get("id")),
            function,
        }
    }
}

impl ChatCompletionsDecoder {
    fn apply(&mut self, chunk: Chunk, out: &mut Vec<LlmChunk>) {
        // One completion is asked for: the choice with index 0 (or the only one).
        let choice = chunk.choices.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0);
        if let Some(choice) = choice {
            if let Some(delta) = choice.delta {
                let reasoning = [&delta.reasoning_content, &delta.reasoning];
                self.reasoned = reasoning.into_iter().flatten().any(|r| !r.is_empty());
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        out.push(LlmChunk::Text(text.into_owned()));
                    }
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    out.push(LlmChunk::ToolCall(self.call_delta(call)));
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finished = true;
                out.push(LlmChunk::Finish(finish_reason(&reason)));
            }
        }
        if let Some(usage) = chunk.usage
            && (usage.prompt_tokens.is_some() || usage.completion_tokens.is_some())
        {
            let cached = usage.prompt_tokens_details.and_then(|d| d.cached_tokens);
            out.push(LlmChunk::Usage(Usage {
                prompt_tokens: usage.prompt_tokens.unwrap_or(0),
                completion_tokens: usage.completion_tokens.unwrap_or(0),
                cached_prompt_tokens: cached.unwrap_or(0),
            }));
        }
    }

    fn call_delta(&mut self, call: CallDelta) -> ToolCallDelta {
        let id = call.id.filter(|id| !id.is_empty()).map(Cow::into_owned);
        let (name, arguments) = match call.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let name = name.filter(|n| !n.is_empty()).map(Cow::into_owned);
        let arguments = arguments.map(Cow::into_owned).unwrap_or_default();
        let index = match (call.index, &id) {
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

    fn index_of(&self, id: &str) -> Option<usize> {
        self.calls.iter().find(|(_, known)| known == id).map(|(index, _)| *index)
    }
}

/// A value that is there: not missing and not null.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// A string, borrowed (empty ones are dropped where they are used).
fn text(value: Option<&Value>) -> Option<Cow<'_, str>> {
    value.and_then(Value::as_str).map(Cow::Borrowed)
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
        // A field of an odd type is dropped and the rest of the chunk still counts.
        let odd = r#"{"choices":[{"index":0,"delta":{"content":5,"refusal":"no"},"finish_reason":7}],"usage":{"prompt_tokens":"3","completion_tokens":2}}"#;
        let (chunks, _) = decode(&[odd, "[DONE]"]);
        let usage = Usage { prompt_tokens: 0, completion_tokens: 2, cached_prompt_tokens: 0 };
        assert_eq!(chunks, [LlmChunk::Text("no".into()), LlmChunk::Usage(usage)]);
        // Usage whose counts are all null is no usage.
        let (chunks, _) = decode(&[r#"{"usage":{"prompt_tokens":null,"completion_tokens":null}}"#]);
        assert!(chunks.is_empty());
    }

    #[test]
    fn reasoning_is_unseen_output_and_empty_deltas_are_not() {
        let mut decoder = ChatCompletionsDecoder::default();
        let mut out = Vec::new();
        let mut seen = |data: &str| {
            decoder.event("", data, &mut out).unwrap();
            decoder.unseen_output()
        };
        assert!(seen(r#"{"choices":[{"delta":{"reasoning_content":"Let me think"}}]}"#));
        assert!(!seen(r#"{"choices":[{"delta":{}}]}"#));
        assert!(seen(r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#));
        assert!(!seen(r#"{"choices":[{"delta":{"content":"","reasoning_content":""}}]}"#));
        assert!(!seen(r#"{"choices":[],"usage":null}"#));
        assert!(out.is_empty(), "reasoning is not kept: {out:?}");
    }
}
