//! One connection to an MCP server (rmcp's client): progress routed to the call that asked for
//! it, and a tool call whose progress becomes throttled `ctx.update()`s, whose colloquy cancel
//! becomes MCP's `notifications/cancelled`, and which ends with an error when its answer is too
//! big for the model or was dropped by the transport.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use colloquy_model::{RunContext, ToolError};
use futures_util::{FutureExt, StreamExt};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ProgressNotificationParam, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};

use tokio::sync::broadcast;

use crate::content::render;
use crate::frames::{MAX_MESSAGE, Target};
use crate::throttle::Throttle;

/// A message the transport dropped (over its size limit), and whom it was for.
#[derive(Clone, Debug)]
pub(crate) struct Dropped {
    pub target: Target,
    /// Its length, in bytes, when known (an HTTP answer stops being read at the limit).
    pub bytes: Option<usize>,
}

/// What the transports learn that rmcp does not say (the stdio relay, the HTTP client):
/// messages dropped for their size, tools removed from a list.
pub(crate) struct Edges {
    dropped: broadcast::Sender<Dropped>,
    unreadable: Mutex<Vec<String>>,
}

impl Default for Edges {
    fn default() -> Self {
        Self { dropped: broadcast::Sender::new(16), unreadable: Mutex::default() }
    }
}

impl Edges {
    /// A message was dropped: the calls it may have answered end.
    pub(crate) fn dropped(&self, server: &str, dropped: Dropped) {
        let Dropped { target, bytes } = &dropped;
        tracing::warn!(server, ?bytes, ?target, "MCP message over the size limit dropped");
        let _ = self.dropped.send(dropped); // no call in flight: nobody to tell
    }

    /// These tools were removed from a list (why, each naming its tool): logged, and kept for
    /// the listing to report.
    pub(crate) fn unreadable(&self, server: &str, why: Vec<String>) {
        for why in &why {
            tracing::warn!(server, "MCP tool skipped: {why}");
        }
        self.unreadable.lock().unwrap_or_else(PoisonError::into_inner).extend(why);
    }

    /// The tools removed since the last time this was asked.
    pub(crate) fn take_unreadable(&self) -> Vec<String> {
        std::mem::take(&mut *self.unreadable.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What colloquy does with the server's notifications.
#[derive(Clone, Default)]
pub(crate) struct Handler {
    progress: ProgressDispatcher,
    /// Told when the server says its tool list changed.
    list_changed: Option<tokio::sync::mpsc::Sender<()>>,
    pub edges: Arc<Edges>,
}

/// Per-call bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The longest result text the model gets, in bytes.
    pub max_result_bytes: usize,
    /// At most one progress update per this interval.
    pub progress_interval: Duration,
}

impl Handler {
    /// A handler that reports `notifications/tools/list_changed` on `tx`.
    pub(crate) fn watching(tx: tokio::sync::mpsc::Sender<()>) -> Self {
        Self { list_changed: Some(tx), ..Self::default() }
    }
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(tx) = &self.list_changed {
            let _ = tx.try_send(()); // one pending refresh is enough
        }
    }

    fn get_info(&self) -> ClientConfig {
        let implementation = Implementation::new("colloquy", env!("CARGO_PKG_VERSION"));
        ClientConfig::new(ClientCapabilities::default(), implementation)
    }
}

/// The client side of a running connection. The connection itself (`RunningService`, and
/// the child process) is owned by whoever started it: dropping that closes it.
pub(crate) struct Connection {
    peer: Peer<RoleClient>,
    progress: ProgressDispatcher,
    edges: Arc<Edges>,
    /// The connection itself, when this client owns it (`McpToolset::connect`).
    _owned: Option<RunningService<RoleClient, Handler>>,
}

impl Connection {
    /// The client side of `service`, which its caller keeps running.
    pub(crate) fn new(
        service: &RunningService<RoleClient, Handler>,
        handler: &Handler,
    ) -> Arc<Self> {
        let (progress, edges) = (handler.progress.clone(), Arc::clone(&handler.edges));
        Arc::new(Self { peer: service.peer().clone(), progress, edges, _owned: None })
    }

    /// The client side of `service`, which it keeps running: dropping the last reference
    /// closes it.
    pub(crate) fn owning(
        service: RunningService<RoleClient, Handler>,
        handler: &Handler,
    ) -> Arc<Self> {
        let (peer, progress) = (service.peer().clone(), handler.progress.clone());
        let edges = Arc::clone(&handler.edges);
        Arc::new(Self { peer, progress, edges, _owned: Some(service) })
    }

    /// The server's tools, every page; and the ones the transport had to remove (why, each).
    pub(crate) async fn tools(&self) -> Result<(Vec<Tool>, Vec<String>), ServiceError> {
        let _ = self.edges.take_unreadable(); // from an earlier listing, already reported
        let tools = self.peer.list_all_tools().await?;
        Ok((tools, self.edges.take_unreadable()))
    }

