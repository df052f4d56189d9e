//! Starting a session and listing what a server holds: the bodies of the HTTP side of the
//! protocol (docs/protocol.md), and the options a cluster host sends a node.

use colloquy_model::ChatItem;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::PROTOCOL_VERSION;

/// What a client may ask for a session it starts; everything else (the model, the session's
/// settings, the agents' tools) is the server's or the node's, set in code where it runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StartOptions {
    /// Items the session starts with, before its first agent's handoff (a conversation moved
    /// from elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<ChatItem>,
    /// Anything the session hook where it runs should see (a customer id, a locale), as JSON.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub metadata: serde_json::Value,
}

impl StartOptions {
    /// No history, no metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the session with these items.
    #[must_use]
    pub fn history(mut self, items: Vec<ChatItem>) -> Self {
        self.history = items;
        self
    }

    /// Hands `metadata` to the session hook where the session runs.
    #[must_use]
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }
}

/// `POST /v1/sessions`: start a session of `agent` (the server's default when absent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartSession {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub v: u32,
    /// The agent, by the name the server registered it under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// History and metadata.
    #[serde(default)]
    pub options: StartOptions,
}

impl StartSession {
    /// A request for `agent` (or the default) in this version of the protocol.
    pub fn new(agent: Option<String>, options: StartOptions) -> Self {
        Self { v: PROTOCOL_VERSION, agent, options }
    }
}

/// The answer to [`StartSession`] (`201 Created`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionStarted {
    /// The new session's id: the path of its WebSocket and its `DELETE`.
    pub session_id: String,
    /// The agent it started with.
    pub agent: String,
    /// The cluster node that runs it; `null` when it runs in the server's process.
    pub node: Option<String>,
}

/// One live session, as `GET /v1/sessions` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionInfo {
    /// Its id.
    pub session_id: String,
    /// The agent it started with.
    pub agent: String,
    /// The cluster node that runs it, if any.
    pub node: Option<String>,
    /// WebSocket connections attached now.
    pub clients: usize,
    /// The sequence number of its latest event (0 before the first).
    pub last_seq: u64,
}

/// `GET /v1/sessions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// The live sessions, by id.
    pub sessions: Vec<SessionInfo>,
    /// With a store (`colloquy serve --store`): every session kept in it, most recently
    /// active first, live or not; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<Vec<StoredSession>>,
}

/// One session kept in a server's store, as `GET /v1/sessions` lists it: a session that is
/// not live and not closed resumes when a client attaches to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StoredSession {
    /// Its id (the live session's, once it runs).
    pub session_id: String,
    /// The id of the agent it was on last (the agent's own name, `assistant`, not the name
    /// a client started it under).
    pub agent: String,
    /// When its journal was last written, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
    /// Why it closed; `null` while it is open (it resumes).
    pub closed: Option<String>,
    /// The tool calls that were running at its last record: each ends once, by its tool's
    /// `on_interrupted` policy, when it resumes (docs/durability.md).
    pub calls_in_doubt: usize,
    /// Whether it runs in this server's process now.
    pub live: bool,
}

impl StoredSession {
    /// A stored session, not live.
    pub fn new(
        session_id: impl Into<String>,
        agent: impl Into<String>,
        updated_ms: u64,
        closed: Option<String>,
        calls_in_doubt: usize,
    ) -> Self {
        let (session_id, agent) = (session_id.into(), agent.into());
        Self { session_id, agent, updated_ms, closed, calls_in_doubt, live: false }
    }
}

/// `GET /v1/agents`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentList {
    /// The agents a client may start, in the server's order.
    pub agents: Vec<String>,
    /// The one a [`StartSession`] without `agent` starts.
    pub default: Option<String>,
}

/// `DELETE /v1/sessions/{id}`: the session closed; what it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionClosed {
    /// Its id.
    pub session_id: String,
    /// Its final history.
    pub history: Vec<ChatItem>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_options_leave_out_what_is_empty() {
        let json = serde_json::to_string(&StartOptions::new()).unwrap();
        assert_eq!(json, "{}");
        let back: StartOptions = serde_json::from_str(r#"{"metadata": {"customer": 7}}"#).unwrap();
        assert_eq!(back.metadata["customer"], 7);
    }

    #[test]
    fn a_start_request_needs_only_its_version() {
        let start: StartSession = serde_json::from_str(r#"{"v": 1}"#).unwrap();
        assert_eq!(start, StartSession::new(None, StartOptions::new()));
        assert!(serde_json::from_str::<StartSession>(r#"{"v": 1, "agnet": "x"}"#).is_err());
    }
}
