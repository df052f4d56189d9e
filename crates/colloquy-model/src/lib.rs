//! colloquy's data model: chat items, tool declarations, argument handling, tool outputs and
//! session events.
//!
//! Architecture invariant: this crate has no actors, no I/O and no clock. Everything here is
//! plain data and pure functions, unit-tested in microseconds; the runtime (`colloquy-actors`)
//! only moves this data between actors and owns its lifetime. Time enters as [`Timestamp`]
//! values the runtime stamps from tokio's clock.

pub mod agent;
pub mod args;
pub mod before_call;
pub mod call_ids;
pub mod chat;
pub mod close_reason;
pub mod controls;
pub mod duplicate;
pub mod event;
pub mod llm;
pub mod output;
pub mod resumed;
pub mod run_context;
pub mod run_result;
mod schema;
pub mod schema_check;
pub mod templates;
pub mod text;
pub mod time;
pub mod timeline;
pub mod tool;
pub mod tool_error;
mod tool_schema;
pub mod toolset;

pub use agent::Agent;
pub use args::{
    ArgumentError, ParsedArguments, canonical_json, parse_arguments, validate_arguments,
};
pub use before_call::{BeforeCall, BeforeCallFuture, BeforeToolCall, PendingToolCall};
pub use call_ids::CallIds;
pub use chat::{
    AgentHandoff, ChatContext, ChatItem, FunctionCall, FunctionCallOutput, Message, Role,
};
pub use close_reason::CloseReason;
pub use controls::{CallLimits, ConcurrencyLimit, RetryPolicy};
pub use duplicate::{DuplicateScope, OnDuplicate};
pub use event::{
    AgentState, ErrorSource, EventFilter, EventKind, EventType, RefusalReason, ReplyStatus,
    SessionEvent, SpeechSource, ToolCallStatus, UserState,
};
pub use llm::{FinishReason, LlmErrorKind, Usage};
pub use output::{Handoff, IntoToolOutput, Json, StopResponse, ToolOutput, ToolResult};
pub use resumed::{InDoubtOutcome, OnInterrupted, ResumedCall};
pub use run_context::{CallHooks, PostedUpdate, RunContext, UpdateMessage, UpdateOptions};
pub use run_result::{RunExpect, RunResult};
pub use templates::{ResolvedTemplates, Template, Templates};
pub use time::Timestamp;
pub use tool::{FunctionTool, ToolDeclarationError, ToolFlags, ToolSchema};
pub use tool_error::{ToolError, ToolErrorKind};
pub use toolset::{ToolSource, ToolVisibility, Toolset};
