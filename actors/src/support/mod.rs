//! What the actors share and no actor owns: the session clock, the lifecycle sink, a speech's
//! interruption switch, tasks owned by an actor's state, and the writer each store shares. Above `types/` only: no file here
//! imports an actor, a message or a tool.

pub(crate) mod clock;
pub(crate) mod lifecycle_sink;
pub(crate) mod pair;
pub(crate) mod speech_control;
pub(crate) mod store_writer;
pub(crate) mod task;
