//! The HTTP routes (docs/protocol.md#http): the page and its assets, health, the agents, the
//! sessions, and the WebSocket upgrade. Every `/v1/` route checks the origin and the token
//! first; every error is a [`ServerError`] body with its status.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::header::{
    AUTHORIZATION, CONTENT_SECURITY_POLICY, CONTENT_TYPE, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use colloquy_model::ChatItem;
use colloquy_ops::{Health, Metrics, health_router, metrics_router};
use colloquy_protocol::{
    Command, ErrorCode, ErrorKind, PROTOCOL_VERSION, Reply, ServerError, SessionClosed,
    SessionStarted, StartSession,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::auth::{Origin, Token, check_host, check_origin, check_token, is_allowed};
use crate::backend::Backend;
use crate::connection::{self, Context};
use crate::limits::Limits;
use crate::numbers::Numbers;
use crate::registry::Reservation;

/// The read buffer of each WebSocket: a frame over it is read in several pieces.
const READ_BUFFER: usize = 4 * 1024;
use crate::live::{self, Live};
use crate::registry::{Refused, Registry};
use crate::sockets::{self, Sockets};
use crate::{SUBPROTOCOL, assets};
use colloquy_edge::history;

/// The reason a session closes with when a client deletes it (`DELETE /v1/sessions/{id}`).
pub const CLIENT_CLOSED: &str = colloquy_model::CloseReason::ClientClosed.name();

/// What every route shares.
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) registry: Arc<Registry>,
    /// The WebSockets open, in all and by client.
    pub(crate) sockets: Arc<Sockets>,
    pub(crate) limits: Limits,
    /// A start's history may hold `system` and `developer` messages.
    pub(crate) history_instructions: bool,
    pub(crate) token: Option<Token>,
    pub(crate) allowed_origins: Arc<[Origin]>,
    /// The address the server listens on.
    pub(crate) addr: SocketAddr,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Every session's task and every connection's.
    pub(crate) tasks: TaskTracker,
    /// With a store: where each session's last event number is kept.
    pub(crate) numbers: Option<Numbers>,
}

type AppState = State<Arc<Shared>>;

/// The server's routes; `/metrics` with `metrics`.
pub(crate) fn router(shared: Arc<Shared>, metrics: Option<Metrics>) -> Router {
    let body_limit = shared.limits.max_body_bytes;
    let api = Router::new()
        .route("/agents", get(agents))
        .route("/sessions", get(sessions).post(start))
        .route("/sessions/{id}", delete(close))
        .route("/sessions/{id}/ws", get(attach))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), guard));
    let cors = cors(Arc::clone(&shared.allowed_origins));
    // The figures name tools and close reasons: whoever may not use the API may not read them
    // (a scraper sends the token as a bearer header).
    let guarded = middleware::from_fn_with_state(Arc::clone(&shared), guard);
    let metrics = metrics.map(|m| metrics_router(m).route_layer(guarded)).unwrap_or_default();
    let app = Router::new()
        .route("/", get(|| async { asset("index.html") }))
        .route("/assets/{file}", get(|Path(file): Path<String>| async move { asset(&file) }))
        .merge(health_router(health(Arc::clone(&shared.registry))))
        .merge(metrics)
        .nest("/v1", api)
        .fallback(|| async { error(ServerError::new(ErrorCode::NotFound, "no such route")) })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared);
    match cors {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// A page of an allowed origin calls the API from another origin: its browser asks first
/// (a preflight, answered here before the token check, since it carries none) and reads an
/// answer only if it names the origin.
fn cors(allowed: Arc<[Origin]>) -> Option<CorsLayer> {
    (!allowed.is_empty()).then(|| {
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
                is_allowed(&allowed, origin.as_bytes())
            }))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([AUTHORIZATION, CONTENT_TYPE])
    })
}