    /// Calls `name`; progress notifications become updates (throttled), a cancel of the
    /// colloquy call cancels the request. An `isError` result is a tool error the model reads;
    /// so is a result over the size bound, or one the transport dropped.
    pub(crate) async fn call(
        &self,
        ctx: &RunContext,
        name: &str,
        arguments: Map<String, Value>,
        bounds: Bounds,
    ) -> Result<String, ToolError> {
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // Before the request goes: its answer may be dropped as soon as it is sent.
        let mut dropped = self.edges.dropped.subscribe();
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| ToolError::internal(format!("the MCP server is unreachable: {e}")))?;
        let id = serde_json::to_value(&handle.id).unwrap_or(Value::Null);
        let mut progress = self.progress.subscribe(handle.progress_token.clone()).await;
        let mut throttle = Throttle::new(bounds.progress_interval);
        let mut handle = Some(handle);
        let response = loop {
            let Some(pending) = handle.as_mut() else { unreachable!("taken only on return") };
            let due = throttle.due();
            tokio::select! {
                biased;
                () = ctx.cancelled() => {
                    if let Some(handle) = handle.take() {
                        let _ = handle.cancel(Some("cancelled by colloquy".into())).await;
                    }
                    return Err(ToolError::new("cancelled"));
                }
                response = &mut pending.rx => break response,
                lost = dropped.recv() => {
                    let text = match lost {
                        Ok(lost) => match lost_answer(&lost, &id) {
                            Some(text) => text,
                            None => continue, // another call's answer, or a server's request
                        },
                        Err(broadcast::error::RecvError::Lagged(_)) => dropped_text(None, false),
                        // Cannot happen while this connection (which holds the sender) lives.
                        Err(broadcast::error::RecvError::Closed) => continue,
                    };
                    if let Some(handle) = handle.take() {
                        let _ = handle.cancel(Some("its answer was too long to read".into())).await;
                    }
                    return Err(ToolError::new(text));
                }
                () = sleep_until(due), if due.is_some() => {
                    if let Some(text) = throttle.release(tokio::time::Instant::now()) {
                        let _ = ctx.update(text).await;
                    }
                }
                Some(note) = progress.next() => {
                    let now = tokio::time::Instant::now();
                    if let Some(text) = throttle.offer(now, progress_text(&note)) {
                        let _ = ctx.update(text).await;
                    }
                }
            }
        };
        // Progress the server sent just before its result may be routed just after it: it
        // goes through the throttle; an update still held is dropped, as the result is newer.
        while let Some(Some(note)) = progress.next().now_or_never() {
            let now = tokio::time::Instant::now();
            if let Some(text) = throttle.offer(now, progress_text(&note)) {
                let _ = ctx.update(text).await;
            }
        }
        let result = match response {
            Ok(Ok(ServerResult::CallToolResult(result))) => result,
            Ok(Ok(_)) => {
                return Err(ToolError::internal("the MCP server answered a tool call oddly"));
            }
            failed => {
                // Over HTTP, rmcp ends a call whose answer was too big with an error of its own,
                // which may win the race with the transport's report, sent just before.
                loop {
                    match dropped.try_recv() {
                        Ok(lost) => match lost_answer(&lost, &id) {
                            Some(text) => return Err(ToolError::new(text)),
                            None => continue,
                        },
                        Err(broadcast::error::TryRecvError::Lagged(_)) => {
                            return Err(ToolError::new(dropped_text(None, false)));
                        }
                        Err(_) => break,
                    }
                }
                return Err(match failed {
                    Ok(Err(e)) => ToolError::internal(format!("MCP tool call failed: {e}")),
                    _ => ToolError::internal("the MCP server went away during the call"),
                });
            }
        };
        let content: Vec<Value> =
            result.content.iter().filter_map(|c| serde_json::to_value(c).ok()).collect();
        let text = render(&content, result.structured_content.as_ref());
        if text.len() > bounds.max_result_bytes {
            return Err(ToolError::new(format!(
                "the tool's result is {} bytes of text, over the limit of {} bytes: \
                 ask for less (a narrower query, a smaller range)",
                text.len(),
                bounds.max_result_bytes
            )));
        }
        match result.is_error {
            Some(true) => Err(ToolError::new(text)),
            _ => Ok(text),
        }
    }
}

/// Waits until `due` (never, without one: the branch is disabled then).
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// The error output of the call with request id `id`, if `lost` was, or may have been, its
/// answer.
fn lost_answer(lost: &Dropped, id: &Value) -> Option<String> {
    match &lost.target {
        Target::Response(to) if to == id => Some(dropped_text(lost.bytes, true)),
        Target::Unknown => Some(dropped_text(lost.bytes, false)),
        Target::Response(_) | Target::NotAResponse => None,
    }
}

/// The error output of a call whose answer the transport dropped (`certain`), or may have
/// (a dropped message of `bytes`, if known, whose target is unknown).
fn dropped_text(bytes: Option<usize>, certain: bool) -> String {
    let limit = MAX_MESSAGE / (1024 * 1024);
    if certain {
        let size = bytes.map(|bytes| format!(" {bytes} bytes,")).unwrap_or_default();
        format!(
            "the MCP server's answer was{size} over the {limit} MiB a message may have on its \
             transport: it was dropped"
        )
    } else {
        let size = bytes.map(|bytes| format!(" ({bytes} bytes)")).unwrap_or_default();
        format!(
            "a message from the MCP server{size} was over the {limit} MiB a message may have \
             on its transport and was dropped; it may have been this call's answer"
        )
    }
}

/// An update's text from a progress notification: its message, else `progress/total`.
fn progress_text(note: &ProgressNotificationParam) -> String {
    match (&note.message, note.total) {
        (Some(message), _) => message.clone(),
        (None, Some(total)) => format!("{}/{}", note.progress, total),
        (None, None) => format!("{}", note.progress),
    }
}
