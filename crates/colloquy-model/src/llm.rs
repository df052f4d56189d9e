//! What a model reports about a response besides its content: token usage, why it finished,
//! and what kind of failure ended it. Plain data the events carry; the `Llm` trait and the
//! provider adapters that produce it live in `colloquy-llm` and the provider crates.

use serde::{Deserialize, Serialize};

/// Token counts a model reported for one response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion (output) tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache, where it says.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a model stopped generating.
///
/// ```
/// use colloquy_model::FinishReason;
/// assert!(FinishReason::Length.is_truncated());
/// assert!(!FinishReason::ToolCalls.is_truncated());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end (OpenAI `stop`, Anthropic `end_turn` or `stop_sequence`).
    Stop,
    /// The output token limit cut the response (OpenAI `length`, Anthropic `max_tokens`).
    Length,
    /// The model asked for tool calls.
    ToolCalls,
    /// The provider's filter withheld content (OpenAI `content_filter`, Anthropic `refusal`).
    ContentFilter,
    /// A reason this version does not know, as the provider spelled it.
    Other(String),
}

impl FinishReason {
    /// True when the response did not end on its own: the text or a call's arguments may be
    /// incomplete.
    pub fn is_truncated(&self) -> bool {
        matches!(self, FinishReason::Length | FinishReason::ContentFilter)
    }
}

/// The kind of failure that ended an LLM request, as error events report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LlmErrorKind {
    /// The provider refused the credentials (401, 403).
    Auth,
    /// Too many requests (429), after the retries.
    RateLimit,
    /// Another HTTP status, after the retries where it is retryable.
    Http,
    /// A chunk of the stream was not valid JSON, or the stream was not a stream.
    InvalidChunk,
    /// The connection broke or the stream ended without its end marker.
    StreamCut,
    /// Nothing arrived in time (connecting, or the first token, or between chunks).
    Timeout,
    /// The server could not be reached.
    Connect,
    /// The provider reported an error inside the stream (or a script did).
    Provider,
    /// The request was over the model's context (its prompt and reply together); the runtime
    /// retries once with the request trimmed (docs/providers.md#a-context-that-fits).
    ContextLength,
}
