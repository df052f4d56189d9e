//! The Activity's messages and the speech jobs it runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_llm::{RequestKind, ToolChoice};
use colloquy_model::FunctionTool;
use ractor::RpcReplyPort;

/// What a speech does.
#[derive(Clone, Debug)]
pub(crate) enum SpeechContent {
    /// Ask the LLM (with optional extra instructions and `tool_choice` on the first step).
    Reply { kind: RequestKind, extra_instructions: Option<String>, tool_choice: Option<ToolChoice> },
    /// Play a fixed text.
    Say { text: String },
}

/// One unit of agent output.
#[derive(Clone, Debug)]
pub(crate) struct SpeechJob {
    pub speech_id: String,
    pub content: SpeechContent,
    pub allow_interruptions: bool,
    /// The speech's `tracing` span (its task runs in it).
    pub span: tracing::Span,
}

/// A call that was running when its session's process ended, to run again after the resume
/// (docs/durability.md#on-interrupted).
#[derive(Debug)]
pub(crate) struct RerunCall {
    /// The call, as the model made it (same id, same arguments).
    pub call: colloquy_model::FunctionCall,
    /// The host approves it first (`ask`).
    pub ask: bool,
    /// The updates its context already holds (its first answer included): it numbers its own
    /// after them.
    pub updates: u32,
}

/// Everything an Activity actor handles.
pub(crate) enum ActivityMsg {
    /// Queue a speech.
    Speak(SpeechJob),
    /// Interrupt the current speech and queued ones that allow it; `reply` answers once the
    /// current speech is done (at once if nothing was interrupted).
    Interrupt { reply: Option<RpcReplyPort<()>> },
    /// The speech wants to speak again (its tool reply); answered when it holds the floor.
    FloorRequest { speech_id: String, reply: RpcReplyPort<()> },
    /// A speech lent its floor or ended while the Activity waited for something (see
    /// `lending.rs`): the checks after every message take it from there.
    Wake,
    /// Interrupt everything, let the current speech wind down, then tell the Session.
    Close,
    /// A handoff: let the live speeches finish (blocking tools included), then tell the Session.
    /// `keep`: async toolsets the next agent also lists; they move to the Session (then to
    /// the next Activity) with their calls running.
    Drain { keep: Vec<String> },
    /// The drain (handoff or close) ran out of time: every toolset this Activity drains
    /// aborts its calls and starts no new one (decision 7).
    DrainExpired,
    /// Panic (failure-isolation tests).
    #[cfg(feature = "test-hooks")]
    InjectFailure,
    /// Make one of this Activity's toolsets panic (failure-isolation tests).
    #[cfg(feature = "test-hooks")]
    InjectToolsetFailure(String),
    /// Run again the calls a resume found in doubt, in the background: each result comes as
    /// its `_final` pair.
    Rerun(Vec<RerunCall>),
    /// Describe this Activity (`SessionHandle::inspect`).
    Inspect(RpcReplyPort<ActivityPart>),
    /// Replace the mocked tool bodies of this agent's toolset.
    SetMocks(Arc<BTreeMap<String, FunctionTool>>),
    /// A session-scoped toolset failed and the Session started it again: calls go to
    /// `toolset` from now on.
    ReplaceToolset { id: String, toolset: ractor::ActorRef<super::ToolsetMsg> },
}

/// The Activity's answer.
pub(crate) struct ActivityPart {
    pub node: crate::types::snapshot::ActorNode,
    pub speeches: Vec<crate::types::snapshot::SpeechSnapshot>,
    /// The toolsets it supervises.
    pub toolsets: Vec<ractor::ActorRef<super::toolset::ToolsetMsg>>,
    /// The nodes of its own toolsets not started yet (decision 81).
    pub unstarted: Vec<crate::types::snapshot::ActorNode>,
}
