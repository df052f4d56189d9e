//! The actors' messages: what each actor is sent, the link a child uses to reach the Session
//! (with what every actor of the session shares), and the `SessionHandle` a host or a tool
//! drives a session with (`handle.rs`, `inspect.rs`). This layer sits below every actor
//! module: it imports the model, llm, `types/` and `support/`, never an actor, so an actor
//! module depends on the messages it speaks rather than on its parent or its siblings. (The
//! wire protocol is the `colloquy-protocol` crate.)

mod activity;
mod coalescer;
pub(crate) mod handle;
mod inspect;
mod link;
mod session;
mod tool_call;
mod toolset;

pub(crate) use activity::{ActivityMsg, ActivityPart, RerunCall, SpeechContent, SpeechJob};
pub(crate) use coalescer::{CoalescerMsg, CoalescerSlot, PendingReply};
pub(crate) use link::{Plugins, SessionLink, SessionShared, TextWanted};
pub(crate) use session::{
    ChildMsg, CloseCallback, HostMsg, ObserveMsg, Report, SessionMsg, SessionPart, Subscriber,
    TimerMsg, ToolMsg,
};
pub use session::{ClosedSession, MockScope, RunningToolCall};
pub(crate) use tool_call::ToolCallMsg;
pub(crate) use toolset::{CallOutcome, ExecuteCall, ToolsetMsg, mark_non_blocking};
