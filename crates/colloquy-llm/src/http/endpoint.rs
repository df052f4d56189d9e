//! Where a provider sends its requests: key, base URL, model and a client built on first use,
//! read from the environment the way the official SDKs read it.

use std::fmt;
use std::sync::{Arc, OnceLock};

use reqwest::Url;

use super::key::{ApiKey, redact_url};
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
/// endpoint.set_base_url("http://me:secret@127.0.0.1:8000/v1?api-version=1");
/// let url = endpoint.url(&["chat", "completions"]).unwrap();
/// assert_eq!(url.path(), "/v1/chat/completions");
/// assert_eq!(url.query(), Some("api-version=1"));
/// assert_eq!(endpoint.redacted_base_url(), "http://127.0.0.1:8000/v1?api-version=1");
/// ```
#[derive(Clone)]
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

    /// The base URL, without a trailing `/`, as set: credentials in it included, so print
    /// [`Endpoint::redacted_base_url`] instead.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The base URL without its `user:password@` part, for banners and logs.
    pub fn redacted_base_url(&self) -> String {
        redact_url(&self.base_url)
    }

    /// The URL of `path` under the base URL: its segments appended to the base's path, and
    /// the base's query kept (`http://h/v1?api-version=1` + `chat/completions` is
    /// `http://h/v1/chat/completions?api-version=1`). A base URL that is not an `http` or
    /// `https` URL is an error naming it without its credentials.
    pub fn url(&self, path: &[&str]) -> Result<Url, LlmError> {
        let shown = || self.redacted_base_url();
        let invalid =
            |why: String| LlmError::Connect { detail: format!("the base URL `{}` {why}", shown()) };
        let mut url =
            Url::parse(&self.base_url).map_err(|e| invalid(format!("is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("does not start with http:// or https://".into()));
        }
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|()| invalid("cannot have a path".into()))?
            .pop_if_empty()
            .extend(path);
        Ok(url)
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

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("key", &self.key)
            .field("base_url", &self.redacted_base_url())
            .field("model", &self.model)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How a provider sends its API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHeader {
    /// `Authorization: Bearer <key>` (OpenAI and the servers compatible with it).
    Bearer,
    /// The key as this header's value (Anthropic's `x-api-key`).
    Named(&'static str),
}

impl Endpoint {
    /// The streaming request of a provider: `body` as JSON to `path` under the base URL, with
    /// `headers` and the key (if one is set) sent as `key` says. The key's header is marked
    /// sensitive, so it never prints.
    pub fn json_request(
        &self,
        path: &[&str],
        body: &serde_json::Value,
        headers: &[(&'static str, &str)],
        key: KeyHeader,
    ) -> Result<StreamRequest, LlmError> {
        let mut request = StreamRequest::json(self.url(path)?, body);
        for (name, value) in headers {
            request = request.header(name, value)?;
        }
        match (self.key(), key) {
            (None, _) => Ok(request),
            (Some(k), KeyHeader::Bearer) => {
                request.header("authorization", &format!("Bearer {}", k.expose()))
            }
            (Some(k), KeyHeader::Named(name)) => request.header(name, k.expose()),
        }
    }
}

/// The builder methods every HTTP provider has, over its `endpoint: Endpoint` field: the key,
/// the base URL, the model, the transport's options, and the model's name and URL as set. Used
/// inside the provider's `impl` block, with what differs between providers as docs:
///
/// ```ignore
/// impl OpenAi {
///     colloquy_llm::endpoint_builder!(
///         key = "The API key (sent as `Authorization: Bearer …`).",
///         base_url = "The base URL, including `/v1` (`http://127.0.0.1:8000/v1`)."
///     );
/// }
/// ```
#[macro_export]
macro_rules! endpoint_builder {
    (key = $key_doc:literal, base_url = $base_doc:literal) => {
        #[doc = $key_doc]
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.endpoint.set_key(key);
            self
        }

        #[doc = $base_doc]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.endpoint.set_base_url(url);
            self
        }

        /// The model.
        pub fn model(mut self, model: impl Into<String>) -> Self {
            self.endpoint.set_model(model);
            self
        }

        /// Timeouts and retries.
        pub fn http_options(mut self, options: $crate::http::HttpOptions) -> Self {
            self.endpoint.set_options(options);
            self
        }

        /// The model's name.
        pub fn model_name(&self) -> &str {
            self.endpoint.model()
        }

        /// The base URL as set, credentials included: show
        /// [`Endpoint::redacted_base_url`]($crate::http::Endpoint::redacted_base_url) instead
        /// (through [`HttpProvider::endpoint`]($crate::http::HttpProvider::endpoint)).
        pub fn url(&self) -> &str {
            self.endpoint.base_url()
        }
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn url(base: &str, path: &[&str]) -> Result<String, String> {
        let mut endpoint = Endpoint::new("http://unused", "m");
        endpoint.set_base_url(base);
        endpoint.url(path).map(String::from).map_err(|e| e.to_string())
    }

    #[test]
    fn paths_join_the_base_and_keep_its_query() {
        let chat = ["chat", "completions"];
        assert_eq!(url("http://h/v1", &chat).unwrap(), "http://h/v1/chat/completions");
        assert_eq!(url("http://h/v1/", &chat).unwrap(), "http://h/v1/chat/completions");
        assert_eq!(
            url("http://h/v1?api-version=1", &chat).unwrap(),
            "http://h/v1/chat/completions?api-version=1"
        );
        assert_eq!(
            url("https://h/openai/v1/?api-version=1#x", &chat).unwrap(),
            "https://h/openai/v1/chat/completions?api-version=1"
        );
        assert_eq!(url("http://h:8080", &["v1", "messages"]).unwrap(), "http://h:8080/v1/messages");
        assert_eq!(
            url("http://h:8080?beta=1", &["v1", "messages"]).unwrap(),
            "http://h:8080/v1/messages?beta=1"
        );
    }

    #[test]
    fn a_base_that_is_not_an_http_url_is_an_error_without_its_credentials() {
        let e = url("localhost:8000/v1", &["x"]).unwrap_err();
        assert!(e.contains("`localhost:8000/v1` does not start with http://"), "{e}");
        let e = url("http://me:pw@[::1/v1", &["x"]).unwrap_err();
        assert!(e.contains("is not a URL") && !e.contains("pw"), "{e}");
    }

    #[test]
    fn credentials_in_a_url_never_print() {
        assert_eq!(redact_url("http://me:pw@h:1/v1?q=1"), "http://h:1/v1?q=1");
        assert_eq!(redact_url("http://me:pw@h"), "http://h");
        assert_eq!(redact_url("http://me@h/"), "http://h/");
        assert_eq!(redact_url("http://h/v1"), "http://h/v1");
        assert_eq!(redact_url("http://me:p@w@[bad/v1"), "http://[bad/v1");
        let mut endpoint = Endpoint::new("http://me:hunter2@h/v1", "m");
        endpoint.set_key("sk-x");
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("sk-x"), "{shown}");
    }
}
