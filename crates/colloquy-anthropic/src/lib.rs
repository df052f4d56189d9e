//! Anthropic's Messages API for colloquy, streaming.
//!
//! ```no_run
//! use colloquy_anthropic::Anthropic;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for a proxy).
//! let llm = Anthropic::from_env()?.model("claude-sonnet-4-5").max_tokens(1024);
//! # let _ = llm; Ok(()) }
//! ```
//!
//! Requests go to `{base}/v1/messages` (the base has no `/v1`, as in Anthropic's SDKs) with
//! the `x-api-key` and `anthropic-version` headers; see [`request`] for the mapping of the
//! chat context and [`decode`] for the stream. Retries and timeouts are the shared
//! transport's ([`HttpOptions`](colloquy_llm::http::HttpOptions)).

pub mod decode;
pub mod request;

use colloquy_llm::http::{ConfigError, Endpoint, HttpProvider, KeyHeader, StreamRequest};
use colloquy_llm::{Llm, LlmError, LlmRequest, LlmStream};

pub use request::RequestOptions;

/// Anthropic's API, the default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The model used when neither the builder nor `COLLOQUY_MODEL` names one.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// The `anthropic-version` header sent.
pub const API_VERSION: &str = "2023-06-01";

/// A Messages model. Cloning shares the HTTP client.
#[derive(Clone, Debug)]
pub struct Anthropic {
    endpoint: Endpoint,
    options: RequestOptions,
}

impl Default for Anthropic {
    fn default() -> Self {
        Self::new()
    }
}

impl Anthropic {
    /// Anthropic's API with no key and the default model; set them with the builder methods.
    pub fn new() -> Self {
        Self {
            endpoint: Endpoint::new(DEFAULT_BASE_URL, DEFAULT_MODEL),
            options: RequestOptions::default(),
        }
    }

    /// From `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (without `/v1`) and `COLLOQUY_MODEL`.
    /// Fails when neither the key nor the base URL is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::configured_from_env()
    }

    colloquy_llm::endpoint_builder!(
        key = "The API key (sent as `x-api-key`).",
        base_url = "The base URL, without `/v1` (`http://127.0.0.1:8080`)."
    );

    /// `max_tokens` (default 4096).
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.options.max_tokens = tokens;
        self
    }

    /// `temperature`.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.options.temperature = Some(temperature);
        self
    }

    /// `false` sends `disable_parallel_tool_use`.
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.options.parallel_tool_calls = Some(parallel);
        self
    }

    fn stream_request(&self, request: &LlmRequest) -> Result<StreamRequest, LlmError> {
        let body = request::body(self.endpoint.model(), request, &self.options);
        let headers = [("anthropic-version", API_VERSION)];
        self.endpoint.json_request(
            &["v1", "messages"],
            &body,
            &headers,
            KeyHeader::Named("x-api-key"),
        )
    }
}

impl Llm for Anthropic {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let stream_request = self.stream_request(&request);
        self.endpoint.stream(stream_request, decode::MessagesDecoder::default())
    }
}

impl HttpProvider for Anthropic {
    const ENV: (&'static str, &'static str) = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL");

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
