//! OpenAI Chat Completions for colloquy, streaming: OpenAI itself and any OpenAI-compatible
//! server (vLLM, llama.cpp's server, Ollama…).
//!
//! ```no_run
//! use colloquy_openai::OpenAi;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // OPENAI_API_KEY, or OPENAI_BASE_URL=http://127.0.0.1:8000/v1 for a local server.
//! let llm = OpenAi::from_env()?.model("gpt-4.1-mini").parallel_tool_calls(true);
//! # let _ = llm; Ok(()) }
//! ```
//!
//! Requests go to `{base}/chat/completions` (the base includes `/v1`, as in OpenAI's SDKs)
//! with `stream: true` and usage requested; see [`request`] for the mapping of the chat
//! context and [`decode`] for the stream. Retries and timeouts are the shared transport's
//! ([`HttpOptions`](colloquy_llm::http::HttpOptions)).

pub mod decode;
pub mod request;

use colloquy_llm::http::{ConfigError, Endpoint, HttpProvider, KeyHeader, StreamRequest};
use colloquy_llm::{Llm, LlmError, LlmRequest, LlmStream};

pub use request::RequestOptions;

/// OpenAI's API, the default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The model used when neither the builder nor `COLLOQUY_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

/// A Chat Completions model. Cloning shares the HTTP client.
#[derive(Clone, Debug)]
pub struct OpenAi {
    endpoint: Endpoint,
    options: RequestOptions,
}

impl Default for OpenAi {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenAi {
    /// OpenAI's API with no key and the default model; set them with the builder methods.
    pub fn new() -> Self {
        Self {
            endpoint: Endpoint::new(DEFAULT_BASE_URL, DEFAULT_MODEL),
            options: RequestOptions::default(),
        }
    }

    /// From `OPENAI_API_KEY`, `OPENAI_BASE_URL` (which includes `/v1`) and `COLLOQUY_MODEL`.
    /// Fails when neither the key nor the base URL is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::configured_from_env()
    }

    colloquy_llm::endpoint_builder!(
        key = "The API key (sent as `Authorization: Bearer …`).",
        base_url = "The base URL, including `/v1` (`http://127.0.0.1:8000/v1`)."
    );

    /// `parallel_tool_calls` (unset: the server's default).
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.options.parallel_tool_calls = Some(parallel);
        self
    }

    /// Strict function schemas (see [`request::strict_schema`]).
    pub fn strict_tools(mut self, strict: bool) -> Self {
        self.options.strict_tools = strict;
        self
    }

    /// `temperature`.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.options.temperature = Some(temperature);
        self
    }

    /// `max_completion_tokens`.
    pub fn max_completion_tokens(mut self, tokens: u32) -> Self {
        self.options.max_completion_tokens = Some(tokens);
        self
    }

    fn stream_request(&self, request: &LlmRequest) -> Result<StreamRequest, LlmError> {
        let body = request::body(self.endpoint.model(), request, &self.options);
        self.endpoint.json_request(&["chat", "completions"], &body, &[], KeyHeader::Bearer)
    }
}

impl Llm for OpenAi {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let stream_request = self.stream_request(&request);
        self.endpoint.stream(stream_request, decode::ChatCompletionsDecoder::default())
    }
}

impl HttpProvider for OpenAi {
    const ENV: (&'static str, &'static str) = ("OPENAI_API_KEY", "OPENAI_BASE_URL");

    fn with_defaults() -> Self {
        Self::new()
    }

    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_prints() {
        let llm = OpenAi::new().api_key("sk-very-secret");
        assert!(!format!("{llm:?}").contains("sk-very-secret"));
        let request = llm.stream_request(&LlmRequest {
            kind: colloquy_llm::RequestKind::UserTurn,
            agent: "a".into(),
            speech_id: "s1".into(),
            instructions: "inst".into(),
            extra_instructions: None,
            items: Default::default(),
            tools: Vec::new().into(),
            tool_choice: None,
        });
        assert!(!format!("{request:?}").contains("sk-very-secret"));
    }
}
