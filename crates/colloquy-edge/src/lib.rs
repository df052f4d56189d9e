//! Where colloquy's runtime meets its session protocol, on the side that holds the session:
//! [`execute`] runs a protocol request on a `SessionHandle`, and [`to_proto`] and
//! [`from_proto`] convert between the runtime's types (`colloquy-actors`, `colloquy-llm`) and
//! the protocol's (`colloquy-protocol`); [`hosting`] what the hosts of agents by name share
//! (the server's local backend, a cluster node).
//!
//! Only the edge serializes: the runtime's types carry no protocol attribute, the protocol's
//! are plain data over the data model, and this crate, which knows both, converts. A change to
//! the runtime then changes the protocol only through a conversion here, where it shows. The
//! server and the cluster both use it, so a command means the same thing whichever way it
//! came.

mod execute;
pub mod from_proto;
pub mod history;
pub mod hosting;
pub mod to_proto;

pub use execute::execute;
pub use hosting::{Agents, SessionStart};
