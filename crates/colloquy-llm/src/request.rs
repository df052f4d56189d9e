//! Requests to the model and the chunks it streams back.

use std::pin::Pin;
use std::sync::Arc;

use colloquy_model::{ChatContext, FinishReason, ToolSchema, Usage};
use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::LlmError;

/// Why the runtime asks the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestKind {
    /// The first step of a reply to a user turn.
    UserTurn,
    /// A follow-up step answering tool outputs.
    ToolReply,
    /// A deferred reply to background tool results.
    DeferredReply,
    /// The first step of `generate_reply`.
    GenerateReply,
    /// The first step of an agent's `on_enter` reply.
    OnEnter,
}

/// The `tool_choice` of a request; `None` in [`LlmRequest::tool_choice`] means unset.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must not call tools (calls it still emits are dropped).
    None,
    /// The model must call a tool.
    Required,
    /// The model must call this tool.
    Named(String),
}

/// One request to the model.
#[derive(Clone, Debug)]
pub struct LlmRequest {
    /// Why it is made.
    pub kind: RequestKind,
    /// The agent making it (shared: a reply's steps and their retries copy it).
    pub agent: Arc<str>,
    /// The speech it belongs to.
    pub speech_id: Arc<str>,
    /// The agent's instructions (the leading system prompt).
    pub instructions: Arc<str>,
    /// Extra instructions for this reply only, sent as a trailing system message.
    pub extra_instructions: Option<String>,
    /// The chat context, without instructions or system messages.
    pub items: Arc<ChatContext>,
    /// Visible tools, in the order sent.
    pub tools: Arc<[ToolSchema]>,
    /// `None` = unset.
    pub tool_choice: Option<ToolChoice>,
}

/// A piece of a tool call, addressed by its index within the response. The first piece of a
/// call carries its id and name; arguments arrive as text pieces to concatenate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// Index of the call within the response.
    pub index: usize,
    /// The call id (first piece).
    pub id: Option<String>,
    /// The tool name (first piece).
    pub name: Option<String>,
    /// The next piece of the argument text.
    pub arguments: String,
}

/// One chunk of a streamed response.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LlmChunk {
    /// More reply text.
    Text(String),
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// Token usage (a provider may send it more than once: the last one counts).
    Usage(Usage),
    /// Why the model stopped; comes before [`LlmChunk::End`] when the provider says.
    Finish(FinishReason),
    /// The response is complete.
    End,
    /// The request failed; the stream ends. Text and calls received before it are kept as
    /// an interrupted message; the calls are not run.
    Error(LlmError),
}

/// The stream a model returns. Dropping it cancels the request.
pub type LlmStream = Pin<Box<dyn Stream<Item = LlmChunk> + Send>>;
