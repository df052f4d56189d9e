//! A server on 127.0.0.1 that answers each POST with the next recorded reply: a status, its
//! headers, and a body sent event by event, with pauses or a cut connection where the
//! recording says. Tests point a provider adapter at it and read back what was sent.
//!
//! A recorded stream is a server-sent-event text. Two comment lines, which a client would
//! ignore anyway, steer the replay: `: pause MS` waits before the next event, `: cut` aborts
//! the connection mid-body (no final chunk, as when a server dies). A `\xHH` is sent as that
//! raw byte, for streams that are not valid UTF-8 (JSON has no `\x` escape, so no recording of
//! valid JSON holds one).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use colloquy_replay::{Reply, ReplayServer};
//! let server = ReplayServer::start(vec![Reply::status(429, "slow down")]).await.unwrap();
//! assert!(server.base_url().starts_with("http://127.0.0.1:"));
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use colloquy_ops::{Listener, OpsServer, ServeOptions};
use futures_util::stream;

/// One step of a reply's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Bytes sent as one chunk.
    Send(Vec<u8>),
    /// A wait before the next part.
    Pause(Duration),
    /// The connection is aborted here.
    Cut,
}

/// One recorded answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, in parts.
    pub parts: Vec<Part>,
}

impl Reply {
    /// A `200 text/event-stream` reply from a recorded stream (see the crate comment).
    pub fn sse(recording: &str) -> Self {
        let mut parts = Vec::new();
        let normalized = recording.replace("\r\n", "\n");
        for block in normalized.split("\n\n") {
            let mut event = String::new();
            for line in block.lines() {
                if let Some(ms) = line.strip_prefix(": pause ") {
                    flush(&mut parts, &mut event);
                    let ms = ms.trim().parse().unwrap_or_else(|_| panic!("bad pause `{line}`"));
                    parts.push(Part::Pause(Duration::from_millis(ms)));
                } else if line.trim() == ": cut" {
                    flush(&mut parts, &mut event);
                    parts.push(Part::Cut);
                } else if !line.is_empty() {
                    event.push_str(line);
                    event.push('\n');
                }
            }
            flush(&mut parts, &mut event);
        }
        let headers = vec![("content-type".into(), "text/event-stream".into())];
        Reply { status: 200, headers, parts }
    }

    /// A reply with a status and a plain body.
    pub fn status(status: u16, body: &str) -> Self {
        Reply::body(status, "application/json", body)
    }

    /// A reply with a status, a content type and a body.
    pub fn body(status: u16, content_type: &str, body: &str) -> Self {
        let headers = vec![("content-type".into(), content_type.into())];
        Reply { status, headers, parts: vec![Part::Send(body.into())] }
    }

    /// Replaces the `content-type` header; `None` sends none.
    pub fn content_type(mut self, value: Option<&str>) -> Self {
        self.headers.retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
        if let Some(value) = value {
            self.headers.push(("content-type".into(), value.into()));
        }
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Waits before the first byte of the body (the headers go out at once).
    pub fn pause_first(mut self, pause: Duration) -> Self {
        self.parts.insert(0, Part::Pause(pause));
        self
    }
}

fn flush(parts: &mut Vec<Part>, event: &mut String) {
    if !event.is_empty() {
        event.push('\n');
        parts.push(Part::Send(raw_bytes(&std::mem::take(event))));
    }
}

/// The text's bytes, each `\xHH` (not preceded by another backslash) replaced by the byte it names.
fn raw_bytes(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        let hex = tail.get(1..3).and_then(|h| std::str::from_utf8(h).ok());
        match (first, tail.first(), hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'\\', Some(b'x'), Some(byte)) => {
                bytes.push(byte);
                rest = &tail[3..];
            }
            // An escaped backslash (`\\x41` in JSON) is two characters, not an escape.
            (b'\\', Some(b'\\'), _) => {
                bytes.extend_from_slice(b"\\\\");
                rest = &tail[1..];
            }
            _ => {
                bytes.push(first);
                rest = tail;
            }
        }
    }
    bytes
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The method.
    pub method: String,
    /// The path, with the query.
    pub path: String,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: serde_json::Value,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Log {
    replies: Vec<Reply>,
    received: Vec<Received>,
}

/// The running server; it stops when dropped.
pub struct ReplayServer {
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    /// Stops in the background when dropped.
    _server: OpsServer,
}

impl ReplayServer {
    /// Listens on 127.0.0.1 (a free port) and answers requests with `replies` in order; a
    /// request past the end gets a 500 that says so.
    pub async fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        let listener = Listener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr();
        let log = Arc::new(Mutex::new(Log { replies, received: Vec::new() }));
        let app = axum::Router::new().fallback(answer).with_state(Arc::clone(&log));
        // A recording's pauses may outlast a scrape: no connection lifetime.
        let server = listener.serve(app, ServeOptions::default().connection_timeout(None));
        Ok(Self { addr, log, _server: server })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.log.lock().map(|l| l.received.clone()).unwrap_or_default()
    }
}

async fn answer(
    State(log): State<Arc<Mutex<Log>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        method: method.to_string(),
        path: uri.to_string(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    };
    let reply = {
        let mut log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = log.received.len();
        log.received.push(received);
        match log.replies.is_empty() {
            true => Reply::status(500, &format!("replay server: no reply left for request {n}")),
            false => log.replies.remove(0),
        }
    };
    respond(reply)
}

fn respond(reply: Reply) -> Response {
    let parts = stream::unfold(reply.parts.into_iter(), |mut parts| async move {
        loop {
            match parts.next()? {
                Part::Pause(pause) => tokio::time::sleep(pause).await,
                Part::Send(text) => return Some((Ok(Bytes::from(text)), parts)),
                Part::Cut => return Some((Err(std::io::Error::other("cut")), parts)),
            }
        }
    });
    let mut response = Response::new(Body::from_stream(parts));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::try_from(name.as_str()),
            axum::http::HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_escapes_become_raw_bytes() {
        assert_eq!(raw_bytes(r"caf\xff!"), b"caf\xff!");
        assert_eq!(raw_bytes(r"a\\x41 \xzz"), br"a\\x41 \xzz");
    }
}
