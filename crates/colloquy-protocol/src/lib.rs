//! colloquy's session protocol: what a client in another process asks of a session, and what it
//! gets back, as plain serde types with a version. It is transport-agnostic: the cluster carries
//! it over NATS requests, and a server can carry it over a WebSocket; both run the same
//! `colloquy_edge::execute` on the side that holds the session, so a command means the same
//! thing whichever way it came.
//!
//! The types are plain data over the data model (`colloquy-model`) and nothing else: no actor,
//! no async runtime, so a Rust client of the protocol does not pull in the runtime, and a change
//! to the runtime's types does not change the protocol. What the runtime returns (a snapshot, a
//! running call, an error) has its own counterpart here ([`SessionSnapshot`],
//! [`RunningToolCall`], [`ProtocolError`]); the edge that holds both sides (`colloquy-edge`,
//! shared by the server and the cluster) converts.
//!
//! A [`Request`] is `{"v": 1, "id": 3, "type": "user_turn", "text": "…"}` (the `id` optional);
//! its [`Reply`] is
//! `{"reply": "ok"}`, a value (`{"reply": "history", "items": […]}`) or
//! `{"reply": "error", "kind": "closed", "message": "session closed"}`. Events travel as
//! [`EventFrame`]s, numbered per session so a reader can tell a gap from a quiet spell.
//!
//! Over HTTP and a WebSocket (docs/protocol.md), a client starts a session with
//! [`StartSession`] and reads [`ServerMessage`]s: a greeting, the events, the answers to its
//! requests, errors ([`ServerError`]) and a last [`ClosingReason`].
//!
//! ```
//! use colloquy_protocol::{Command, Request, PROTOCOL_VERSION};
//!
//! let request = Request::decode(br#"{"v": 1, "type": "user_turn", "text": "hello"}"#).unwrap();
//! assert_eq!(request.command, Command::UserTurn { text: "hello".into() });
//! assert_eq!(request.v, PROTOCOL_VERSION);
//! ```

mod command;
mod reply;
mod server;
mod snapshot;
mod start;

pub use command::{Command, Request, ToolChoice};
pub use reply::{ErrorKind, EventFrame, ProtocolError, Reply};
pub use server::{ClosingReason, ErrorCode, ServerError, ServerMessage};
pub use snapshot::{
    ActorKind, ActorNode, CoalescerSnapshot, NodeStatus, RunningToolCall, SessionSnapshot,
    SpeechSnapshot, SpeechStatus, ToolsetScope,
};
pub use start::{
    AgentList, SessionClosed, SessionInfo, SessionList, SessionStarted, StartOptions, StartSession,
    StoredSession,
};

/// The protocol's version: a request carries it, and a side that speaks another answers
/// [`ErrorKind::UnsupportedVersion`] rather than guess.
pub const PROTOCOL_VERSION: u32 = 1;

/// The JSON Schema of every message of the protocol, by file name: what a client sends
/// ([`Request`], [`StartSession`]) and what a server answers ([`ServerMessage`],
/// [`SessionStarted`], [`SessionList`], [`AgentList`], [`SessionClosed`]). They are committed
/// under `docs/protocol/`, and a test fails when the types drift from them.
pub fn json_schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        ("request.schema.json", schemars::schema_for!(Request)),
        ("server-message.schema.json", schemars::schema_for!(ServerMessage)),
        ("start-session.schema.json", schemars::schema_for!(StartSession)),
        ("session-started.schema.json", schemars::schema_for!(SessionStarted)),
        ("session-list.schema.json", schemars::schema_for!(SessionList)),
        ("agent-list.schema.json", schemars::schema_for!(AgentList)),
        ("session-closed.schema.json", schemars::schema_for!(SessionClosed)),
    ]
}
