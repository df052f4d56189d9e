//! # colloquy
//!
//! An actor runtime, on ractor and tokio, for conversational AI agents (voice or chat) whose
//! tools may run in the background while the conversation goes on. Its tool semantics follow
//! LiveKit Agents'; its shape is an actor tree (Session → Activity → Toolset → ToolCall).
//!
//! ```
//! use colloquy::prelude::*;
//! use serde::Deserialize;
//! use schemars::JsonSchema;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Weather {
//!     /// City name.
//!     location: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), SessionError> {
//! let weather = FunctionTool::new("get_weather", "Current weather.", |_ctx: RunContext, a: Weather| async move {
//!     Ok::<_, ToolError>(format!("sunny in {}", a.location))
//! });
//! let llm = ScriptedLlm::new([
//!     ScriptedResponse::calls([ScriptedCall::new("c1", "get_weather", r#"{"location":"Paris"}"#)]),
//!     ScriptedResponse::text("It's sunny in Paris."),
//! ]);
//! let session = Session::builder()
//!     .llm(llm)
//!     .start(Agent::new("travel", "You are a travel agent.").tool(weather))
//!     .await?;
//! session.user_turn("What's the weather in Paris?").await?;
//! session.wait_for_idle().await?;
//! let history = session.history().await?;
//! assert_eq!(history.last().and_then(|i| i.as_message()).map(|m| m.text.as_str()),
//!            Some("It's sunny in Paris."));
//! session.close().await?;
//! # Ok(()) }
//! ```

/// The ractor crate colloquy runs on, for hosts that walk the actor tree themselves.
pub use colloquy_actors::ractor;
pub use colloquy_actors::{
    ActorKind, ApprovalError, BROADCAST_CAPACITY, CancelError, ClosedSession, EventStream, Filler,
    FillerGuard, Foreground, Host, InterruptSignal, Lifecycle, LifecycleEvent,
    MAX_UNREAD_LIFECYCLE, MockScope, PacedSink, Playout, PlayoutReport, RunContextExt,
    RunningToolCall, Session, SessionBuilder, SessionError, SessionHandle, SessionOptions,
    SpeechSink,
};
pub use colloquy_actors::{
    ActorNode, CoalescerSnapshot, NodeStatus, SessionSnapshot, SpeechSnapshot, SpeechStatus,
    ToolsetScope,
};
pub use colloquy_core::{
    Agent, AgentHandoff, AgentState, ChatContext, ChatItem, DuplicateScope, ErrorSource,
    EventFilter, EventKind, EventType, FunctionCall, FunctionCallOutput, Handoff, IntoToolOutput,
    Json, Message, OnDuplicate, Role, RunContext, RunExpect, RunResult, SessionEvent, SpeechSource,
    StopResponse, Timestamp, ToolCallStatus, ToolError, ToolFlags, ToolOutput, ToolResult,
    ToolSchema, ToolSource, ToolVisibility, Toolset, UserState,
};
pub use colloquy_core::{
    BeforeCall, BeforeCallFuture, BeforeToolCall, PendingToolCall, RetryPolicy,
};
pub use colloquy_core::{
    CallHooks, PostedUpdate, RefusalReason, ReplyStatus, ResolvedTemplates, Template, Templates,
    UpdateMessage, UpdateOptions,
};
pub use colloquy_core::{
    FunctionTool, ToolDeclarationError, args, run_result, schema_check, templates, text, timeline,
    tool,
};
pub use colloquy_llm::{
    FinishReason, Llm, LlmChunk, LlmError, LlmErrorKind, LlmRequest, LlmStream, RecordedRequest,
    RequestKind, ScriptedCall, ScriptedLlm, ScriptedResponse, ToolCallDelta, ToolChoice, Usage,
};
/// OpenAI Chat Completions and OpenAI-compatible servers (feature `openai`, on by default).
#[cfg(feature = "openai")]
pub mod openai {
    pub use colloquy_openai::*;
}
/// Anthropic's Messages API (feature `anthropic`, on by default).
#[cfg(feature = "anthropic")]
pub mod anthropic {
    pub use colloquy_anthropic::*;
}
#[cfg(feature = "anthropic")]
pub use colloquy_anthropic::Anthropic;

