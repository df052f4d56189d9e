//! colloquy sessions across machines, on NATS (docs/cluster.md).
//!
//! A **node** ([`Node::builder`]) is a process that runs sessions: it registers agents by
//! name, announces itself (agents, sessions, load) in a NATS key-value bucket every second,
//! takes placement requests for itself while under its load threshold, serves each session's
//! commands on a subject of its own and publishes every event to a JetStream stream, and
//! drains on request or SIGTERM.
//!
//! A **host** ([`Cluster::connect`]) places sessions on the least loaded node
//! ([`Cluster::start_session`]) or a named one, and drives each through a [`RemoteSession`]
//! with the `SessionHandle` methods a remote client can call (the commands of
//! `colloquy-protocol`), every request bounded by a [`Timeouts`] value. Its events come from
//! the stream, in order, resumable after a reconnect or a restart
//! ([`RemoteSession::subscribe_from`]).
//!
//! A node that stops heartbeating is **lost** `lost_after` later (3 s by default): every host
//! with sessions there writes `x_node_lost` into their events and fails their calls with
//! [`ClusterError::NodeLost`]; the node has already stopped those sessions by itself, at once
//! and publishing nothing more of theirs ([`NODE_LOST`], docs/cluster.md#fencing).
//!
//! NATS rather than a transport of our own, or ractor's cluster: docs/decisions.md#nats.

mod error;
mod host;
mod journal_store;
mod names;
mod nats;
mod node;
mod wire;

/// What a session's error answer says ([`ClusterError::Session`]).
pub use colloquy_protocol::{ErrorKind, ProtocolError};
pub use error::ClusterError;
pub use host::{
    Cluster, ClusterBuilder, EventCursor, MOVE_TIMEOUT, RemoteEvent, RemoteEvents, RemoteSession,
    Timeouts,
};
pub use journal_store::JetStreamStore;
pub use names::{
    EVENTS_DUPLICATE_WINDOW, EVENTS_MAX_AGE, EVENTS_MAX_BYTES, EVENTS_MAX_READERS,
    EVENTS_PER_SESSION, EVENTS_STREAM, EVENTS_SUBJECTS, HOST_HEARTBEAT, HOST_LOST_AFTER,
    JOURNAL_SUBJECTS, JOURNAL_TIMEOUT, JOURNALS_STREAM, MIN_HOST_LOST_AFTER, MIN_LOST_AFTER,
    NODE_MARKER_TTL, NODE_TTL, NODES_BUCKET, SESSIONS_BUCKET,
};
pub use nats::{CONNECT_TIMEOUT, NatsConfig};
pub use node::{
    Agents, DrainReport, EVENT_TIMEOUT, EVENTS_UNSTORED, HEARTBEAT, HOST_LOST, MAX_IN_FLIGHT,
    NODE_DRAINING, NODE_LOST, Node, NodeBuilder, NodeHandle, NodeLoad, OnDrain, SessionStart,
};
pub use wire::{CLUSTER_VERSION, NodeInfo, Refusal, SessionRecord, StartOptions};
