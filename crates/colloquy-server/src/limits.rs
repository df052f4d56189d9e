//! Every bound the server keeps, with its default (docs/protocol.md#limits,
//! docs/decisions.md#web-protocol).

use std::time::Duration;

/// The server's limits. Each field's doc gives its default; the builder sets them one by one
/// ([`ServerBuilder::limits`](crate::ServerBuilder::limits) takes them all).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The largest client frame the server reads (64 KiB); a larger one is answered with a
    /// `too_large` error frame and the connection stays.
    pub max_frame_bytes: usize,
    /// The largest frame the WebSocket layer accepts at all (1 MiB): past it the server
    /// closes the socket (code 1009) rather than read it.
    pub max_frame_bytes_hard: usize,
    /// The largest HTTP request body (1 MiB: a session's starting history fits).
    pub max_body_bytes: usize,
    /// Live sessions at most (100); one more is refused with `503 too_many_sessions`.
    pub max_sessions: usize,
    /// HTTP connections open at once (1,024), not counting those that became WebSockets;
    /// past it the server accepts no more until one ends (the kernel's backlog holds them).
    pub max_connections: usize,
    /// WebSockets open at once (1,024), apart from the HTTP connections; one more is refused
    /// with `503 too_many_connections`.
    pub max_websockets: usize,
    /// WebSockets open at once from one client, by IP address (128); one more is refused with
    /// `429 too_many_connections`. Behind a proxy every client has the proxy's address: raise
    /// it there.
    pub max_websockets_per_client: usize,
    /// Clients attached to one session at once (32); one more is refused with `503
    /// too_many_clients`.
    pub max_clients_per_session: usize,
    /// How long a request's body may take to arrive once its headers have (10 s); then it is
    /// refused with `400 bad_request`.
    pub body_timeout: Duration,
    /// Events queued for one connection and not yet taken by its socket (1,024). A full
    /// queue is waited on, for as long as the events the client has yet to read are still in
    /// the session's replay buffer; once they leave it the connection closes with
    /// `slow_client`. The session is unharmed either way.
    pub max_unread_frames: usize,
    /// How long a reply, an error frame or a ping may wait for room among the frames queued
    /// for a connection (5 s), which keeps room for them apart from its events; then the
    /// connection closes with `slow_client`.
    pub slow_client_grace: Duration,
    /// Events each session keeps for clients that reconnect (10,000); asking for an older one
    /// gets a `gap` error frame.
    pub replay_events: usize,
    /// The most bytes of encoded events each session keeps (32 MiB), evicting the oldest as
    /// [`replay_events`](Self::replay_events) does; the newest is kept whatever its size. A
    /// few tool results of megabytes would otherwise let 10,000 events hold gigabytes.
    pub replay_bytes: usize,
    /// How long a session lives with no client attached (5 minutes); then it closes with
    /// reason `client_gone`.
    pub idle_session: Duration,
    /// Requests one connection runs at once (32); one more is answered with a `busy` error
    /// reply.
    pub max_in_flight: usize,
    /// How long a client may take to send a request's headers (10 s).
    pub header_read_timeout: Duration,
    /// How often the server pings a WebSocket client (20 s).
    pub ping_interval: Duration,
    /// How long a WebSocket client may stay silent (no frame, not even the answer to a ping)
    /// before the server drops the connection as gone (60 s).
    pub client_timeout: Duration,
    /// How long the last frames of a closing connection may take to write (2 s).
    pub close_timeout: Duration,
    /// How long a shutdown waits for the sessions to close and the connections to end (10 s).
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 64 * 1024,
            max_frame_bytes_hard: 1024 * 1024,
            max_body_bytes: 1024 * 1024,
            max_sessions: 100,
            max_connections: 1024,
            max_websockets: 1024,
            max_websockets_per_client: 128,
            max_clients_per_session: 32,
            body_timeout: Duration::from_secs(10),
            max_unread_frames: 1024,
            slow_client_grace: Duration::from_secs(5),
            replay_events: 10_000,
            replay_bytes: 32 * 1024 * 1024,
            idle_session: Duration::from_secs(5 * 60),
            max_in_flight: 32,
            header_read_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(20),
            client_timeout: Duration::from_secs(60),
            close_timeout: Duration::from_secs(2),
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}
