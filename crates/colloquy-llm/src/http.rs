//! The HTTP side every provider crate shares (feature `http`): one reqwest client on rustls
//! with ring, a POST whose body is a server-sent-event stream, retries with backoff before the
//! first event, timeouts, and the key kept out of every error.
//!
//! A provider supplies only a [`SseDecoder`] (its events → [`LlmChunk`]s) and the request.
//! The request runs in a task whose stream is returned; dropping the stream aborts the task,
//! which cancels the request.

use std::fmt;
use std::sync::{Arc, Once};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc;

use crate::{LlmChunk, LlmError, LlmStream};

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

/// A provider that cannot be configured from the environment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
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

/// A provider's settings from the environment: its key and base URL (empty counts as unset).
/// Fails when both are missing.
pub fn from_env(
    key_var: &'static str,
    base_var: &'static str,
) -> Result<(Option<ApiKey>, Option<String>), ConfigError> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.trim().is_empty());
    let (key, base) = (var(key_var), var(base_var));
    if key.is_none() && base.is_none() {
        return Err(ConfigError::MissingKey { key_var, base_var });
    }
    Ok((key.map(ApiKey::new), base.map(|b| b.trim().trim_end_matches('/').to_string())))
}

/// The model named by `COLLOQUY_MODEL`, if set.
pub fn model_from_env() -> Option<String> {
    std::env::var("COLLOQUY_MODEL").ok().filter(|m| !m.trim().is_empty())
}

/// A transport built on first use, so a provider's builder is infallible and its options can
/// change until the first request.
#[derive(Clone, Debug, Default)]
pub struct LazyTransport {
    options: HttpOptions,
    built: Arc<std::sync::OnceLock<Result<HttpTransport, LlmError>>>,
}

impl LazyTransport {
    /// Replaces the options (a fresh transport is built at the next request).
    pub fn set_options(&mut self, options: HttpOptions) {
        *self = LazyTransport { options, built: Arc::default() };
    }

