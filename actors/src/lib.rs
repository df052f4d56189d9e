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
mod builder;
mod catalog;
mod clock;
mod coalescer;
mod companions;
mod end_call;
mod error;
mod filler;
mod handle;
mod host;
mod inspect;
mod lifecycle;
mod options;
mod protocol;
mod session;
mod snapshot;
mod speech_control;
mod speech_sink;
mod task;
mod tool_call;
mod tool_context;
mod tool_sources;
mod toolset;

pub use builder::{Session, SessionBuilder};
pub use end_call::{
    END_CALL, END_CALL_DESCRIPTION, END_CALL_REASON, END_INSTRUCTIONS, EndCallTool,
};
pub use error::{ApprovalError, CancelError, SessionError};
pub use filler::{Filler, FillerGuard};
pub use handle::{BROADCAST_CAPACITY, EventStream, SessionHandle};
pub use host::Host;
pub use lifecycle::{ActorKind, Lifecycle, LifecycleEvent, MAX_UNREAD_LIFECYCLE};
pub use options::SessionOptions;
pub use protocol::{ClosedSession, MockScope, RunningToolCall};
/// The ractor crate colloquy runs on (the version [`SessionHandle::actor_cell`] returns).
pub use ractor;
pub use snapshot::{
    ActorNode, CoalescerSnapshot, NodeStatus, SessionSnapshot, SpeechSnapshot, SpeechStatus,
    ToolsetScope,
};
pub use speech_sink::{InterruptSignal, PacedSink, Playout, PlayoutReport, SpeechSink};
pub use tool_context::{Foreground, RunContextExt};
