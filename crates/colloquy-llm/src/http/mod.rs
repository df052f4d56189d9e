//! The HTTP side every provider crate shares (feature `http`): one reqwest client on rustls
//! with ring, a POST whose body is a server-sent-event stream, retries with backoff before the
//! first event, timeouts, and the key kept out of every error.
//!
//! A provider supplies only a [`SseDecoder`] (its events → [`LlmChunk`]s) and the request
//! ([`StreamRequest`]); its [`Endpoint`] holds the key, base URL, model and client. The
//! request runs in a task whose stream is returned; dropping the stream aborts the task,
//! which cancels the request.

mod endpoint;
mod transport;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::{LlmChunk, LlmError};

pub use endpoint::{ConfigError, Endpoint, HttpProvider};
pub use transport::HttpTransport;

/// A secret API key: shown as `***` by `Debug`, and removed from anything a server echoes.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(Arc::from(key.into()))
    }

    /// The key itself, for a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        match self.0.len() {
            0 => text.to_string(),
            _ => text.replace(&*self.0, "[redacted]"),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Timeouts and retries of a provider's requests.
///
/// ```
/// use colloquy_llm::http::HttpOptions;
/// use std::time::Duration;
/// let fast = HttpOptions { max_retries: 0, ..HttpOptions::default() };
/// assert_eq!(fast.first_token_timeout, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Connecting to the server (TCP and TLS).
    pub connect_timeout: Duration,
    /// From sending the request to the first event of the stream (a retryable failure).
    pub first_token_timeout: Duration,
    /// Between two reads of the body once the stream flows.
    pub read_timeout: Duration,
    /// New attempts after a retryable failure before the first event (0 = none).
    pub max_retries: u32,
    /// The first backoff; each later one doubles, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The longest backoff, and the longest `Retry-After` honoured (a longer one fails now).
    pub max_backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_token_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
        }
    }
}

/// Turns a provider's server-sent events into chunks.
pub trait SseDecoder: Send + 'static {
    /// One event (`name` is empty for unnamed events). Pushes chunks to `out`; returns true
    /// when the event ends the response (OpenAI's `[DONE]`, Anthropic's `message_stop`).
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<LlmChunk>) -> Result<bool, LlmError>;

    /// The body ended before an event said so: the last chunks, or why the stream counts as
    /// cut.
    fn end_of_body(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;
}

/// A POST to a streaming endpoint, ready to send (and send again).
#[derive(Clone, Debug)]
pub struct StreamRequest {
    /// Where to.
    pub url: String,
    /// Headers (the key among them).
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl StreamRequest {
    /// A request with the JSON body and `content-type: application/json`.
    pub fn json(url: String, body: &serde_json::Value) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        Self { url, headers, body: serde_json::to_vec(body).unwrap_or_default() }
    }

    /// Adds a header; a value that is not a valid header (a key with a newline) is an error
    /// that names the header, never the value.
    pub fn header(mut self, name: &'static str, value: &str) -> Result<Self, LlmError> {
        let mut value = HeaderValue::from_str(value).map_err(|_| LlmError::Provider {
            message: format!("the value of the `{name}` header is not a valid header value"),
        })?;
        value.set_sensitive(true);
        self.headers.insert(HeaderName::from_static(name), value);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_show() {
        let key = ApiKey::new("sk-secret");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(key.redact("bad key sk-secret!"), "bad key [redacted]!");
    }
}