/// Without a token the host, then the origin, then the token.
async fn guard(State(shared): AppState, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = match &shared.token {
        Some(_) => Ok(()),
        None => {
            let hosts: Vec<&str> = shared
                .allowed_origins
                .iter()
                .map(|origin| origin.host().trim_start_matches('[').trim_end_matches(']'))
                .collect();
            check_host(shared.addr, &hosts, headers, request.uri())
        }
    };
    if let Err(e) = host
        .and_then(|()| check_origin(&shared.allowed_origins, headers))
        .and_then(|()| check_token(shared.token.as_ref(), headers))
    {
        return error(e);
    }
    next.run(request).await
}

/// A JSON body with its status.
fn json(status: StatusCode, body: &impl Serialize) -> Response {
    let body = serde_json::to_string(body).unwrap_or_default();
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// An error as its status and body.
fn error(e: ServerError) -> Response {
    let status = match e.code {
        ErrorCode::BadRequest | ErrorCode::UnsupportedVersion | ErrorCode::Gap => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::TooManyConnections => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::UnknownAgent | ErrorCode::UnknownSession | ErrorCode::NotFound => {
            StatusCode::NOT_FOUND
        }
        ErrorCode::TooManySessions
        | ErrorCode::TooManyClients
        | ErrorCode::ShuttingDown
        | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::ForbiddenOrigin | ErrorCode::ForbiddenHost => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut response = json(status, &e.frame());
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(WWW_AUTHENTICATE, "Bearer".parse().expect("a valid value"));
    }
    response
}

/// A route asked with a method it does not take: the error body every refusal has (axum
/// answers an empty one, and adds the `Allow` header to this).
async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Response {
    let message =
        format!("`{} {}` is not a route: the `Allow` header names its methods", method, uri.path());
    error(ServerError::new(ErrorCode::MethodNotAllowed, message))
}

/// The page and its files, which no other site may frame (clickjacking: a page of another
/// origin showing this one under its own controls) and no browser may read as another type.
fn asset(name: &str) -> Response {
    match assets::get(name) {
        Some((bytes, kind)) => {
            let headers = [
                (CONTENT_TYPE, kind),
                (X_FRAME_OPTIONS, "DENY"),
                (CONTENT_SECURITY_POLICY, "frame-ancestors 'none'"),
                (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ];
            (headers, bytes).into_response()
        }
        None => error(ServerError::new(ErrorCode::NotFound, format!("no asset `{name}`"))),
    }
}

/// What `/healthz` says: not ready once the server stops.
fn health(registry: Arc<Registry>) -> impl Fn() -> Health + Send + Sync + 'static {
    move || match registry.is_shutting_down() {
        false => Health::Ready,
        true => Health::not_ready("shutting_down"),
    }
}

async fn agents(State(shared): AppState) -> Response {
    match shared.backend.agents().await {
        Ok(agents) => json(StatusCode::OK, &agents),
        Err(e) => error(e),
    }
}

async fn sessions(State(shared): AppState) -> Response {
    match crate::stored::list(&shared).await {
        Ok(list) => json(StatusCode::OK, &list),
        Err(e) => error(e),
    }
}

async fn start(State(shared): AppState, request: Request) -> Response {
    // Headers have a deadline of hyper's; the body has this one.
    let timeout = shared.limits.body_timeout;
    let Ok(body) = tokio::time::timeout(timeout, Bytes::from_request(request, &())).await else {
        let message = format!("the body did not arrive within {} ms", timeout.as_millis());
        return error(ServerError::new(ErrorCode::BadRequest, message));
    };
    match start_session(&shared, body).await {
        Ok(started) => json(StatusCode::CREATED, &started),
        Err(e) => error(e),
    }
}

async fn start_session(
    shared: &Arc<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<SessionStarted, ServerError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ServerError::new(
            ErrorCode::TooLarge,
            format!("the body is over the limit of {} bytes", shared.limits.max_body_bytes),
        ),
        _ => ServerError::new(ErrorCode::BadRequest, e.body_text()),
    })?;
    // An empty body is a start of the default agent, for `curl -X POST`.
    let request: StartSession = match body.is_empty() {
        true => StartSession::new(None, Default::default()),
        false => serde_json::from_slice(&body).map_err(|e| {
            ServerError::new(ErrorCode::BadRequest, format!("unreadable start request: {e}"))
        })?,
    };
    if request.v != PROTOCOL_VERSION {
        return Err(ServerError::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "protocol version {} is not supported (this server speaks {PROTOCOL_VERSION})",
                request.v
            ),
        ));
    }
    let history = &request.options.history;
    // The agents only where a handoff needs them: a local backend makes one of each to learn
    // their ids.
    let handoffs = history.iter().any(|item| matches!(item, ChatItem::AgentHandoff(_)));
    let agents = handoffs.then(|| shared.backend.known_agents()).flatten();
    let rules =
        history::Rules { instructions: shared.history_instructions, agents: agents.as_ref() };
    history::check(history, &rules).map_err(|message| {
        ServerError::new(ErrorCode::BadRequest, format!("a history the server refuses: {message}"))
    })?;
    let agent = match request.agent {
        Some(agent) => agent,
        None => shared.backend.agents().await?.default.ok_or_else(|| {
            ServerError::new(ErrorCode::UnknownAgent, "the server offers no agent")
        })?,
    };
    let reservation = reserve(shared)?;
    let started = shared.backend.start(agent, request.options).await?;
    let answer = SessionStarted {
        session_id: started.session_id.clone(),
        agent: started.agent.clone(),
        node: started.node.clone(),
    };
    register(shared, reservation, started, false).await?;
    Ok(answer)
}

