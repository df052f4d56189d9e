//! colloquy's actor runtime, on ractor.
//!
//! A host starts a session with [`Session::builder`] and drives it through the returned
//! [`SessionHandle`]. Inside, each box is a ractor actor with its own typed messages:
//!
//! ```text
//! Session             history, every agent's context, states, idle decision, event fan-out
//! ├─ ReplyCoalescer   background pairs waiting for a deferred reply
//! ├─ Toolset          session-scoped async toolsets (they survive a handoff)
//! └─ Activity         the current agent: its speech queue, one speech on the floor at a time
//!    └─ Toolset       its implicit toolset `agent:<id>`, and agent-scoped async toolsets
//!       └─ ToolCall   one per running call; runs the tool's future in a task it owns
//! ```
//!
//! A [`Host`] the app owns can supervise sessions and stream their lifecycle.
//!
//! See `docs/ARCHITECTURE.md` for the code map and the invariants each actor keeps.

mod activity;
mod api;
mod builtin;
mod catalog;
mod coalescer;
mod messages;
mod session;
mod support;
mod tool_call;
mod toolset;
mod types;

pub use api::builder::{Session, SessionBuilder};
pub use api::host::Host;
pub use builtin::end_call::{
    END_CALL, END_CALL_DESCRIPTION, END_CALL_REASON, END_INSTRUCTIONS, EndCallTool,
};
pub use builtin::filler::{Filler, FillerGuard};
pub use builtin::tool_context::{Foreground, RunContextExt};
pub use messages::handle::{BROADCAST_CAPACITY, EventStream, SessionHandle};
pub use messages::{ClosedSession, MockScope, RunningToolCall};
/// The ractor crate colloquy runs on (the version [`SessionHandle::actor_cell`] returns).
pub use ractor;
pub use support::counters::MessageCounts;
pub use types::error::{ApprovalError, CancelError, SessionError};
pub use types::lifecycle::{ActorKind, Lifecycle, LifecycleEvent, MAX_UNREAD_LIFECYCLE};
pub use types::options::SessionOptions;
pub use types::snapshot::{
    ActorNode, CoalescerSnapshot, NodeStatus, SessionSnapshot, SpeechSnapshot, SpeechStatus,
    ToolsetScope,
};
pub use types::speech_sink::{InterruptSignal, PacedSink, Playout, PlayoutReport, SpeechSink};
