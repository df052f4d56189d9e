//! [`ClusterError`]: what can go wrong between a host, NATS and the nodes.

use std::time::Duration;

use crate::wire::Refusal;

/// Why a cluster call failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// NATS could not be reached.
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect {
        /// The server asked for (credentials left out).
        url: String,
        /// What the client said.
        reason: String,
    },
    /// NATS refused the credentials (a wrong or missing token, user or password).
    #[error(
        "NATS at {url} refused the credentials ({reason}): check the token or user and password"
    )]
    Auth {
        /// The server asked for (credentials left out).
        url: String,
        /// What the server said.
        reason: String,
    },
    /// TLS could not be set up: a certificate file that cannot be read, a server certificate
    /// not signed by a trusted authority, or TLS required of a server without it.
    #[error("TLS with NATS at {url} failed ({reason}): check the certificates")]
    Tls {
        /// The server asked for (credentials left out).
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server has no JetStream, or it refused to set up the cluster's buckets and stream.
    #[error("NATS JetStream set-up failed ({what}): {reason}")]
    Setup {
        /// The bucket or stream.
        what: String,
        /// What the server said.
        reason: String,
    },
    /// A name that cannot be one token of a NATS subject.
    #[error("`{0}` is not a valid name: use letters, digits, `-` and `_`")]
    InvalidName(String),
    /// A node that cannot start as configured.
    #[error("invalid node configuration: {0}")]
    Config(String),
    /// Another live node holds this name.
    #[error(
        "node name `{0}` is held by a live node (it frees once that node's entry expires, \
         `lost_after` after its last heartbeat)"
    )]
    NameTaken(String),
    /// No live node could take the session.
    #[error("no node can take a `{agent}` session: {detail}")]
    NoNode {
        /// The agent asked for.
        agent: String,
        /// Which nodes were tried and why each refused, or why none was tried.
        detail: String,
    },
    /// The node asked refused the session.
    #[error("node `{node}` refused the session: {refusal}")]
    Refused {
        /// The node.
        node: String,
        /// Why.
        refusal: Refusal,
    },
    /// The node took the session but it could not start (its configuration).
    #[error("node `{node}` could not start the session: {message}")]
    StartFailed {
        /// The node.
        node: String,
        /// What the session builder said.
        message: String,
    },
    /// The node that holds the session (or the one asked) is no longer live: its entry
    /// expired, or it registered again under a new lease (docs/cluster.md#failure).
    #[error("node `{node}` is lost")]
    NodeLost {
        /// The node.
        node: String,
    },
    /// No answer within the bound.
    #[error("`{what}` got no answer within {after:?}")]
    Timeout {
        /// The request.
        what: String,
        /// The bound.
        after: Duration,
    },
    /// No live session has this id.
    #[error("session {0} not found")]
    NotFound(String),
    /// The session answered with an error (the session protocol's: closed, a call not found,
    /// not cancellable, …), or its answer could not be read.
    #[error(transparent)]
    Session(colloquy_protocol::ProtocolError),
    /// Events of the session are gone from the stream (its retention limits) before this
    /// subscriber read them.
    #[error("events {first}..={last} of session {session} were dropped by the stream's retention")]
    EventsLost {
        /// The session.
        session: String,
        /// The first missing index.
        first: u64,
        /// The last missing index.
        last: u64,
    },
    /// A request bigger than NATS carries (the server's `max_payload`): a start whose
    /// history is too long, say. Sending it again cannot help; send less.
    #[error("{what} is {size} bytes, over the NATS server's max_payload ({limit} bytes)")]
    TooLarge {
        /// The request.
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The server's `max_payload`.
        limit: usize,
    },
    /// Something on the way failed: NATS, or a message neither side could read.
    #[error("NATS: {0}")]
    Nats(String),
}

impl ClusterError {
    pub(crate) fn nats(e: impl std::fmt::Display) -> Self {
        Self::Nats(e.to_string())
    }
}
