//! Sending a streaming request: attempts, retries before the first event, and the task
//! whose channel is the returned stream.

use std::sync::Once;
use std::time::Duration;

use colloquy_model::text::error_chain;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::key::ApiKey;
use super::options::HttpOptions;
use super::request::{SseDecoder, StreamRequest};
use super::utf8::LossyUtf8;

use crate::{LlmChunk, LlmError, LlmStream, excerpt};

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
        // A password in the URL is a secret like the key: reqwest sends it as basic auth, and a
        // server may echo it.
        let password = request.url.password().map(str::to_string);
        let decoded = password
            .as_deref()
            .map(|p| percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned());
        let secrets = [key, password.map(ApiKey::new), decoded.map(ApiKey::new)];
        let secrets = secrets.into_iter().flatten().filter(|s| !s.expose().is_empty()).collect();
        let attempt = Attempt { transport: self.clone(), request, secrets, tx };
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
    /// The key and the URL's password: redacted from every error text.
    secrets: Vec<ApiKey>,
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
        self.secrets.iter().fold(text.to_string(), |text, secret| secret.redact(&text))
    }

    /// Sends the request and waits for its first event, within the first-token timeout.
    async fn first_event(&self) -> Result<FirstEvent, (LlmError, Option<Duration>)> {
        let limit = self.transport.options.first_token_timeout;
        let timeout = || (LlmError::Timeout { waited: limit }, None);
        let started = async {
            let request = self
                .transport
                .client
                .post(self.request.url.clone())
                .headers(self.request.headers.clone())
                .body(self.request.body.clone());
            let response = request.send().await.map_err(|e| (self.transport_error(e), None))?;
            let status = response.status();
            if !status.is_success() {
                let retry_after = retry_after(response.headers());
                let body = self.body_start(response).await;
                return Err((
                    LlmError::from_status(status.as_u16(), &body, retry_after),
                    retry_after,
                ));
            }
            // A page or a JSON answer is no stream: said so once, not retried as a cut one.
            // A missing content type is read as a stream (decisions: provider streams).
            let content_type = response.headers().get(CONTENT_TYPE);
            let content_type = content_type.map(|v| String::from_utf8_lossy(v.as_bytes()));
            if let Some(content_type) = content_type.filter(|c| !is_event_stream(c)) {
                let content_type = excerpt(&self.redact(&content_type));
                let body = self.body_start(response).await;
                let message = format!(
                    "the LLM server answered HTTP {status} with `{content_type}` instead of an \
                     event stream (text/event-stream): {body}",
                    status = status.as_u16(),
                );
                return Err((LlmError::Provider { message }, None));
            }
            let body = Box::pin(lossy_utf8(response.bytes_stream()));
            let mut events = body.eventsource().map(|event| {
                event.map_err(|e| match e {
                    eventsource_stream::EventStreamError::Transport(e) => {
                        error_chain(&e.without_url())
                    }
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
        let stall = self.transport.options.stall_timeout;
        let stalled = || LlmError::Stalled { waited: stall };
        // From the first event; moved on by output only, once it is delivered (a slow
        // reader is not a stalled server).
        let mut deadline = Instant::now().checked_add(stall);
        let mut next = first;
        let mut out = Vec::new();
        loop {
            let (done, output) = match next {
                None => (decoder.end_of_body(&mut out).map(|()| true)?, false),
                Some(Err(e)) => return Err(self.cut(e)),
                Some(Ok(event)) => {
                    let done = decoder.event(&event.event, &event.data, &mut out)?;
                    (done, decoder.unseen_output() || out.iter().any(is_output))
                }
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
            if output {
                deadline = Instant::now().checked_add(stall);
            }
            next = match deadline {
                None => rest.next().await,
                Some(deadline) => match tokio::time::timeout_at(deadline, rest.next()).await {
                    // The read timeout may fire at the same instant: the stall is the cause.
                    Ok(Some(Err(_))) if Instant::now() >= deadline => return Err(stalled()),
                    Ok(next) => next,
                    Err(_) => return Err(stalled()),
                },
            };
        }
    }

    /// The start of a body that is not a stream, for an error: at most [`BODY_READ`] bytes
    /// read, decoded lossily, redacted, cut to an excerpt. When the read stopped at the limit,
    /// its last bytes go too, so a secret cut in two cannot escape the redaction.
    async fn body_start(&self, mut response: reqwest::Response) -> String {
        let mut bytes = Vec::new();
        let mut more = false;
        while let Ok(Some(chunk)) = response.chunk().await {
            bytes.extend_from_slice(&chunk);
            if bytes.len() >= BODY_READ {
                more = true;
                break;
            }
        }
        if more {
            let longest = self.secrets.iter().map(|s| s.expose().len()).max().unwrap_or(0);
            bytes.truncate(BODY_READ.saturating_sub(longest));
        }
        excerpt(&self.redact(&String::from_utf8_lossy(&bytes)))
    }

    fn cut(&self, detail: String) -> LlmError {
        LlmError::StreamCut { detail: self.redact(&detail) }
    }

    /// The error without its URL: the user knows it, and its query may hold a secret.
    fn transport_error(&self, e: reqwest::Error) -> LlmError {
        let timeout = e.is_timeout();
        let detail = self.redact(&error_chain(&e.without_url()));
        match timeout {
            true => LlmError::Timeout { waited: self.transport.options.connect_timeout },
            false => LlmError::Connect { detail },
        }
    }
}

/// Whether a chunk is the model's output: text, or a tool call's name or arguments. An empty
/// delta, usage or a finish reason is not.
fn is_output(chunk: &LlmChunk) -> bool {
    match chunk {
        LlmChunk::Text(text) => !text.is_empty(),
        LlmChunk::ToolCall(call) => {
            !call.arguments.is_empty() || call.name.as_ref().is_some_and(|n| !n.is_empty())
        }
        _ => false,
    }
}

/// The body with invalid UTF-8 replaced by U+FFFD (one warning per response): a bad byte
/// costs a character, not the turn, as it would if the stream were cut there.
fn lossy_utf8<B: AsRef<[u8]>>(
    body: impl futures_core::Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, reqwest::Error>> + Send + 'static {
    let state = (Box::pin(body), LossyUtf8::default(), false);
    futures_util::stream::unfold(state, |(mut body, mut utf8, ended)| async move {
        if ended {
            return None;
        }
        let before = utf8.replaced;
        let (item, ended) = match body.next().await {
            Some(Ok(chunk)) => (Ok(utf8.push(chunk.as_ref())), false),
            Some(Err(e)) => (Err(e), false),
            None => match utf8.finish() {
                tail if tail.is_empty() => return None,
                tail => (Ok(tail), true),
            },
        };
        if before == 0 && utf8.replaced > 0 {
            tracing::warn!(
                "the LLM stream is not valid UTF-8: invalid bytes are read as U+FFFD (\u{FFFD}) \
                 and the response goes on"
            );
        }
        Some((item, (body, utf8, ended)))
    })
}

/// How much of a body that is not a stream is read for its error (the excerpt is shorter).
const BODY_READ: usize = 4096;

/// `text/event-stream`, with or without parameters (`; charset=utf-8`), in any case.
fn is_event_stream(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default();
    essence.trim().eq_ignore_ascii_case("text/event-stream")
}

type EventResult = Result<eventsource_stream::Event, String>;

struct FirstEvent {
    first: Option<EventResult>,
    rest: std::pin::Pin<Box<dyn futures_core::Stream<Item = EventResult> + Send>>,
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
    use reqwest::header::HeaderValue;

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
    fn event_streams_are_known_by_their_media_type() {
        assert!(is_event_stream("text/event-stream"));
        assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
        assert!(!is_event_stream("text/html; charset=utf-8"));
        assert!(!is_event_stream("application/json"));
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
