//! Where a provider sends its requests: key, base URL, model and a client built on first use,
//! read from the environment the way the official SDKs read it.

use std::sync::{Arc, OnceLock};

use super::key::ApiKey;
use super::options::HttpOptions;
use super::request::{SseDecoder, StreamRequest};
use super::transport::HttpTransport;
use crate::{Llm, LlmChunk, LlmError, LlmStream};

/// A provider that cannot be configured from the environment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Neither a key nor a server that may need none.
    #[error(
        "no API key: set {key_var}, or {base_var} for a server that needs none (a local \
         OpenAI-compatible server, say)"
    )]
    MissingKey {
        /// The key's variable.
        key_var: &'static str,
        /// The base URL's variable.
        base_var: &'static str,
    },
}

/// A provider's key, base URL, model and HTTP client. The client is built at the first
/// request, so builders stay infallible and options can change until then; clones share it.
///
/// ```
/// use colloquy_llm::http::Endpoint;
/// let mut endpoint = Endpoint::new("https://api.example.com/v1", "small-model");
/// endpoint.set_base_url("http://127.0.0.1:8000/v1/");
/// assert_eq!(endpoint.base_url(), "http://127.0.0.1:8000/v1");
/// ```
#[derive(Clone, Debug)]
pub struct Endpoint {
    key: Option<ApiKey>,
    base_url: String,
    model: String,
    options: HttpOptions,
    client: Arc<OnceLock<Result<HttpTransport, LlmError>>>,
}

impl Endpoint {
    /// No key, this base URL, and `COLLOQUY_MODEL` or else `default_model`.
    pub fn new(base_url: &str, default_model: &str) -> Self {
        let model = env_var("COLLOQUY_MODEL").unwrap_or_else(|| default_model.to_string());
        Self {
            key: None,
            base_url: base_url.trim_end_matches('/').to_string(),
            model,
            options: HttpOptions::default(),
            client: Arc::default(),
        }
    }

    /// Takes the key and base URL from these variables (empty counts as unset); fails when
    /// both are missing.
    pub fn from_env(
        mut self,
        key_var: &'static str,
        base_var: &'static str,
    ) -> Result<Self, ConfigError> {
        let (key, base) = (env_var(key_var), env_var(base_var));
        if key.is_none() && base.is_none() {
            return Err(ConfigError::MissingKey { key_var, base_var });
        }
        if let Some(key) = key {
            self.set_key(key);
        }
        if let Some(base) = base {
            self.set_base_url(base.trim());
        }
        Ok(self)
    }

    /// Sets the API key.
    pub fn set_key(&mut self, key: impl Into<String>) {
        self.key = Some(ApiKey::new(key));
    }

    /// Sets the base URL (a trailing `/` is dropped).
    pub fn set_base_url(&mut self, url: impl Into<String>) {
        self.base_url = url.into().trim_end_matches('/').to_string();
    }

    /// Sets the model.
    pub fn set_model(&mut self, model: impl Into<String>) {
        self.model = model.into();
    }

    /// Sets timeouts and retries (a new client is built at the next request).
    pub fn set_options(&mut self, options: HttpOptions) {
        self.options = options;
        self.client = Arc::default();
    }

    /// The key, if any.
    pub fn key(&self) -> Option<&ApiKey> {
        self.key.as_ref()
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The model.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Timeouts and retries.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// Streams `request` through the shared client; a request that could not be made, or a
    /// client that could not be built, is the stream's error.
    pub fn stream(
        &self,
        request: Result<StreamRequest, LlmError>,
        decoder: impl SseDecoder,
    ) -> LlmStream {
        let client = self.client.get_or_init(|| HttpTransport::new(self.options.clone()));
        let failed = |e: LlmError| -> LlmStream {
            Box::pin(futures_util::stream::iter([LlmChunk::Error(e)]))
        };
        match (client, request) {
            (Ok(client), Ok(request)) => client.stream(request, self.key.clone(), decoder),
            (Err(e), _) => failed(e.clone()),
            (_, Err(e)) => failed(e),
        }
    }
}

/// A provider configured through an [`Endpoint`]: what code that picks a provider at run
/// time (a CLI flag, a config file) needs, whichever provider it is.
pub trait HttpProvider: Llm + Sized {
    /// The provider's variables for key and base URL, e.g. `("OPENAI_API_KEY",
    /// "OPENAI_BASE_URL")`.
    const ENV: (&'static str, &'static str);

    /// The provider with its default base URL and model, and no key.
    fn with_defaults() -> Self;

    /// Its endpoint.
    fn endpoint(&self) -> &Endpoint;

    /// Its endpoint, to change.
    fn endpoint_mut(&mut self) -> &mut Endpoint;

    /// The provider configured from [`Self::ENV`] and `COLLOQUY_MODEL`.
    fn configured_from_env() -> Result<Self, ConfigError> {
        let mut provider = Self::with_defaults();
        let (key_var, base_var) = Self::ENV;
        *provider.endpoint_mut() = provider.endpoint().clone().from_env(key_var, base_var)?;
        Ok(provider)
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
