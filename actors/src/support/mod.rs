//! What the actors share and no actor owns: an agent's tool catalog (and the tools learned
//! while the session runs), the session clock, the lifecycle sink, a speech's interruption
//! switch, and tasks owned by an actor's state. No file here imports an actor.

pub(crate) mod catalog;
pub(crate) mod clock;
pub(crate) mod lifecycle_sink;
pub(crate) mod speech_control;
pub(crate) mod task;
pub(crate) mod tool_sources;
