//! A server at a streamable HTTP endpoint: rmcp's transport, over a client of colloquy's
//! ([`Screening`]) that gives HTTP what the stdio relay gives stdio (`frames.rs`):
//!
//! - a tool list rmcp could not read (a tool's schema nested past serde_json's depth limit) is
//!   rewritten without those tools, which are reported, so the others load: in each SSE event
//!   (the events as rmcp's own reqwest client parses them), and in a `tools/list` answer sent
//!   as a JSON body, which this client reads itself (rmcp's parses a body before any client
//!   could see it, and one unreadable tool failed the whole listing);
//! - an answer over [`MAX_MESSAGE`] (a JSON body, an SSE event), which rmcp stops reading and
//!   ends the call with an error of its own, is reported to the call it answered, which then
//!   says so as the stdio transport's does.
//!
//! Everything else is rmcp's reqwest client, unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::ready;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde_json::Value;
use sse_stream::{Sse, SseStream};

use crate::client::{Dropped, Edges};
use crate::frames::{MAX_MESSAGE, Screened, Target, screen};

type Error = StreamableHttpError<reqwest::Error>;
type Events = BoxStream<'static, Result<Sse, SseError>>;

/// How many redirects a request follows (same origin, method and body kept), as rmcp's own
/// client does.
const MAX_REDIRECTS: usize = 10;

/// rmcp's streamable HTTP transport to `url`, over a [`Screening`] client; a message may have
/// [`MAX_MESSAGE`] bytes (a JSON body, an SSE event).
pub(crate) fn transport(
    server: &str,
    url: &str,
    edges: Arc<Edges>,
) -> StreamableHttpClientTransport<Screening> {
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .max_sse_event_size(MAX_MESSAGE)
        .max_json_response_size(MAX_MESSAGE);
    StreamableHttpClientTransport::with_client(Screening::new(server, edges), config)
}

/// rmcp's reqwest client, with what the server answers screened (see the module docs).
#[derive(Clone)]
pub(crate) struct Screening {
    http: reqwest::Client,
    server: Arc<str>,
    edges: Arc<Edges>,
}

impl Screening {
    fn new(server: &str, edges: Arc<Edges>) -> Self {
        // rustls without a built-in provider, as the LLM transport: ring, installed here
        // unless the host installed one (docs/decisions.md).
        let _ = rustls::crypto::ring::default_provider().install_default();
        // As rmcp's default client (private): no idle connections kept (reusing one whose last
        // body was not read to its end stalls ~40 ms on Linux), and only redirects that keep
        // the method, the body and the origin (others would lose the message or hand the
        // session to another host).
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(
                attempt.status(),
                StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("exceeded {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .unwrap_or_default();
        Self { http, server: server.into(), edges }
    }

    /// `events` with each tool list screened; an event over the size limit reported as a
    /// dropped message for `target`.
    fn screened(&self, events: Events, target: Target) -> Events {
        let this = self.clone();
        events
            .map(move |event| match event {
                Ok(mut event) => {
                    event.data = event.data.map(|data| this.screen_text(data));
                    Ok(event)
                }
                Err(error) => {
                    // rmcp's limit error is private: told apart by its text. Were that to
                    // change, the call would end with rmcp's own error instead.
                    if matches!(&error, SseError::Body(e) if e.to_string().contains("exceeded the maximum size"))
                    {
                        this.edges.dropped(&this.server, Dropped { target: target.clone(), bytes: None });
                    }
                    Err(error)
                }
            })
            .boxed()
    }

    fn screen_text(&self, data: String) -> String {
        match screen(data.as_bytes()) {
            Screened::Pass => data,
            Screened::Rewritten { message, skipped } => {
                self.edges.unreadable(&self.server, skipped);
                String::from_utf8(message).unwrap_or(data)
            }
        }
    }

    /// Posts a `tools/list` request: as rmcp's client does, but a JSON answer is read here and
    /// screened before it is parsed.
    async fn post_tool_list(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let target = target(&message);
        let mut request = self
            .http
            .post(uri.as_ref())
            .header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        if let Some(session_id) = &session_id {
            request = request.header(HEADER_SESSION_ID, session_id.as_ref());
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        let response = request.json(&message).send().await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired); // rmcp starts a new session
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted); // the answer comes on the GET stream
        }
        let kind = response.headers().get(CONTENT_TYPE).and_then(media_type);
        if !status.is_success() {
            let body = read(response, limits.max_error_response_size).await.unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {status}: {body}").into(),
            ));
        }
        let session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        match kind.as_deref() {
            Some(EVENT_STREAM_MIME_TYPE) => {
                // The whole stream is bounded here (rmcp's per-event bound is its own): a
                // tool list's stream carries the list and a few notifications.
                let body = bounded(response.bytes_stream(), limits.max_sse_event_size);
                let events = SseStream::from_bytes_stream(body).boxed();
                Ok(StreamableHttpPostResponse::Sse(self.screened(events, target), session))
            }
            Some(JSON_MIME_TYPE) => {
                let body = match read(response, limits.max_json_response_size).await {
                    Ok(body) => body,
                    Err(BodyError::Read(e)) => return Err(StreamableHttpError::Client(e)),
                    Err(BodyError::TooLong(max_size)) => {
                        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size });
                    }
                };
                let body = match screen(&body) {
                    Screened::Pass => body,
                    Screened::Rewritten { message, skipped } => {
                        self.edges.unreadable(&self.server, skipped);
                        message
                    }
                };
                let parsed =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body).map_err(|e| {
                        StreamableHttpError::UnexpectedServerResponse(
                            format!("the tool list could not be read: {e}").into(),
                        )
                    })?;
                Ok(StreamableHttpPostResponse::Json(parsed, session))
            }
            _ => Err(StreamableHttpError::UnexpectedContentType(kind)),
        }
    }
}

