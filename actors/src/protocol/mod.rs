//! The runtime's protocols: every actor's messages, and the link a child uses to reach the
//! Session (with what every actor of the session shares). This layer sits below every actor
//! module: it imports core, llm, `support/` and the host-facing types of `api/` (options,
//! errors, snapshots, the speech sink), never an actor, so an actor module depends on the
//! protocols it speaks rather than on its parent or its siblings.

mod activity;
mod coalescer;
mod link;
mod session;
mod tool_call;
mod toolset;

pub(crate) use activity::{ActivityMsg, ActivityPart, SpeechContent, SpeechJob};
pub(crate) use coalescer::{CoalescerMsg, CoalescerSlot, PendingReply};
pub(crate) use link::{Plugins, SessionLink, SessionShared, TextWanted};
pub(crate) use session::{
    ChildMsg, CloseCallback, HostMsg, ObserveMsg, Report, SessionMsg, SessionPart, Subscriber,
    TimerMsg, ToolMsg,
};
pub use session::{ClosedSession, MockScope, RunningToolCall};
pub(crate) use tool_call::ToolCallMsg;
pub(crate) use toolset::{CallOutcome, ExecuteCall, ToolsetMsg, mark_non_blocking};
