//! What the actors share and no actor owns: the session clock, the lifecycle sink, a speech's
//! interruption switch, tasks owned by an actor's state, the writer each store shares, and the
//! message counters of the `count-messages` feature. Above `types/` only: no file here
//! imports an actor, a message or a tool.

pub(crate) mod clock;
pub(crate) mod counters;
pub(crate) mod lifecycle_sink;
pub(crate) mod pair;
pub(crate) mod speech_control;
pub(crate) mod store_writer;
pub(crate) mod task;
