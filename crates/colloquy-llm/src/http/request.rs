//! What a provider hands the transport: the request to send, and the decoder of its events.

use std::fmt;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::key::redact_url;

use crate::{LlmChunk, LlmError};

/// Turns a provider's server-sent events into chunks.
pub trait SseDecoder: Send + 'static {
    /// One event (`name` is empty for unnamed events). Pushes chunks to `out`; returns true
    /// when the event ends the response (OpenAI's `[DONE]`, Anthropic's `message_stop`).
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<LlmChunk>) -> Result<bool, LlmError>;

    /// Whether the last event carried model output that no chunk shows: reasoning a provider
    /// streams and colloquy does not keep. It holds off the stall deadline
    /// ([`HttpOptions::stall_timeout`](super::HttpOptions::stall_timeout)) as text does; empty
    /// deltas, pings and usage do not. None by default.
    fn unseen_output(&self) -> bool {
        false
    }

    /// The body ended before an event said so: the last chunks, or why the stream counts as
    /// cut.
    fn end_of_body(&mut self, out: &mut Vec<LlmChunk>) -> Result<(), LlmError>;
}

/// A POST to a streaming endpoint, ready to send (and send again). `Debug` shows neither the
/// URL's credentials nor the sensitive headers.
#[derive(Clone)]
pub struct StreamRequest {
    /// Where to (from [`Endpoint::url`](super::Endpoint::url)).
    pub url: Url,
    /// Headers (the key among them).
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl StreamRequest {
    /// A request with the JSON body and `content-type: application/json`.
    pub fn json(url: Url, body: &serde_json::Value) -> Self {
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

impl fmt::Debug for StreamRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamRequest")
            .field("url", &redact_url(self.url.as_str()))
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}
