//! colloquy sessions over HTTP and a WebSocket (docs/protocol.md): a client starts a session
//! with `POST /v1/sessions`, attaches to it at `GET /v1/sessions/{id}/ws`, sends the session
//! protocol's requests and reads its events, numbered from 1 and replayed after a reconnect.
//! `GET /` serves a playground page.
//!
//! Sessions run where a [`Backend`] puts them: in this process by default (agents registered
//! by name with [`ServerBuilder::agent`], on one model), or anywhere a backend of the host's
//! own reaches. Each session has one task that reads its lossless event stream from its start
//! into a bounded replay buffer; each connection has one writer task behind a bounded queue,
//! and runs its requests with `colloquy_edge::execute` where the session lives. Every limit
//! is a [`Limits`] field with a documented default.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use colloquy_model::Agent;
//! use colloquy_llm::ScriptedLlm;
//! use colloquy_server::Server;
//!
//! let server = Server::builder()
//!     .llm(ScriptedLlm::new([]))
//!     .agent("demo", || Agent::new("demo", "You help."))
//!     .bind("127.0.0.1:8080".parse()?)
//!     .await?;
//! println!("{}", server.url());
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod assets;
mod auth;
mod backend;
#[cfg(feature = "cluster")]
mod cluster;
mod connection;
mod limits;
mod live;
mod numbers;
mod registry;
mod routes;
mod server;
mod sockets;
mod stored;

pub use backend::{
    Agents, Backend, LocalBackend, SessionDriver, SessionStart, StartedSession, StreamItem,
};
#[cfg(feature = "cluster")]
pub use cluster::ClusterBackend;
pub use limits::Limits;
pub use live::{CLIENT_GONE, EVENTS_ENDED, SERVER_SHUTDOWN, SUSPENDED};
pub use routes::CLIENT_CLOSED;
pub use server::{BindError, Server, ServerBuilder, ServerHandle};

/// The WebSocket subprotocol the server answers with; a browser that sends its token as the
/// subprotocol `colloquy.bearer.<token>` offers this one beside it.
pub const SUBPROTOCOL: &str = "colloquy.v1";

/// The prefix of the subprotocol that carries a bearer token, for clients that cannot set an
/// `Authorization` header on a WebSocket (browsers).
pub const BEARER_SUBPROTOCOL_PREFIX: &str = "colloquy.bearer.";
