//! The one bounded HTTP serve loop, under the ops endpoints and colloquy-server alike: a
//! router on hyper's HTTP/1 connection, so that every wait has a bound. A client has
//! `header_read_timeout` to send its request, a connection lives at most `connection_timeout`
//! if set, at most `max_connections` are served at once, and a stop gives the answers in
//! flight `shutdown_timeout`, then drops them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

/// The bounds of a server ([`serve_with`], [`Listener::serve`]).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    header_read_timeout: Duration,
    connection_timeout: Option<Duration>,
    shutdown_timeout: Duration,
    max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            connection_timeout: Some(Duration::from_secs(60)),
            shutdown_timeout: Duration::from_secs(5),
            max_connections: Semaphore::MAX_PERMITS,
        }
    }
}

impl ServeOptions {
    /// How long a client has to send a request's headers, and an idle kept-alive connection
    /// to start its next request, before it is closed (5 s unless set).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a connection may live; then it finishes the answer in flight (within the
    /// shutdown timeout) and closes (60 s unless set). A scraper opens a new one. `None`: as
    /// long as its client keeps it busy (an API whose answers are short, or upgraded).
    pub fn connection_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.connection_timeout = timeout.into();
        self
    }

    /// How long a stop, or a connection's end, waits for the answers in flight before it drops
    /// them (5 s unless set).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The most connections served at once (at least 1; no bound unless set): past it a
    /// connection waits in the kernel's backlog until one ends or is upgraded (a WebSocket,
    /// whose place is the route's to count).
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.clamp(1, Semaphore::MAX_PERMITS);
        self
    }
}

/// An address bound and not served yet: for a host whose routes need the address they answer
/// on before they are built.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    /// Binds `addr` (port 0 picks a free one).
    ///
    /// # Errors
    /// The address cannot be bound (in use, not ours, no permission).
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Self { listener, addr })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `router` in a task, each request carrying its client's address as axum's
    /// `ConnectInfo<SocketAddr>`, and upgrades (a WebSocket) allowed; returns the server's
    /// handle. Needs a tokio runtime.
    pub fn serve(self, router: Router, options: ServeOptions) -> OpsServer {
        let (stop, stopped) = watch::channel(());
        let task = tokio::spawn(accept(self.listener, router, options, stopped));
        OpsServer { stop, task }
    }
}

/// A running server; [`stop`](Self::stop) it, or drop it to stop it in the background.
#[derive(Debug)]
pub struct OpsServer {
    /// Dropping it tells the accept loop and every connection to stop.
    stop: watch::Sender<()>,
    task: JoinHandle<()>,
}

impl OpsServer {
    /// Stops accepting, lets the answers in flight finish (up to the shutdown timeout), closes
    /// every connection, and returns once the server's tasks have ended.
    pub async fn stop(self) {
        let Self { stop, task } = self;
        drop(stop);
        let _ = task.await;
    }
}

/// [`serve_with`] the default [`ServeOptions`].
///
/// # Errors
/// The address cannot be bound (in use, not ours, no permission).
pub async fn serve(addr: SocketAddr, router: Router) -> io::Result<(SocketAddr, OpsServer)> {
    serve_with(addr, router, ServeOptions::default()).await
}

/// Binds `addr` (port 0 picks a free one) and serves `router` on it in a task
/// ([`Listener::serve`]); returns the bound address and the server's handle.
///
/// # Errors
/// The address cannot be bound (in use, not ours, no permission).
pub async fn serve_with(
    addr: SocketAddr,
    router: Router,
    options: ServeOptions,
) -> io::Result<(SocketAddr, OpsServer)> {
    let listener = Listener::bind(addr).await?;
    let bound = listener.local_addr();
    Ok((bound, listener.serve(router, options)))
}

/// Accepts connections until told to stop, then gives them the shutdown timeout to finish.
async fn accept(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    mut stopped: watch::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    let places = Arc::new(Semaphore::new(options.max_connections));
    // A place first, then a connection: past the bound they wait in the kernel's backlog.
    let next = || async {
        let place = Arc::clone(&places).acquire_owned().await;
        (place, listener.accept().await)
    };
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            (place, accepted) = next() => match (place, accepted) {
                (Ok(place), Ok((stream, peer))) => {
                    let router = router.clone().layer(Extension(ConnectInfo(peer)));
                    let serving = connection(stream, router, options.clone(), stopped.clone());
                    // Given back once the connection ends, or once it is upgraded: hyper then
                    // hands the socket to the route and the connection's future ends.
                    connections.spawn(async move {
                        serving.await;
                        drop(place);
                    });
                }
                (Err(_), _) => break,
                (_, Err(e)) => {
                    // Out of file descriptors, most likely: wait a little rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(options.shutdown_timeout, drained).await;
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// Serves one connection (upgrades included) until it ends, its time is up, or the server
/// stops.
async fn connection(
    stream: TcpStream,
    router: Router,
    options: ServeOptions,
    mut stopped: watch::Receiver<()>,
) {
    // A WebSocket's frames are small and a client waits on each: without TCP_NODELAY, Nagle's
    // algorithm and the peer's delayed acknowledgement hold a frame back some 40 ms.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
    }
    // axum's `serve` sets no timer, so hyper would read a request's headers without a
    // deadline: driving the connection with hyper's builder gives it one.
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
    let service = TowerToHyperService::new(router);
    let conn = http.serve_connection(TokioIo::new(stream), service).with_upgrades();
    tokio::pin!(conn);
    let lifetime = async {
        match options.connection_timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "a connection ended");
            }
            return;
        }
        _ = stopped.changed() => {}
        () = lifetime => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(options.shutdown_timeout, conn).await;
}
