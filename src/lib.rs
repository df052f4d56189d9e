//! # colloquy
//!
//! An actor runtime, on ractor and tokio, for conversational AI agents (voice or chat) whose
//! tools may run in the background while the conversation goes on. Its tool semantics follow
//! LiveKit Agents'; its shape is an actor tree (Session → Activity → Toolset → ToolCall).
//!
//! `use colloquy::prelude::*;` is the one import a first program needs. Everything else is in a
//! module named after what it is for, one path per item:
//!
//! - [`session`]: starting and driving a session ([`Session`](session::Session),
//!   [`SessionHandle`](session::SessionHandle), [`SessionOptions`](session::SessionOptions)),
//!   the [`Host`](session::Host) that supervises sessions, errors, snapshots and lifecycle.
//! - [`agent`]: an [`Agent`](agent::Agent) (instructions, tools, toolsets) and the
//!   [`Handoff`](agent::Handoff) a tool returns to switch agents.
//! - [`tools`]: declaring tools (`#[function_tool]`, [`FunctionTool`](tools::FunctionTool),
//!   [`Toolset`](tools::Toolset)), what a call sees ([`RunContext`](tools::RunContext)) and
//!   returns, and the policies around it (duplicates, retries, approval, the before-call hook).
//! - [`toolsets`]: ready-made toolsets: tool search, the tool proxy, the end-call tool.
//! - [`events`]: what a session reports ([`SessionEvent`](events::SessionEvent)), how to filter
//!   and receive it.
//! - [`chat`]: the conversation as items ([`ChatItem`](chat::ChatItem),
//!   [`ChatContext`](chat::ChatContext)).
//! - [`llm`]: the model boundary ([`Llm`](llm::Llm)), its requests and chunks, the scripted
//!   model, and the parts provider adapters share.
//! - [`openai`], [`anthropic`], [`mcp`]: the provider adapters and MCP servers' tools, each
//!   under the feature of the same name (on by default).
//! - `ops` (feature `ops`, off by default): health and Prometheus metrics over HTTP.
//! - `cluster`: sessions on other machines over NATS — nodes, placement, remote sessions and
//!   their event streams (feature `cluster`, off by default; docs/cluster.md).
//! - [`speech`]: playing the agent's speech ([`SpeechSink`](speech::SpeechSink)).
//! - [`templates`]: the texts the runtime gives the model (progress updates, duplicates,
//!   deferred replies), and how to replace them.
//! - [`testing`]: a run's result and the expectations over it, tool mocks.
//! - [`timeline`]: a session's events as a self-contained HTML page.
//! - [`ractor`]: the actor crate the runtime runs on, for hosts that walk the actor tree.
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

/// The ractor crate colloquy runs on (the version
/// [`SessionHandle::actor_cell`](session::SessionHandle::actor_cell) returns), for hosts that
/// walk the actor tree themselves.
pub use colloquy_actors::ractor;

pub mod session {
    //! Starting and driving a session: the builder, the handle every call goes through, the
    //! options, the [`Host`] that supervises sessions and streams their lifecycle, the errors, and
    //! what [`SessionHandle::inspect`] and [`SessionHandle::close`] return.

    pub use colloquy_actors::{
        ActorKind, ActorNode, ApprovalError, CancelError, ClosedSession, CoalescerSnapshot, Host,
        Lifecycle, LifecycleEvent, NodeStatus, RunningToolCall, Session, SessionBuilder,
        SessionError, SessionHandle, SessionOptions, SessionSnapshot, SpeechSnapshot, SpeechStatus,
        ToolsetScope,
    };
}

pub mod agent {
    //! An agent: its instructions, tools and toolsets; and the [`Handoff`] a tool returns to
    //! hand the conversation to another agent.

    pub use colloquy_model::{Agent, Handoff};
}

pub mod tools {
    //! Declaring tools and what a call sees: `#[function_tool]` (a tool from an async function)
    //! and `#[function_tools]` (tools from an agent type's methods), [`FunctionTool`], [`Toolset`];
    //! the [`RunContext`] a body gets and its runtime abilities ([`RunContextExt`]: the session,
    //! filler speech, holding the floor); outputs and errors; the policies around a call
    //! (duplicates, retries, approval) and the host's hook before each call ([`BeforeCall`]).