/// Model Context Protocol servers' tools as toolsets (feature `mcp`, on by default).
#[cfg(feature = "mcp")]
pub mod mcp {
    pub use colloquy_mcp::*;
}
/// What the provider adapters share: keys, timeouts and retries, the environment.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use colloquy_llm::http;
/// The chat context regrouped into provider turns, and provider call ids.
pub use colloquy_llm::turns;
#[cfg(feature = "mcp")]
pub use colloquy_mcp::{McpServer, McpToolset};
#[cfg(feature = "openai")]
pub use colloquy_openai::OpenAi;

/// `#[function_tool]`: a tool from a plain async function, and `#[function_tools]`: tools from
/// the methods of an agent type (see the `colloquy_macros` docs).
pub use colloquy_macros::{function_tool, function_tools};

/// What the code `#[function_tool]` writes refers to; not an API.
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
}

/// The ready-made toolsets: tool search (BM25, keyword, custom strategies), the tool proxy, and
/// the end-call tool.
pub mod toolsets {
    pub use colloquy_actors::{
        END_CALL, END_CALL_DESCRIPTION, END_CALL_REASON, END_INSTRUCTIONS, EndCallTool,
    };
    pub use colloquy_toolsets::*;
}

/// What a host's first program needs, in one import: sessions and their host, agents and
/// tools (`#[function_tool]`, `FunctionTool`, the duplicate policy), the models (`OpenAi`,
/// `Anthropic`, the scripted one for tests), events and their filter, speech (`SpeechSink`,
/// `Playout`), the snapshot `inspect()` returns, the testing API (`RunResult`, `MockScope`),
/// MCP toolsets, and serde_json's `Value` and `json!` that tool outputs and expectations use.
///
/// ```no_run
/// use colloquy::prelude::*;
///
/// /// Look up an order.
/// ///
/// /// * `order_id` - The order's number.
/// #[function_tool(cancellable, deadline = "30s")]
/// async fn lookup_order(ctx: RunContext, order_id: String) -> Result<Value, ToolError> {
///     ctx.update(format!("Looking up {order_id}…")).await?;
///     Ok(json!({ "order_id": order_id, "status": "shipped" }))
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let host = Host::new().await?;
///     let session = Session::builder()
///         .host(&host)
///         .llm(OpenAi::from_env()?.model("gpt-4.1-mini")) // or Anthropic::from_env()?
///         .start(Agent::new("desk", "You help with orders.").tool(lookup_order()))
///         .await?;
///     let mut events = session.subscribe_to(EventFilter::tool_execution());
///     session.user_turn("Where is order 42?").await?;
///     session.wait_for_idle().await?;
///     let tree: ActorNode = session.inspect().await?.tree;
///     println!("{tree:?}");
///     session.close().await?;
///     while let Some(event) = events.recv().await {
///         println!("{:?}", event.kind);
///     }
///     Ok(())
/// }
/// ```
///
/// `tests/it/first_program.rs` compiles and runs a larger one with this import alone.
pub mod prelude {
    #[cfg(feature = "anthropic")]
    pub use crate::Anthropic;
    #[cfg(feature = "mcp")]
    pub use crate::McpToolset;
    #[cfg(feature = "openai")]
    pub use crate::OpenAi;
    pub use crate::{
        ActorNode, Agent, AgentState, ChatItem, DuplicateScope, ErrorSource, EventFilter,
        EventKind, EventStream, EventType, Filler, FunctionCall, FunctionCallOutput, FunctionTool,
        Handoff, Host, Json, Llm, Message, MockScope, NodeStatus, OnDuplicate, Playout,
        PlayoutReport, Role, RunContext, RunContextExt, RunResult, ScriptedCall, ScriptedLlm,
        ScriptedResponse, Session, SessionError, SessionEvent, SessionHandle, SessionSnapshot,
        SpeechSink, StopResponse, ToolCallStatus, ToolChoice, ToolError, ToolResult, Toolset,
        UserState, function_tool, function_tools,
    };
    pub use serde_json::{Value, json};
}