impl StreamableHttpClient for Screening {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let limits = limits(MAX_MESSAGE);
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let limits = limits(max_sse_event_size);
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        if is_tool_list(&message) {
            return self
                .post_tool_list(uri, message, session_id, auth_header, custom_headers, limits)
                .await;
        }
        let target = target(&message);
        let response = self
            .http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        match response {
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                Ok(StreamableHttpPostResponse::Sse(self.screened(events, target), session))
            }
            Err(error @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                self.edges.dropped(&self.server, Dropped { target, bytes: None });
                Err(error)
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.http.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, Error> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            MAX_MESSAGE,
        )
        .await
    }

    /// The server's own stream, or a response stream resumed: whom a dropped event answered
    /// is not known, so every call in flight hears of it.
    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, Error> {
        let events = self
            .http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.screened(events, Target::Unknown))
    }
}

fn limits(max_sse_event_size: usize) -> StreamableHttpResponseLimits {
    let mut limits = StreamableHttpResponseLimits::default();
    limits.max_sse_event_size = max_sse_event_size;
    limits.max_json_response_size = MAX_MESSAGE;
    limits
}

fn is_tool_list(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::ListToolsRequest(_)))
}

/// Whom the answer to `message` is for: a request's id, as the call that sent it knows it.
fn target(message: &ClientJsonRpcMessage) -> Target {
    match message {
        ClientJsonRpcMessage::Request(request) => {
            Target::Response(serde_json::to_value(&request.id).unwrap_or(Value::Null))
        }
        _ => Target::NotAResponse,
    }
}

/// A `Content-Type`'s media type, without parameters, in lower case.
fn media_type(value: &HeaderValue) -> Option<String> {
    let value = value.to_str().ok()?;
    Some(value.split(';').next()?.trim().to_ascii_lowercase())
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error(transparent)]
    Read(reqwest::Error),
    #[error("the MCP server's answer is over {0} bytes")]
    TooLong(usize),
}

/// `body`, ending with an error once it has passed `limit` bytes.
fn bounded<B: AsRef<[u8]>>(
    body: impl Stream<Item = reqwest::Result<B>>,
    limit: usize,
) -> impl Stream<Item = Result<B, BodyError>> {
    body.scan((0usize, false), move |(seen, failed), chunk| {
        if *failed {
            return ready(None);
        }
        let item = match chunk {
            Ok(chunk) if *seen + chunk.as_ref().len() <= limit => {
                *seen += chunk.as_ref().len();
                Ok(chunk)
            }
            Ok(_) => Err(BodyError::TooLong(limit)),
            Err(e) => Err(BodyError::Read(e)),
        };
        *failed = item.is_err();
        ready(Some(item))
    })
}

/// A whole body, up to `limit` bytes.
async fn read(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut chunks = std::pin::pin!(bounded(response.bytes_stream(), limit));
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(&chunk?);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;

    fn deep(n: usize) -> String {
        format!("{}{{}}{}", r#"{"items":"#.repeat(n), "}".repeat(n))
    }

    #[tokio::test]
    async fn a_tool_list_in_an_sse_event_loses_the_tools_rmcp_cannot_read() {
        let edges = Arc::new(Edges::default());
        let client = Screening::new("py", Arc::clone(&edges));
        let list = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[
                {{"name":"add","inputSchema":{{"type":"object"}}}},
                {{"name":"deep","inputSchema":{{"type":"object","properties":{{"x":{}}}}}}}]}}}}"#,
            deep(1000)
        );
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#;
        let events: Events = stream::iter([
            Ok(Sse::default().data(note)),
            Ok(Sse::default().event("message").id("7").data(list)),
        ])
        .boxed();
        let out: Vec<Sse> = client
            .screened(events, Target::Unknown)
            .map(|event| event.expect("an event"))
            .collect()
            .await;
        assert_eq!(out[0].data.as_deref(), Some(note));
        let message: Value = serde_json::from_str(out[1].data.as_deref().unwrap()).unwrap();
        assert_eq!(message["result"]["tools"].as_array().unwrap().len(), 1);
        assert_eq!(message["result"]["tools"][0]["name"], "add");
        assert_eq!((out[1].event.as_deref(), out[1].id.as_deref()), (Some("message"), Some("7")));
        let skipped = edges.take_unreadable();
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].starts_with("`deep`: its schema is nested too deep"), "{skipped:?}");
    }

    #[tokio::test]
    async fn a_body_ends_with_an_error_past_its_limit() {
        let chunks = || stream::iter([Ok::<_, reqwest::Error>(vec![0u8; 6]), Ok(vec![0u8; 6])]);
        let items: Vec<_> = bounded(chunks(), 11).collect().await;
        assert_eq!(items.len(), 2);
        assert!(matches!(items[1], Err(BodyError::TooLong(11))));
        let items: Vec<_> = bounded(chunks(), 12).collect().await;
        assert!(items.iter().all(Result::is_ok) && items.len() == 2);
    }

    #[test]
    fn a_media_type_is_read_without_its_parameters() {
        let json = HeaderValue::from_static("Application/JSON; charset=utf-8");
        assert_eq!(media_type(&json).as_deref(), Some(JSON_MIME_TYPE));
    }
}
