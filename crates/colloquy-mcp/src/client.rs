//! One connection to an MCP server (rmcp's client): progress routed to the call that asked for
//! it, and a tool call whose progress becomes `ctx.update()` and whose colloquy cancel becomes
//! MCP's `notifications/cancelled`.

use std::sync::Arc;

use colloquy_core::{RunContext, ToolError};
use futures_util::{FutureExt, StreamExt};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ProgressNotificationParam, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};

use crate::content::render;

/// What colloquy does with the server's notifications.
#[derive(Clone, Default)]
pub(crate) struct Handler {
    progress: ProgressDispatcher,
    /// Told when the server says its tool list changed.
    list_changed: Option<tokio::sync::mpsc::Sender<()>>,
}

impl Handler {
    /// A handler that reports `notifications/tools/list_changed` on `tx`.
    pub fn watching(tx: tokio::sync::mpsc::Sender<()>) -> Self {
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
    /// The connection itself, when this client owns it (`McpToolset::connect`).
    _owned: Option<RunningService<RoleClient, Handler>>,
}

impl Connection {
    /// The client side of `service`, which its caller keeps running.
    pub fn new(service: &RunningService<RoleClient, Handler>, handler: &Handler) -> Arc<Self> {
        let progress = handler.progress.clone();
        Arc::new(Self { peer: service.peer().clone(), progress, _owned: None })
    }

    /// The client side of `service`, which it keeps running: dropping the last reference
    /// closes it.
    pub fn owning(service: RunningService<RoleClient, Handler>, handler: &Handler) -> Arc<Self> {
        let (peer, progress) = (service.peer().clone(), handler.progress.clone());
        Arc::new(Self { peer, progress, _owned: Some(service) })
    }

    /// The server's tools, every page.
    pub async fn tools(&self) -> Result<Vec<Tool>, ServiceError> {
        self.peer.list_all_tools().await
    }

    /// Calls `name`; progress notifications become updates, a cancel of the colloquy call
    /// cancels the request. An `isError` result is a tool error the model reads.
    pub async fn call(
        &self,
        ctx: &RunContext,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<String, ToolError> {
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| ToolError::internal(format!("the MCP server is unreachable: {e}")))?;
        let mut progress = self.progress.subscribe(handle.progress_token.clone()).await;
        let mut handle = Some(handle);
        let response = loop {
            let Some(pending) = handle.as_mut() else { unreachable!("taken only on return") };
            tokio::select! {
                biased;
                () = ctx.cancelled() => {
                    if let Some(handle) = handle.take() {
                        let _ = handle.cancel(Some("cancelled by colloquy".into())).await;
                    }
                    return Err(ToolError::new("cancelled"));
                }
                Some(note) = progress.next() => {
                    let _ = ctx.update(progress_text(&note)).await;
                }
                response = &mut pending.rx => break response,
            }
        };
        // Progress the server sent just before its result may be routed just after it.
        while let Some(Some(note)) = progress.next().now_or_never() {
            let _ = ctx.update(progress_text(&note)).await;
        }
        let result = match response {
            Ok(Ok(ServerResult::CallToolResult(result))) => result,
            Ok(Ok(_)) => {
                return Err(ToolError::internal("the MCP server answered a tool call oddly"));
            }
            Ok(Err(e)) => return Err(ToolError::internal(format!("MCP tool call failed: {e}"))),
            Err(_) => return Err(ToolError::internal("the MCP server went away during the call")),
        };
        let content: Vec<Value> =
            result.content.iter().filter_map(|c| serde_json::to_value(c).ok()).collect();
        let text = render(&content, result.structured_content.as_ref());
        match result.is_error {
            Some(true) => Err(ToolError::new(text)),
            _ => Ok(text),
        }
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
