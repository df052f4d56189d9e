//! What a server sends a client over a session's WebSocket (docs/protocol.md): a greeting,
//! the session's events numbered from 1, the answers to the client's requests, errors about
//! frames it could not read or run, and a last word before it closes the socket. The HTTP
//! side answers its errors with the same [`ServerError`].

use colloquy_model::SessionEvent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::reply::Reply;

/// One frame from the server, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ServerMessage {
    /// The first frame of every connection.
    Hello {
        /// The server's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION).
        v: u32,
        /// The session's id.
        session_id: String,
        /// The agent it started with.
        agent: String,
        /// The cluster node that runs it; `null` in the server's process.
        node: Option<String>,
        /// The sequence number of its latest event when the client attached (0 before the
        /// first).
        last_seq: u64,
    },
    /// One event of the session: sequence numbers start at 1 and skip only behind a `gap`
    /// error frame (events lost on the way), so a client that remembers the last it saw
    /// resumes with `?after=` that number.
    Event {
        /// 1, 2, 3… per session.
        seq: u64,
        /// The event, as traces write it.
        event: SessionEvent,
    },
    /// The answer to a request.
    Reply {
        /// The request's `id`, if it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// The answer, its `reply` tag and fields at the frame's top level.
        #[serde(flatten)]
        reply: Reply,
    },
    /// A frame that could not be read or run, or a request the server refused before it
    /// reached the session; the connection stays open.
    Error(ServerError),
    /// The server closes the socket next, with a close frame carrying the same reason.
    Closing {
        /// Why.
        reason: ClosingReason,
    },
}

impl ServerMessage {
    /// The frame as JSON text.
    pub fn encode(&self) -> String {
        // Events and replies are plain data with string keys: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a frame (what a client does).
    pub fn decode(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// A refusal from the server itself: on the WebSocket a frame (`type: error`), over HTTP the
/// body of a 4xx or 5xx answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message}")]
pub struct ServerError {
    /// What a program matches on.
    pub code: ErrorCode,
    /// What a person reads.
    pub message: String,
    /// The id of the request the error is about, when the frame had a readable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// With [`ErrorCode::Gap`]: the oldest event the server still holds; the stream goes on
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_seq: Option<u64>,
}

impl ServerError {
    /// An error of this code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), id: None, oldest_seq: None }
    }

    /// The same error about request `id`.
    #[must_use]
    pub fn about(mut self, id: Option<u64>) -> Self {
        self.id = id;
        self
    }

    /// As a WebSocket frame.
    pub fn frame(self) -> ServerMessage {
        ServerMessage::Error(self)
    }
}

/// The codes of [`ServerError`], one per way a server refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The frame or body is not JSON of the expected shape.
    BadRequest,
    /// Its `v` is not the server's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION).
    UnsupportedVersion,
    /// The frame or body is over the server's size limit.
    TooLarge,
    /// Events the client asked for are no longer held: the stream resumes at `oldest_seq`.
    Gap,
    /// No agent of that name.
    UnknownAgent,
    /// No live session of that id.
    UnknownSession,
    /// The server holds its maximum of sessions (HTTP 503).
    TooManySessions,
    /// The session has its maximum of clients attached (HTTP 503).
    TooManyClients,
    /// The client (its IP address) has its maximum of WebSockets open (HTTP 429), or the
    /// server has its own (HTTP 503).
    TooManyConnections,
    /// A token is required and was missing or wrong (HTTP 401).
    Unauthorized,
    /// The request's `Origin` is not allowed (HTTP 403).
    ForbiddenOrigin,
    /// The request names a host the server does not answer to without a token: only a
    /// loopback address, `localhost` or an allowed origin's host (HTTP 403).
    ForbiddenHost,
    /// The session could not start.
    StartFailed,
    /// The session could not close (HTTP 500; the message says why).
    CloseFailed,
    /// The server is shutting down and takes nothing new.
    ShuttingDown,
    /// No such route.
    NotFound,
    /// The route exists but not with this method, such as `POST /v1/sessions/{id}` (HTTP 405,
    /// with an `Allow` header naming the methods it takes).
    MethodNotAllowed,
    /// Where sessions run (a cluster) could not be reached or did not answer in time (HTTP 503).
    Unavailable,
}

/// Why the server closes a WebSocket ([`ServerMessage::Closing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClosingReason {
    /// The client left too many frames unread; the session goes on, and the client may
    /// reconnect with `?after=` the last sequence number it saw.
    SlowClient,
    /// The server is stopping; its sessions are closed with reason `server_shutdown`.
    ServerShutdown,
    /// The session has closed: its `session_closed` event was the last event frame.
    SessionClosed,
    /// The session's events ended without `session_closed`: where it ran was lost (a cluster
    /// node that stopped answering). It is gone.
    SessionLost,
}

impl ClosingReason {
    /// The reason as it travels (`"slow_client"`, …), also the close frame's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlowClient => "slow_client",
            Self::ServerShutdown => "server_shutdown",
            Self::SessionClosed => "session_closed",
            Self::SessionLost => "session_lost",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{ErrorKind, ProtocolError};

    #[test]
    fn frames_read_back_as_the_protocol_page_writes_them() {
        let frames = [
            r#"{"type":"hello","v":1,"session_id":"s","agent":"demo","node":null,"last_seq":0}"#,
            r#"{"type":"event","seq":12,"event":{"at_ms":1200,"type":"tool_call_started","call_id":"c1","name":"weather"}}"#,
            r#"{"type":"reply","id":7,"reply":"ok"}"#,
            r#"{"type":"reply","id":7,"reply":"error","kind":"not_found","message":"no call c9"}"#,
            r#"{"type":"error","code":"gap","message":"m","oldest_seq":5}"#,
            r#"{"type":"closing","reason":"slow_client"}"#,
        ];
        for frame in frames {
            let message = ServerMessage::decode(frame).unwrap();
            assert_eq!(message.encode(), frame);
        }
        let error = ServerMessage::decode(frames[3]).unwrap();
        let ServerMessage::Reply { id: Some(7), reply: Reply::Error(e) } = error else {
            panic!("{error:?}")
        };
        assert_eq!(e, ProtocolError::new(ErrorKind::NotFound, "no call c9"));
    }
}
