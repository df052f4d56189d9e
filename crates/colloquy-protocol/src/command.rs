//! What a client asks of a session: one variant per `SessionHandle` method a remote client can
//! call (methods that take code, such as mocks or a new agent, stay local).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::PROTOCOL_VERSION;
use crate::reply::{ErrorKind, ProtocolError};

/// A command with the protocol version it was written for, and the id its answer echoes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Request {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub v: u32,
    /// Chosen by the client; the answer to this request carries it back (a WebSocket client
    /// matches answers to commands by it; NATS has its own reply subjects and leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// What to do.
    #[serde(flatten)]
    pub command: Command,
}

impl Request {
    /// A request in this version of the protocol, without an id.
    pub fn new(command: Command) -> Self {
        Self { v: PROTOCOL_VERSION, id: None, command }
    }

    /// The same request with the id its answer will echo.
    #[must_use]
    pub fn with_id(mut self, id: u64) -> Self {
        self.id = Some(id);
        self
    }

    /// The request as JSON bytes.
    pub fn encode(&self) -> Vec<u8> {
        // A request is strings, numbers and enums: it always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a request; the error says what was wrong with it, for the reply.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(bytes).map_err(|e| {
            ProtocolError::new(ErrorKind::BadRequest, format!("unreadable request: {e}"))
        })
    }
}

/// One thing a client can ask of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Command {
    /// `user_turn`: the user said `text`; answered once the session has taken the turn.
    UserTurn {
        /// What the user said.
        text: String,
    },
    /// `user_input`: the user said `text`, queued behind the agent's current reply instead of
    /// interrupting it, then answered; answered once the session has taken the input.
    UserInput {
        /// What the user said.
        text: String,
    },
    /// `generate_reply`: a reply with extra instructions for its first step.
    GenerateReply {
        /// Extra instructions for the reply's first LLM step.
        instructions: String,
        /// The first step's `tool_choice`, if set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_choice: Option<ToolChoice>,
    },
    /// `say`: speak a fixed text.
    Say {
        /// The text.
        text: String,
    },
    /// `interrupt`: stop the current speech.
    Interrupt,
    /// `set_user_speaking`: the user started or stopped speaking.
    SetUserSpeaking {
        /// Whether the user speaks now.
        speaking: bool,
    },
    /// `cancel_tool_call`.
    CancelToolCall {
        /// The call's id.
        call_id: String,
    },
    /// `approve`: let a call waiting for approval run.
    Approve {
        /// The call's id.
        call_id: String,
    },
    /// `reject`: end a call waiting for approval without running it.
    Reject {
        /// The call's id.
        call_id: String,
        /// What the model reads as the reason.
        reason: String,
    },
    /// `running_tool_calls`.
    RunningToolCalls,
    /// `history`.
    History,
    /// `inspect`: a snapshot of the session.
    Inspect,
    /// `states`: the agent and user states.
    States,
    /// `wait_for_idle`: answered once the session is idle (the transport's timeout must allow
    /// for a whole reply).
    WaitForIdle,
    /// `wait_for_quiet`: idle, and no background call running.
    WaitForQuiet,
    /// `close_with_reason`: close the session; answered with what it held.
    Close {
        /// Carried by `session_closed`.
        reason: String,
    },
}

impl Command {
    /// The command's name as it travels (`"user_turn"`, …), for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Self::UserTurn { .. } => "user_turn",
            Self::UserInput { .. } => "user_input",
            Self::GenerateReply { .. } => "generate_reply",
            Self::Say { .. } => "say",
            Self::Interrupt => "interrupt",
            Self::SetUserSpeaking { .. } => "set_user_speaking",
            Self::CancelToolCall { .. } => "cancel_tool_call",
            Self::Approve { .. } => "approve",
            Self::Reject { .. } => "reject",
            Self::RunningToolCalls => "running_tool_calls",
            Self::History => "history",
            Self::Inspect => "inspect",
            Self::States => "states",
            Self::WaitForIdle => "wait_for_idle",
            Self::WaitForQuiet => "wait_for_quiet",
            Self::Close { .. } => "close",
        }
    }
}

/// The `tool_choice` of a request; `None` in `LlmRequest::tool_choice` means unset (the
/// protocol's counterpart of the LLM crate's `ToolChoice`).
// The schema keeps the LLM type's description, link and all, so the committed schema stays as
// it was; the doc comment cannot link to a crate this one does not depend on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(
    description = "The `tool_choice` of a request; `None` in [`LlmRequest::tool_choice`] means unset."
)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must not call tools (calls it still emits are dropped).
    None,
    /// The model must call a tool.
    Required,
    /// The model must call this tool.
    Named(String),
}