    /// The options.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// Streams `request` (see [`HttpTransport::stream`]); a client that cannot be built is
    /// the stream's error.
    pub fn stream(
        &self,
        request: Result<StreamRequest, LlmError>,
        key: Option<ApiKey>,
        decoder: impl SseDecoder,
    ) -> LlmStream {
        let built = self.built.get_or_init(|| HttpTransport::new(self.options.clone()));
        let failed = |e: LlmError| -> LlmStream {
            Box::pin(futures_util::stream::iter([LlmChunk::Error(e)]))
        };
        match (built, request) {
            (Ok(transport), Ok(request)) => transport.stream(request, key, decoder),
            (Err(e), _) => failed(e.clone()),
            (_, Err(e)) => failed(e),
        }
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

/// A reqwest client and the options it was built with; cheap to clone.
#[derive(Clone, Debug)]
pub struct HttpTransport {
    client: reqwest::Client,
    options: HttpOptions,
}

impl HttpTransport {
    /// A client with these options. Installs ring as the process's rustls provider unless
    /// one is installed already (the workspace builds reqwest without one).
    pub fn new(options: HttpOptions) -> Result<Self, LlmError> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .read_timeout(options.read_timeout)
            .build()
            .map_err(|e| LlmError::Connect { detail: format!("cannot build the client: {e}") })?;
        Ok(Self { client, options })
    }

    /// The options.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// Sends `request` and streams its decoded events. Errors are redacted with `key`.
    pub fn stream(
        &self,
        request: StreamRequest,
        key: Option<ApiKey>,
        decoder: impl SseDecoder,
    ) -> LlmStream {
        let (tx, rx) = mpsc::channel(64);
        let attempt = Attempt { transport: self.clone(), request, key, tx };
        let task = tokio::spawn(attempt.run(decoder));
        Box::pin(TaskStream { rx, task })
    }
}

/// The receiving end; dropping it aborts the request's task.
struct TaskStream {
    rx: mpsc::Receiver<LlmChunk>,
    task: tokio::task::JoinHandle<()>,
}

impl futures_core::Stream for TaskStream {
    type Item = LlmChunk;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<LlmChunk>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for TaskStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Attempt {
    transport: HttpTransport,
    request: StreamRequest,
    key: Option<ApiKey>,
    tx: mpsc::Sender<LlmChunk>,
}

impl Attempt {
    async fn run(self, mut decoder: impl SseDecoder) {
        let options = &self.transport.options;
        let mut attempt = 0;
        let result = loop {
            match self.first_event().await {
                Ok(stream) => break self.flow(stream, &mut decoder).await,
                Err((error, retry_after)) => {
                    let wait = backoff(options, attempt, retry_after);
                    match wait {
                        Some(wait) if error.is_retryable() && attempt < options.max_retries => {
                            tracing::info!(attempt, ?wait, "LLM request failed, retrying: {error}");
                            tokio::time::sleep(wait).await;
                            attempt += 1;
                        }
                        _ => break Err(error),
                    }
                }
            }
        };
        if let Err(error) = result {
            let _ = self.tx.send(LlmChunk::Error(error)).await;
        }
    }

    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) => key.redact(text),
            None => text.to_string(),
        }
    }

    /// Sends the request and waits for its first event, within the first-token timeout.
    async fn first_event(&self) -> Result<FirstEvent, (LlmError, Option<Duration>)> {
        let limit = self.transport.options.first_token_timeout;
        let timeout = || (LlmError::Timeout { waited: limit }, None);
        let started = async {
            let request = self
                .transport
                .client
                .post(&self.request.url)
                .headers(self.request.headers.clone())
                .body(self.request.body.clone());
            let response = request.send().await.map_err(|e| (self.transport_error(&e), None))?;
            let status = response.status();
            if !status.is_success() {
                let retry_after = retry_after(response.headers());
                let body = response.text().await.unwrap_or_default();
                let body = self.redact(&body);
                return Err((
                    LlmError::from_status(status.as_u16(), &body, retry_after),
                    retry_after,
                ));
            }
            let mut events = response.bytes_stream().eventsource().map(|event| {
                event.map_err(|e| match e {
                    eventsource_stream::EventStreamError::Transport(e) => error_chain(&e),
                    other => other.to_string(),
                })
            });
            let first = events.next().await;
            Ok(FirstEvent { first, rest: Box::pin(events) })
        };
        let first = tokio::time::timeout(limit, started).await.map_err(|_| timeout())??;
        // A body that broke or ended before any event: nothing flowed, so it may be retried.
        match &first.first {
            Some(Ok(_)) => Ok(first),
            Some(Err(e)) => Err((self.cut(e.clone()), None)),
            None => Err((self.cut("the response ended before any event".into()), None)),
        }
    }

    /// Decodes events until the response ends; from here on nothing is retried.
    async fn flow(
        &self,
        stream: FirstEvent,
        decoder: &mut impl SseDecoder,
    ) -> Result<(), LlmError> {
        let FirstEvent { first, mut rest } = stream;
        let mut next = first;
        let mut out = Vec::new();
        loop {
            let done = match next {
                None => {
                    decoder.end_of_body(&mut out)?;
                    true
                }
                Some(Err(e)) => return Err(self.cut(e)),
                Some(Ok(event)) => decoder.event(&event.event, &event.data, &mut out)?,
            };
            for chunk in out.drain(..) {
                if self.tx.send(chunk).await.is_err() {
                    return Ok(()); // the stream was dropped
                }
            }
            if done {
                let _ = self.tx.send(LlmChunk::End).await;
                return Ok(());
            }
            next = rest.next().await;
        }
    }

    fn cut(&self, detail: String) -> LlmError {
        LlmError::StreamCut { detail: self.redact(&detail) }
    }

    fn transport_error(&self, e: &reqwest::Error) -> LlmError {
        let detail = self.redact(&error_chain(e));
        match e.is_timeout() {
            true => LlmError::Timeout { waited: self.transport.options.connect_timeout },
            false => LlmError::Connect { detail },
        }
    }
}

type EventResult = Result<eventsource_stream::Event, String>;

struct FirstEvent {
    first: Option<EventResult>,
    rest: std::pin::Pin<Box<dyn futures_core::Stream<Item = EventResult> + Send>>,
}

/// An error with its sources, which say what really failed (refused, reset, DNS).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The wait before attempt `attempt + 1`; `None` when the server asks for longer than the
/// options allow.
fn backoff(options: &HttpOptions, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
    match retry_after {
        Some(wait) if wait > options.max_backoff => None,
        Some(wait) => Some(wait),
        None => {
            let doubled = options.initial_backoff.saturating_mul(1 << attempt.min(16));
            Some(doubled.min(options.max_backoff))
        }
    }
}

/// `retry-after-ms` (OpenAI's), else `retry-after` in seconds (an HTTP date is ignored: the
/// backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let wait = match number("retry-after-ms") {
        Some(ms) => ms / 1000.0,
        None => number("retry-after")?,
    };
    Duration::try_from_secs_f64(wait).ok()
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

    #[test]
    fn backoff_doubles_and_honours_retry_after_up_to_the_cap() {
        let o = HttpOptions::default();
        assert_eq!(backoff(&o, 0, None), Some(Duration::from_millis(500)));
        assert_eq!(backoff(&o, 2, None), Some(Duration::from_secs(2)));
        assert_eq!(backoff(&o, 10, None), Some(o.max_backoff));
        assert_eq!(backoff(&o, 0, Some(Duration::from_secs(3))), Some(Duration::from_secs(3)));
        assert_eq!(backoff(&o, 0, Some(Duration::from_secs(60))), None);
    }

    #[test]
    fn retry_after_reads_milliseconds_or_seconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        h.clear();
        h.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), None);
    }
}