    pub use colloquy_actors::{Filler, FillerGuard, Foreground, RunContextExt};
    /// `#[function_tool]`: a tool from a plain async function, and `#[function_tools]`: tools
    /// from the methods of an agent type (see the `colloquy_macros` docs).
    pub use colloquy_macros::{function_tool, function_tools};
    pub use colloquy_model::tool::NoArgs;
    pub use colloquy_model::{
        BeforeCall, BeforeCallFuture, BeforeToolCall, DuplicateScope, FunctionTool, IntoToolOutput,
        Json, OnDuplicate, OnInterrupted, PendingToolCall, PostedUpdate, RetryPolicy, RunContext,
        StopResponse, ToolDeclarationError, ToolError, ToolErrorKind, ToolFlags, ToolOutput,
        ToolResult, ToolSchema, ToolSource, ToolVisibility, Toolset, UpdateMessage, UpdateOptions,
    };
}

pub mod toolsets {
    //! The ready-made toolsets: tool search (BM25, keyword or your own strategy), the tool proxy,
    //! and the end-call tool.
    //!
    //! The constants kept here are the tools' names (to recognise their calls in events),
    //! [`END_CALL_REASON`] (to recognise a session the end-call tool closed), and the default
    //! texts a builder method replaces.

    pub use colloquy_actors::{END_CALL, END_CALL_REASON, END_INSTRUCTIONS, EndCallTool};
    pub use colloquy_toolsets::{
        Bm25Strategy, BoxFuture, CALL_TOOL, KeywordStrategy, PROXY_SEARCH_DESCRIPTION,
        QUERY_DESCRIPTION, SEARCH_DESCRIPTION, SEARCH_TOOL, SearchItem, SearchStrategy,
        SyncSearchStrategy, ToolProxyToolset, ToolSearch, ToolSearchToolset,
    };
}

pub mod events {
    //! What a session reports: [`SessionEvent`]s and their kinds, the states and statuses they
    //! carry, the [`EventFilter`] a subscriber picks them with, and the lossless [`EventStream`]
    //! it receives them on.

    pub use colloquy_actors::EventStream;
    pub use colloquy_model::{
        AgentState, CloseReason, ErrorSource, EventFilter, EventKind, EventType, InDoubtOutcome,
        RefusalReason, ReplyStatus, ResumedCall, SessionEvent, SpeechSource, ToolCallStatus,
        UserState,
    };
}

pub mod chat {
    //! The conversation as items: messages, function calls and their outputs, agent handoffs, in
    //! a [`ChatContext`] ordered by [`Timestamp`].

    pub use colloquy_model::{
        AgentHandoff, ChatContext, ChatItem, FunctionCall, FunctionCallOutput, Message, Role,
        Timestamp,
    };
}

pub mod llm {
    //! The model boundary: the [`Llm`] trait, the request it gets and the chunks it streams back,
    //! its errors; [`ScriptedLlm`], the model that answers from a script (tests, offline demos);
    //! `context`, what keeps each request within the model's context; and, for writing a
    //! provider, the HTTP transport the adapters share and the chat context regrouped into
    //! provider turns.

    pub use colloquy_llm::context;
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    pub use colloquy_llm::http;
    pub use colloquy_llm::turns;
    pub use colloquy_llm::{
        FinishReason, Llm, LlmChunk, LlmError, LlmErrorKind, LlmRequest, LlmStream,
        RecordedRequest, RequestKind, ScriptedCall, ScriptedLlm, ScriptedResponse, ToolCallDelta,
        ToolChoice, Usage,
    };
}

#[cfg(feature = "openai")]
pub mod openai {
    //! OpenAI Chat Completions and OpenAI-compatible servers (feature `openai`, on by default).
    //! The defaults are those [`OpenAi::model`] and [`OpenAi::base_url`] replace.

    pub use colloquy_openai::{DEFAULT_BASE_URL, DEFAULT_MODEL, OpenAi};
}