/// A place for one more session, or why there is none.
pub(crate) fn reserve(shared: &Shared) -> Result<Reservation, ServerError> {
    shared.registry.reserve(shared.limits.max_sessions).map_err(|refused| match refused {
        Refused::Full => ServerError::new(
            ErrorCode::TooManySessions,
            format!(
                "the server holds its maximum of {} sessions: try again later",
                shared.limits.max_sessions
            ),
        ),
        Refused::ShuttingDown => {
            ServerError::new(ErrorCode::ShuttingDown, "the server is shutting down")
        }
    })
}

/// Makes a session that started (or `resumed`) live: its replay buffer, numbered on from the
/// number kept for it where the server keeps numbers, in the place `reservation` held, and its
/// feeder task.
pub(crate) async fn register(
    shared: &Shared,
    reservation: Reservation,
    started: crate::StartedSession,
    resumed: bool,
) -> Result<Arc<Live>, ServerError> {
    let id = started.session_id.clone();
    let (live, marks) = Live::new(
        id.clone(),
        started.agent,
        started.node,
        started.driver,
        shared.limits.replay_events,
        shared.limits.replay_bytes,
    );
    let live = match &shared.numbers {
        Some(numbers) => {
            let floor = if resumed { numbers.last(&id) } else { 0 };
            live.kept(floor, numbers.counter(&id), resumed)
        }
        None => live,
    };
    let live = Arc::new(live);
    if let Err(live) = reservation.fill(Arc::clone(&live)) {
        live.close(live.shutdown_reason()).await;
        return Err(ServerError::new(ErrorCode::ShuttingDown, "the server is shutting down"));
    }
    let registry = Arc::clone(&shared.registry);
    let idle = shared.limits.idle_session;
    shared.tasks.spawn(live::pump(Arc::clone(&live), started.events, marks, registry, idle));
    Ok(live)
}

pub(crate) fn unknown_session(id: &str) -> ServerError {
    ServerError::new(ErrorCode::UnknownSession, format!("no live session `{id}`"))
}

