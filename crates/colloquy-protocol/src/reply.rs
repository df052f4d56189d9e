//! What a session answers, the errors it can answer with, and the frame events travel in.

use colloquy_model::{AgentState, ChatItem, SessionEvent, UserState};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::snapshot::{RunningToolCall, SessionSnapshot};

/// The answer to one [`Request`](crate::Request).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "reply", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// Done; nothing to return.
    Ok,
    /// The calls running now.
    Calls {
        /// In call-id order.
        calls: Vec<RunningToolCall>,
    },
    /// The session history.
    History {
        /// In order.
        items: Vec<ChatItem>,
    },
    /// A snapshot of the session (its actor ids are local to the node: all 0 here).
    Snapshot {
        /// The snapshot.
        snapshot: Box<SessionSnapshot>,
    },
    /// The agent and user states.
    States {
        /// The agent state.
        agent: AgentState,
        /// The user state.
        user: UserState,
    },
    /// The session closed; its final history.
    Closed {
        /// The final history.
        history: Vec<ChatItem>,
    },
    /// The command failed.
    Error(ProtocolError),
}

impl Reply {
    /// The reply as JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Every field is plain data with string keys: serialization cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a reply.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(bytes)
            .map_err(|e| ProtocolError::new(ErrorKind::BadReply, format!("unreadable reply: {e}")))
    }

    /// `Ok(())` for [`Reply::Ok`], the error for [`Reply::Error`], else an unexpected reply.
    pub fn into_unit(self) -> Result<(), ProtocolError> {
        match self {
            Self::Ok => Ok(()),
            other => Err(other.unexpected("ok")),
        }
    }

    /// The error a client reports when the reply is not the one its command expects: the
    /// reply's own error, or [`ErrorKind::BadReply`].
    pub fn unexpected(self, wanted: &str) -> ProtocolError {
        match self {
            Self::Error(e) => e,
            other => ProtocolError::new(
                ErrorKind::BadReply,
                format!("expected a `{wanted}` reply, got {}", other.name()),
            ),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Calls { .. } => "calls",
            Self::History { .. } => "history",
            Self::Snapshot { .. } => "snapshot",
            Self::States { .. } => "states",
            Self::Closed { .. } => "closed",
            Self::Error(_) => "error",
        }
    }
}

/// Why a command failed, as it travels: a kind a program can match and the message a person
/// reads (the same text the local error displays).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The message.
    pub message: String,
}

impl ProtocolError {
    /// An error of this kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// The kinds of failure, one per local error variant plus the protocol's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The session is closing or closed.
    Closed,
    /// A run while another was going.
    NestedRun,
    /// A speech of the run failed.
    RunFailed,
    /// Bad configuration.
    Config,
    /// An actor could not be started.
    Spawn,
    /// No running call has this id.
    NotFound,
    /// The call's tool is not cancellable.
    NotCancellable,
    /// The call's speech disallows interruptions.
    InterruptionsDisallowed,
    /// The call does not wait for approval.
    NotAwaiting,
    /// The request could not be read.
    BadRequest,
    /// The reply could not be read, or was not the one the command expects.
    BadReply,
    /// The request's version is not this side's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION).
    UnsupportedVersion,
    /// The session runs as many commands as its server allows at once: try again later.
    Busy,
    /// The answer (or the request) is bigger than the transport carries (a NATS server's
    /// `max_payload`, say): ask for less.
    TooLarge,
    /// Where the session runs could not be reached, or did not answer in time (a cluster
    /// node): the command may or may not have run.
    Unavailable,
}

/// One event of one session as it travels, numbered from 1 in the order the session emitted
/// them: a reader that sees index 7 after 5 knows it missed one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventFrame {
    /// The session's id.
    pub session_id: String,
    /// 1, 2, 3… per session.
    pub index: u64,
    /// The event.
    pub event: SessionEvent,
}

impl EventFrame {
    /// The frame as JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Events are plain data (strings, numbers, JSON values): serialization cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a frame.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(bytes)
            .map_err(|e| ProtocolError::new(ErrorKind::BadReply, format!("unreadable event: {e}")))
    }
}
