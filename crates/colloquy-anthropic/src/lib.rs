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
//! transport's ([`HttpOptions`]).

pub mod decode;
pub mod request;

use colloquy_llm::http::{self, ApiKey, ConfigError, HttpOptions, LazyTransport, StreamRequest};
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
    key: Option<ApiKey>,
    base_url: String,
    model: String,
    options: RequestOptions,
    transport: LazyTransport,
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
            key: None,
            base_url: DEFAULT_BASE_URL.into(),
            model: http::model_from_env().unwrap_or_else(|| DEFAULT_MODEL.into()),
            options: RequestOptions::default(),
            transport: LazyTransport::default(),
        }
    }

    /// From `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (without `/v1`) and `COLLOQUY_MODEL`.
    /// Fails when neither the key nor the base URL is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        let (key, base) = http::from_env("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")?;
        let mut llm = Self::new();
        llm.key = key;
        if let Some(base) = base {
            llm.base_url = base;
        }
        Ok(llm)
    }

    /// The API key (sent as `x-api-key`).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(ApiKey::new(key));
        self
    }

    /// The base URL, without `/v1` (`http://127.0.0.1:8080`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_string();
        self
    }

    /// The model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

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

    /// Timeouts and retries.
    pub fn http_options(mut self, options: HttpOptions) -> Self {
        self.transport.set_options(options);
        self
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base_url
    }

    fn stream_request(&self, request: &LlmRequest) -> Result<StreamRequest, LlmError> {
        let body = request::body(&self.model, request, &self.options);
        let url = format!("{}/v1/messages", self.base_url);
        let request = StreamRequest::json(url, &body).header("anthropic-version", API_VERSION)?;
        match &self.key {
            Some(key) => request.header("x-api-key", key.expose()),
            None => Ok(request),
        }
    }
}

impl Llm for Anthropic {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let stream_request = self.stream_request(&request);
        self.transport.stream(stream_request, self.key.clone(), decode::MessagesDecoder::default())
    }
}