async fn close(State(shared): AppState, Path(id): Path<String>) -> Response {
    // A stored session that is not live resumes to close: its journal then records the close.
    let live = match crate::stored::live_or_resumed(&shared, &id).await {
        Ok(live) => live,
        Err(e) => return error(e),
    };
    let request = colloquy_protocol::Request::new(Command::Close { reason: CLIENT_CLOSED.into() });
    match live.driver.execute(request).await {
        Reply::Closed { history } => {
            json(StatusCode::OK, &SessionClosed { session_id: id, history })
        }
        // Another answer is the session's error, or a reply it should not have given.
        other => {
            let e = other.unexpected("closed");
            error(match e.kind {
                // Closed by someone else meanwhile.
                ErrorKind::Closed => unknown_session(&id),
                ErrorKind::Unavailable => ServerError::new(
                    ErrorCode::Unavailable,
                    format!("the session `{id}` did not answer: {}", e.message),
                ),
                _ => ServerError::new(
                    ErrorCode::CloseFailed,
                    format!("the session `{id}` could not close: {}", e.message),
                ),
            })
        }
    }
}

#[derive(Deserialize)]
struct Attach {
    #[serde(default)]
    after: u64,
}

async fn attach(
    State(shared): AppState,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    query: Result<Query<Attach>, axum::extract::rejection::QueryRejection>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let after = match query {
        Ok(Query(attach)) => attach.after,
        // `after` is the only parameter read: it is what failed.
        Err(_) => {
            let message = "`after` must be a non-negative integer: the `seq` of the last event \
                           you handled (0, or absent, for every event from the session's first)";
            return error(ServerError::new(ErrorCode::BadRequest, message));
        }
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(e) => {
            let message = format!("a WebSocket upgrade is expected here: {}", e.body_text());
            return error(ServerError::new(ErrorCode::BadRequest, message));
        }
    };
    // Read before a stored session resumes: a request that cannot attach resumes nothing.
    let live = match crate::stored::live_or_resumed(&shared, &id).await {
        Ok(live) => live,
        Err(e) => return error(e),
    };
    let last = live.last_seq();
    // A resumed session answers a number it never gave with a `gap` (`connection::greet`).
    if after > last && !live.is_resumed() {
        let message = format!(
            "after={after} is past the session's last event, seq {last}: `after` names an \
             event you handled, at most {last}"
        );
        return error(ServerError::new(ErrorCode::BadRequest, message));
    }
    if shared.registry.is_shutting_down() {
        return error(ServerError::new(ErrorCode::ShuttingDown, "the server is shutting down"));
    }
    let limits = &shared.limits;
    let (per_client, total) = (limits.max_websockets_per_client, limits.max_websockets);
    let peer = client.ip();
    let place = match shared.sockets.open(peer, per_client, total) {
        Ok(place) => place,
        Err(sockets::Refused::Client) => {
            let message = format!(
                "{peer} has its maximum of {per_client} WebSockets open on this server: close \
                 one first"
            );
            return error(ServerError::new(ErrorCode::TooManyConnections, message));
        }
        Err(sockets::Refused::Server) => {
            let message =
                format!("the server has its maximum of {total} WebSockets open: try again later");
            let mut refused = error(ServerError::new(ErrorCode::TooManyConnections, message));
            *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            return refused;
        }
    };
    let max = shared.limits.max_clients_per_session;
    let Some(attached) = live.attach(max) else {
        let message = format!(
            "the session has its maximum of {max} clients attached: try again once one leaves"
        );
        return error(ServerError::new(ErrorCode::TooManyClients, message));
    };
    let hard = shared.limits.max_frame_bytes_hard;
    let cx = Context {
        limits: shared.limits.clone(),
        registry: Arc::clone(&shared.registry),
        shutdown: shared.shutdown.clone(),
        attached,
        place,
    };
    let tasks = shared.tasks.clone();
    upgrade
        .protocols([SUBPROTOCOL])
        .max_message_size(hard)
        .max_frame_size(hard)
        // Client frames are small: tungstenite's default 128 KiB read buffer per socket was
        // most of an attached session's memory (docs/benchmarks.md#websocket).
        .read_buffer_size(READ_BUFFER)
        .on_upgrade(move |socket| tasks.track_future(connection::run(socket, live, after, cx)))
}
