//! The tools the runtime brings: the companion tools that list and cancel running calls, the
//! end-call tool, filler speech, and what a tool's `RunContext` can do with its session
//! (`RunContextExt`). Each reaches its session only through a `SessionHandle`, as a host's
//! own tool would.

pub(crate) mod companions;
pub(crate) mod end_call;
pub(crate) mod filler;
pub(crate) mod tool_context;
