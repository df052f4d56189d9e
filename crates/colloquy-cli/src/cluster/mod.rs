//! The cluster commands: `colloquy node` runs a node ([`node::run`]), `colloquy nodes` lists
//! the live ones ([`nodes::run`]); `colloquy chat --nats` is the chat's (`chat/remote.rs`).
//! What every command shares to reach NATS is `command.rs`.

pub mod node;
pub mod nodes;

pub use crate::command::CommandError;
