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
//! ([`HttpOptions`]).

pub mod decode;
pub mod request;

use colloquy_llm::http::{self, ApiKey, ConfigError, HttpOptions, LazyTransport, StreamRequest};
use colloquy_llm::{Llm, LlmError, LlmRequest, LlmStream};

pub use request::RequestOptions;

/// OpenAI's API, the default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The model used when neither the builder nor `COLLOQUY_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

/// A Chat Completions model. Cloning shares the HTTP client.
#[derive(Clone, Debug)]
pub struct OpenAi {
    key: Option<ApiKey>,
    base_url: String,
    model: String,
    options: RequestOptions,
    transport: LazyTransport,
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
            key: None,
            base_url: DEFAULT_BASE_URL.into(),
            model: http::model_from_env().unwrap_or_else(|| DEFAULT_MODEL.into()),
            options: RequestOptions::default(),
            transport: LazyTransport::default(),
        }
    }

    /// From `OPENAI_API_KEY`, `OPENAI_BASE_URL` (which includes `/v1`) and `COLLOQUY_MODEL`.
    /// Fails when neither the key nor the base URL is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        let (key, base) = http::from_env("OPENAI_API_KEY", "OPENAI_BASE_URL")?;
        let mut llm = Self::new();
        llm.key = key;
        if let Some(base) = base {
            llm.base_url = base;
        }
        Ok(llm)
    }

    /// The API key (sent as `Authorization: Bearer …`).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(ApiKey::new(key));
        self
    }

    /// The base URL, including `/v1` (`http://127.0.0.1:8000/v1`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_string();
        self
    }

    /// The model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

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
        let url = format!("{}/chat/completions", self.base_url);
        let request = StreamRequest::json(url, &body);
        match &self.key {
            Some(key) => request.header("authorization", &format!("Bearer {}", key.expose())),
            None => Ok(request),
        }
    }
}

impl Llm for OpenAi {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let stream_request = self.stream_request(&request);
        self.transport.stream(
            stream_request,
            self.key.clone(),
            decode::ChatCompletionsDecoder::default(),
        )
    }
}