#[cfg(feature = "anthropic")]
pub mod anthropic {
    //! Anthropic's Messages API (feature `anthropic`, on by default). The defaults are those
    //! [`Anthropic::model`] and [`Anthropic::base_url`] replace.

    pub use colloquy_anthropic::{Anthropic, DEFAULT_BASE_URL, DEFAULT_MODEL};
}

#[cfg(feature = "mcp")]
pub mod mcp {
    //! Model Context Protocol servers' tools as toolsets (feature `mcp`, on by default). The
    //! constants are the defaults [`McpToolset`]'s builder methods replace, and the environment
    //! variables a stdio server inherits.

    pub use colloquy_mcp::{
        DEFAULT_DEADLINE, INHERITED_ENV, MAX_RESULT_BYTES, McpError, McpServer, McpToolset,
        PROGRESS_INTERVAL, START_TIMEOUT,
    };
}

#[cfg(feature = "ops")]
pub mod ops {
    //! Health and Prometheus metrics over HTTP for a process that runs sessions (feature
    //! `ops`, off by default): [`Metrics`] follows sessions' events, [`router`] serves
    //! `/metrics` and `/healthz`, [`serve`] binds it with every wait bounded
    //! (docs/operations.md).

    pub use colloquy_ops::{
        DEFAULT_ADDR, DEFAULT_MAX_CLOSE_REASONS, DEFAULT_MAX_TOOL_NAMES, DURATION_BUCKETS, Health,
        Listener, Metrics, MetricsBuilder, OPENMETRICS_CONTENT_TYPE, OTHER_LABEL, OpsServer,
        PREFIX, ServeOptions, health_router, metrics_router, router, serve, serve_with,
    };
}

#[cfg(feature = "cluster")]
pub mod cluster {
    //! Sessions on other machines, over NATS (feature `cluster`, off by default;
    //! docs/cluster.md). A [`Node`] runs sessions for hosts elsewhere: agents registered by
    //! name, announced with its load, drained on SIGTERM. A host's [`Cluster`] places a session
    //! on the least loaded node and drives it through a [`RemoteSession`], whose events come
    //! from a JetStream stream, in order and resumable ([`RemoteEvents`]).
    //!
    //! ```no_run
    //! use colloquy::cluster::{Cluster, Node, StartOptions};
    //! use colloquy::prelude::*;
    //!
    //! # async fn demo() -> Result<(), colloquy::cluster::ClusterError> {
    //! // On each worker machine:
    //! let node = Node::builder()
    //!     .nats("nats://10.0.0.5:4222")
    //!     .name("worker-1")
    //!     .agent("support", || Agent::new("support", "You help with orders."))
    //!     .llm(ScriptedLlm::new([ScriptedResponse::text("It ships today.")]))
    //!     .load_threshold(0.7)
    //!     .start()
    //!     .await?;
    //!
    //! // In the host:
    //! let cluster = Cluster::connect("nats://10.0.0.5:4222").await?;
    //! let session = cluster.start_session("support", StartOptions::default()).await?;
    //! let mut events = session.subscribe().await?;
    //! session.user_turn("Where is my order?").await?;
    //! # drop((node, events));
    //! # Ok(()) }
    //! ```

    pub use colloquy_cluster::{
        Agents, CLUSTER_VERSION, Cluster, ClusterBuilder, ClusterError, DrainReport, ErrorKind,
        HOST_LOST, HOST_LOST_AFTER, JetStreamStore, MIN_HOST_LOST_AFTER, MOVE_TIMEOUT,
        NODE_DRAINING, NatsConfig, Node, NodeBuilder, NodeHandle, NodeInfo, NodeLoad, OnDrain,
        ProtocolError, Refusal, RemoteEvent, RemoteEvents, RemoteSession, SessionRecord,
        SessionStart, StartOptions, Timeouts,
    };
}

