//! The server: its builder (the backend, the token, the allowed origins, the limits), binding
//! it, and its graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use colloquy_actors::{SessionBuilder, SessionHandle};
use colloquy_llm::Llm;
use colloquy_model::Agent;
use colloquy_ops::{Listener, Metrics, OpsServer, ServeOptions};
use colloquy_store::SessionStore;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::auth::{Origin, Token};
use crate::backend::{Agents, Backend, LocalBackend, SessionStart};
use crate::limits::Limits;
use crate::numbers::Numbers;
use crate::registry::Registry;
use crate::routes::{Shared, router};

/// The server's entry point.
#[derive(Debug)]
pub struct Server;

impl Server {
    /// A server with no agent yet, on the default [`Limits`].
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }
}

/// Configures a server; [`bind`](Self::bind) starts it.
#[derive(Default)]
pub struct ServerBuilder {
    local: LocalBackend,
    backend: Option<Arc<dyn Backend>>,
    token: Option<Token>,
    allowed_origins: Vec<String>,
    limits: Limits,
    history_instructions: bool,
    metrics: Option<Metrics>,
    /// Where the kept sessions' last event numbers go (`store`).
    numbers: Option<PathBuf>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("local", &self.local)
            .field("token", &self.token)
            .field("allowed_origins", &self.allowed_origins)
            .field("limits", &self.limits)
            .field("history_instructions", &self.history_instructions)
            .field("metrics", &self.metrics.is_some())
            .field("numbers", &self.numbers)
            .finish_non_exhaustive()
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Listening on an address other machines reach without a token.
    #[error(
        "{0} is reachable from other machines: a bearer token is required there (set one with \
         ServerBuilder::token, or `colloquy serve --token-env VAR`)"
    )]
    TokenRequired(SocketAddr),
    /// The token is empty or has a character other than letters, digits and `-._~` (a browser
    /// sends it as a WebSocket subprotocol, which cannot carry others). The message does not
    /// show the token.
    #[error(
        "the bearer token must be non-empty and made of letters, digits and `-._~` only (a \
         browser sends it as a WebSocket subprotocol)"
    )]
    InvalidToken,
    /// An allowed origin that is not `scheme://host[:port]` (`*` included: name each origin).
    #[error("--allow-origin `{origin}`: {reason}")]
    InvalidOrigin {
        /// The origin as given.
        origin: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The directory of the kept event numbers could not be made ([`ServerBuilder::store`]).
    #[error("cannot keep event numbers in {}: {source}", dir.display())]
    Numbers {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl ServerBuilder {
    /// Offers `factory`'s agent under `name`, in this process (the first registered is the
    /// default). Not used once [`backend`](Self::backend) is set.
    #[must_use]
    pub fn agent(
        mut self,
        name: impl Into<String>,
        factory: impl Fn() -> Agent + Send + Sync + 'static,
    ) -> Self {
        self.local = self.local.agent(name, factory);
        self
    }

    /// The agents of the sessions that run in this process, their model and hooks, all at
    /// once: replaces what [`agent`](Self::agent), [`llm`](Self::llm),
    /// [`session`](Self::session) and [`on_session`](Self::on_session) set before. Not used
    /// once [`backend`](Self::backend) is set.
    #[must_use]
    pub fn agents(mut self, agents: Agents) -> Self {
        self.local = LocalBackend::from(agents);
        self
    }

    /// The model of the sessions that run in this process.
    #[must_use]
    pub fn llm(mut self, llm: impl Llm) -> Self {
        self.local = self.local.llm(llm);
        self
    }

    /// Configures each session that runs in this process, knowing which agent and
    /// `metadata` its client asked for ([`LocalBackend::session`]). Not used once
    /// [`backend`](Self::backend) is set: a backend of its own hands `metadata` on itself (a
    /// cluster node to its own session hook).
    #[must_use]
    pub fn session(
        mut self,
        hook: impl Fn(SessionBuilder, &SessionStart) -> SessionBuilder + Send + Sync + 'static,
    ) -> Self {
        self.local = self.local.session(hook);
        self
    }

    /// Hears of each session that runs in this process once it has started
    /// ([`LocalBackend::on_session`]).
    #[must_use]
    pub fn on_session(
        mut self,
        started: impl Fn(&SessionHandle, &SessionStart) + Send + Sync + 'static,
    ) -> Self {
        self.local = self.local.on_session(started);
        self
    }

    /// Keeps every session that runs in this process in `store`, so that it outlives the
    /// process: a server on the same store lists it (`GET /v1/sessions`) and resumes it when
    /// a client attaches; its sessions suspend, not close, when idle and at a shutdown. Each
    /// session's last event number is kept in a file of directory `numbers` (made at
    /// [`bind`](Self::bind) if missing), so that a resumed session numbers its events on
    /// from there (docs/decisions.md#serve-store). Not used once
    /// [`backend`](Self::backend) is set.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn SessionStore>, numbers: impl Into<PathBuf>) -> Self {
        self.local = self.local.store(store);
        self.numbers = Some(numbers.into());
        self
    }

    /// Runs sessions where `backend` puts them instead of in this process.
    #[must_use]
    pub fn backend(mut self, backend: impl Backend) -> Self {
        self.backend = Some(Arc::new(backend));
        self
    }

    /// Requires `Authorization: Bearer <token>` (or the subprotocol `colloquy.bearer.<token>`)
    /// on every `/v1/` route. Required to listen on anything but a loopback address. It must
    /// be non-empty and made of letters, digits and `-._~` (a browser sends it as a WebSocket
    /// subprotocol): [`bind`](Self::bind) refuses another with [`BindError::InvalidToken`].
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Token::new(token.into()));
        self
    }

    /// Also accepts requests whose `Origin` is `origin` (`https://app.example.com`), besides
    /// the server's own and requests without one. Read as `scheme://host[:port]` (case and a
    /// default port do not matter); [`bind`](Self::bind) refuses `*` or anything else with
    /// [`BindError::InvalidOrigin`].
    #[must_use]
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Takes `system` and `developer` messages in a start's history (refused by default: a
    /// client's history is prompt content, and these instruct the model,
    /// docs/protocol.md#history).
    #[must_use]
    pub fn history_instructions(mut self, allowed: bool) -> Self {
        self.history_instructions = allowed;
        self
    }

    /// Serves `metrics` at `GET /metrics` on the server's own address, beside `/healthz`
    /// (colloquy-ops' route), and counts into it each session that runs in this process from
    /// its start. A [`backend`](Self::backend) of its own counts its sessions where they run
    /// (a cluster's nodes): the server does not count them.
    #[must_use]
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Every limit at once.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// [`Limits::max_frame_bytes`] (64 KiB).
    #[must_use]
    pub fn max_frame_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_frame_bytes = bytes;
        self
    }

    /// [`Limits::max_sessions`] (100).
    #[must_use]
    pub fn max_sessions(mut self, sessions: usize) -> Self {
        self.limits.max_sessions = sessions;
        self
    }

    /// [`Limits::max_connections`] (1,024).
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.limits.max_connections = connections;
        self
    }

    /// [`Limits::max_websockets`] (1,024).
    #[must_use]
    pub fn max_websockets(mut self, sockets: usize) -> Self {
        self.limits.max_websockets = sockets;
        self
    }

    /// [`Limits::max_websockets_per_client`] (128).
    #[must_use]
    pub fn max_websockets_per_client(mut self, sockets: usize) -> Self {
        self.limits.max_websockets_per_client = sockets;
        self
    }

    /// [`Limits::max_clients_per_session`] (32).
    #[must_use]
    pub fn max_clients_per_session(mut self, clients: usize) -> Self {
        self.limits.max_clients_per_session = clients;
        self
    }

    /// [`Limits::body_timeout`] (10 s).
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.limits.body_timeout = timeout;
        self
    }

    /// [`Limits::max_unread_frames`] (1,024).
    #[must_use]
    pub fn max_unread_frames(mut self, frames: usize) -> Self {
        self.limits.max_unread_frames = frames;
        self
    }

    /// [`Limits::slow_client_grace`] (5 s).
    #[must_use]
    pub fn slow_client_grace(mut self, grace: Duration) -> Self {
        self.limits.slow_client_grace = grace;
        self
    }

    /// [`Limits::replay_events`] (10,000).
    #[must_use]
    pub fn replay_events(mut self, events: usize) -> Self {
        self.limits.replay_events = events;
        self
    }

    /// [`Limits::replay_bytes`] (32 MiB).
    #[must_use]
    pub fn replay_bytes(mut self, bytes: usize) -> Self {
        self.limits.replay_bytes = bytes;
        self
    }

    /// [`Limits::idle_session`] (5 minutes).
    #[must_use]
    pub fn idle_session(mut self, idle: Duration) -> Self {
        self.limits.idle_session = idle;
        self
    }

    /// [`Limits::max_in_flight`] (32).
    #[must_use]
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.limits.max_in_flight = requests;
        self
    }

    /// [`Limits::ping_interval`] (20 s) and [`Limits::client_timeout`] (60 s).
    #[must_use]
    pub fn pings(mut self, interval: Duration, client_timeout: Duration) -> Self {
        self.limits.ping_interval = interval;
        self.limits.client_timeout = client_timeout;
        self
    }

    /// [`Limits::header_read_timeout`] (10 s).
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_read_timeout = timeout;
        self
    }

    /// [`Limits::shutdown_timeout`] (10 s).
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.limits.shutdown_timeout = timeout;
        self
    }

    /// Listens on `addr` (port 0 picks a free one) and serves until
    /// [`ServerHandle::shutdown`].
    pub async fn bind(self, addr: SocketAddr) -> Result<ServerHandle, BindError> {
        if self.token.as_ref().is_some_and(|token| !token.is_valid()) {
            return Err(BindError::InvalidToken);
        }
        let allowed_origins = self
            .allowed_origins
            .iter()
            .map(|origin| {
                Origin::parse(origin)
                    .map_err(|reason| BindError::InvalidOrigin { origin: origin.clone(), reason })
            })
            .collect::<Result<Arc<[Origin]>, _>>()?;
        if self.token.is_none() && !addr.ip().is_loopback() {
            return Err(BindError::TokenRequired(addr));
        }
        let listener =
            Listener::bind(addr).await.map_err(|source| BindError::Listen { addr, source })?;
        let local = listener.local_addr();
        let (stop, shutdown) = watch::channel(false);
        // Numbers only for sessions kept in a store, which a backend of its own has none of.
        let numbers = match &self.numbers {
            Some(dir) if self.backend.is_none() && self.local.is_stored() => Some(
                Numbers::open(dir)
                    .map_err(|source| BindError::Numbers { dir: dir.clone(), source })?,
            ),
            _ => None,
        };
        let backend = match self.backend {
            Some(backend) => backend,
            None => Arc::new(self.local.watched_by(self.metrics.clone())),
        };
        let shared = Arc::new(Shared {
            backend,
            registry: Arc::new(Registry::default()),
            sockets: Arc::default(),
            limits: self.limits,
            history_instructions: self.history_instructions,
            token: self.token,
            allowed_origins,
            addr: local,
            shutdown,
            tasks: TaskTracker::new(),
            numbers,
        });
        let app = router(Arc::clone(&shared), self.metrics);
        let limits = &shared.limits;
        // A connection holds its place until it ends or becomes a WebSocket, which holds one
        // of its own (`Sockets`); plain requests are short, so a connection has no lifetime.
        let options = ServeOptions::default()
            .header_read_timeout(limits.header_read_timeout)
            .connection_timeout(None)
            .shutdown_timeout(limits.shutdown_timeout)
            .max_connections(limits.max_connections);
        let http = listener.serve(app, options);
        Ok(ServerHandle { addr: local, shared, stop, http })
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Tells the sessions' tasks and the WebSockets to stop.
    stop: watch::Sender<bool>,
    /// The HTTP connections: stopped with the rest, or when the handle is dropped.
    http: OpsServer,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/`, the playground page.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Live sessions now.
    pub fn sessions(&self) -> usize {
        self.shared.registry.list().len()
    }

    /// Stops: no new session or connection; every session closed with reason
    /// `server_shutdown` — suspended (reason `suspended`) when kept in a store, so that it
    /// resumes after a restart — its clients getting its last events, then a `closing
    /// server_shutdown` frame; then the listener. Each wait is bounded by
    /// [`Limits::shutdown_timeout`].
    pub async fn shutdown(self) {
        let timeout = self.shared.limits.shutdown_timeout;
        let live = self.shared.registry.shut();
        let closes = live.iter().map(|live| live.close(live.shutdown_reason()));
        if tokio::time::timeout(timeout, futures_util::future::join_all(closes)).await.is_err() {
            tracing::warn!(?timeout, "sessions still closing at the shutdown's bound");
        }
        let _ = self.stop.send(true);
        self.shared.tasks.close();
        let tasks = async {
            if tokio::time::timeout(timeout, self.shared.tasks.wait()).await.is_err() {
                tracing::warn!(?timeout, "connections still open at the shutdown's bound");
            }
        };
        // The HTTP connections' stop is bounded by the same timeout (`ServeOptions`).
        tokio::join!(tasks, self.http.stop());
    }
}
