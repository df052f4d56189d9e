//! The LLM boundary: [`Llm`] turns a [`LlmRequest`] into a stream of [`LlmChunk`]s.
//!
//! The runtime never knows which model it talks to. [`ScriptedLlm`] is the embedded default
//! (no network, no keys): it answers requests in order from a script and can record every
//! request for tests to read. Dropping a stream cancels its request.

pub mod context;
mod error;
#[cfg(test)]
mod fixtures;
#[cfg(feature = "http")]
pub mod http;
mod request;
mod scripted;
pub mod turns;

pub use colloquy_model::{FinishReason, LlmErrorKind, Usage};
pub use error::{BODY_EXCERPT, LlmError, excerpt};
pub use request::{LlmChunk, LlmRequest, LlmStream, RequestKind, ToolCallDelta, ToolChoice};
pub use scripted::{RecordedRequest, ScriptedCall, ScriptedLlm, ScriptedResponse};

/// A chat model.
///
/// ```
/// use colloquy_llm::{Llm, LlmChunk, LlmRequest, LlmStream};
/// use futures_util::stream;
/// /// A model that always says "hi".
/// struct Hi;
/// impl Llm for Hi {
///     fn chat(&self, _request: LlmRequest) -> LlmStream {
///         Box::pin(stream::iter([LlmChunk::Text("hi".into()), LlmChunk::End]))
///     }
/// }
/// ```
pub trait Llm: Send + Sync + 'static {
    /// Starts a request. The stream ends after [`LlmChunk::End`] or [`LlmChunk::Error`];
    /// dropping it cancels the request.
    fn chat(&self, request: LlmRequest) -> LlmStream;
}

impl<T: Llm + ?Sized> Llm for std::sync::Arc<T> {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        (**self).chat(request)
    }
}