pub mod store {
    //! Durable sessions (docs/durability.md): a [`SessionStore`] keeps each session's journal,
    //! so that [`SessionBuilder::resume`](crate::session::SessionBuilder::resume) continues a
    //! conversation its process lost — [`SqliteStore`] in one file (feature `sqlite`, on by
    //! default), [`MemoryStore`] in memory, or a store of the host's own.
    //!
    //! ```no_run
    //! use std::sync::Arc;
    //! use colloquy::prelude::*;
    //! use colloquy::store::SqliteStore;
    //!
    //! # async fn run(llm: ScriptedLlm) -> Result<(), Box<dyn std::error::Error>> {
    //! let store = Arc::new(SqliteStore::open("sessions.db")?);
    //! let agent = || Agent::new("support", "Help the user.");
    //! let session = Session::builder().llm(llm.clone()).store(store.clone()).start(agent()).await?;
    //! let id = session.id().to_owned();
    //! // … the process is killed; later, in another one with the same file:
    //! let agents = |name: &str| (name == "support").then(agent);
    //! let session = Session::builder().llm(llm).store(store).resume(&id, agents).await?;
    //! # drop(session); Ok(()) }
    //! ```

    pub use colloquy_store::{
        Acquire, CallInDoubt, Entry, Journal, LEASE_TTL, Lease, LeaseHolder, MemoryStore, Record,
        RememberedResult, SCHEMA_VERSION, SessionStore, SessionSummary, StoreError, StoredLease,
    };
    #[cfg(feature = "sqlite")]
    pub use colloquy_store::{Durability, SqliteStore};
}

pub mod speech {
    //! Playing the agent's speech: the [`SpeechSink`] a host implements (text in, a [`Playout`]
    //! out, interruptible), and [`PacedSink`], one that plays at a fixed pace.

    pub use colloquy_actors::{InterruptSignal, PacedSink, Playout, PlayoutReport, SpeechSink};
}

pub mod templates {
    //! The texts the runtime gives the model (a background call's update, a refused duplicate, a
    //! deferred reply's instruction): [`Templates`] replaces any of them for a session or an
    //! agent; [`defaults`] holds the built-in ones.

    pub use colloquy_model::templates::{
        Placeholders, Template, TemplateError, Templates, defaults,
    };
}

pub mod testing {
    //! Testing a conversation: what [`SessionHandle::run`](crate::session::SessionHandle::run)
    //! returns ([`RunResult`]) and the expectations over it, and the scope of a tool mock
    //! ([`MockScope`]). The model is scripted with [`ScriptedLlm`](crate::llm::ScriptedLlm);
    //! `docs/testing.md` is the guide.

    pub use colloquy_actors::MockScope;
    pub use colloquy_model::run_result::{
        CallExpect, EventExpect, MessageExpect, OutputExpect, RunExpect, RunResult,
    };
}

pub mod timeline {
    //! A session's events as a self-contained HTML page: a timeline of speeches and tool calls
    //! (what `colloquy run FILE --timeline` writes).

    pub use colloquy_model::timeline::render_html;
}

/// What the code `#[function_tool]` writes refers to; not an API.
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
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
    pub use crate::agent::{Agent, Handoff};
    #[cfg(feature = "anthropic")]
    pub use crate::anthropic::Anthropic;
    pub use crate::chat::{ChatItem, FunctionCall, FunctionCallOutput, Message, Role};
    pub use crate::events::{
        AgentState, ErrorSource, EventFilter, EventKind, EventStream, EventType, SessionEvent,
        ToolCallStatus, UserState,
    };
    pub use crate::llm::{Llm, ScriptedCall, ScriptedLlm, ScriptedResponse, ToolChoice};
    #[cfg(feature = "mcp")]
    pub use crate::mcp::McpToolset;
    #[cfg(feature = "openai")]
    pub use crate::openai::OpenAi;
    pub use crate::session::{
        ActorNode, Host, NodeStatus, Session, SessionError, SessionHandle, SessionSnapshot,
    };
    pub use crate::speech::{Playout, PlayoutReport, SpeechSink};
    pub use crate::testing::{MockScope, RunResult};
    pub use crate::tools::{
        BeforeCall, DuplicateScope, Filler, FunctionTool, Json, OnDuplicate, OnInterrupted,
        PendingToolCall, RunContext, RunContextExt, StopResponse, ToolError, ToolResult, Toolset,
        function_tool, function_tools,
    };
    pub use serde_json::{Value, json};
}
