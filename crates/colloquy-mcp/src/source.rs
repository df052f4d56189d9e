//! A server supervised for the session: started with the toolset actor that runs its tools,
//! restarted with backoff when it dies (calls in flight end with an error), its tool list
//! refreshed when it says the list changed, and stopped when the toolset is dropped (the
//! session closed): the supervisor stops before the process is.

use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use colloquy_model::{FunctionTool, ToolSource};
use tokio::sync::watch;

use crate::client::{Connection, Handler};
use crate::spec::Spec;
use crate::tools::{Options, Slot, list};

/// The first restart waits this long; each next one twice as long, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where the first tool list stands.
#[derive(Clone, Debug)]
enum First {
    Pending,
    Listed,
    Failed(String),
}

struct Shared {
    id: String,
    spec: Spec,
    options: Options,
    tools: Mutex<Arc<[FunctionTool]>>,
    slot: Arc<Slot>,
    first: watch::Sender<First>,
}

/// The [`ToolSource`] of a supervised server.
pub(crate) struct McpSource {
    shared: Arc<Shared>,
    start: Once,
    start_timeout: Duration,
    /// Dropped with the source: the supervisor sees it and stops (and so does the server).
    stop: watch::Sender<()>,
}

impl std::fmt::Debug for McpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSource").field("id", &self.shared.id).finish_non_exhaustive()
    }
}

impl McpSource {
    pub(crate) fn new(id: String, spec: Spec, options: Options, start_timeout: Duration) -> Self {
        let shared = Arc::new(Shared {
            id,
            spec,
            options,
            tools: Mutex::new(Arc::from(Vec::new())),
            slot: Arc::default(),
            first: watch::Sender::new(First::Pending),
        });
        Self { shared, start: Once::new(), start_timeout, stop: watch::Sender::new(()) }
    }

    /// Spawns the supervisor, once.
    fn spawn(&self) {
        self.start.call_once(|| {
            tokio::spawn(supervise(Arc::clone(&self.shared), self.stop.subscribe()));
        });
    }
}

impl ToolSource for McpSource {
    fn start(&self) {
        self.spawn();
    }

    fn tools(&self) -> Arc<[FunctionTool]> {
        Arc::clone(&self.shared.tools.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn ready(&self) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        self.spawn();
        Box::pin(async move {
            let mut first = self.shared.first.subscribe();
            let settled = first.wait_for(|state| !matches!(state, First::Pending));
            let id = &self.shared.id;
            match tokio::time::timeout(self.start_timeout, settled).await {
                Ok(Ok(state)) => match &*state {
                    First::Failed(why) => Err(why.clone()),
                    _ => Ok(()),
                },
                Ok(Err(_)) => Err(format!("MCP server `{id}`: its supervisor stopped")),
                Err(_) => Err(format!(
                    "MCP server `{id}` listed no tools within {} s: the session goes on without them",
                    self.start_timeout.as_secs_f32()
                )),
            }
        })
    }

    fn may_cancel(&self) -> bool {
        self.shared.options.cancellable_all || !self.shared.options.cancellable.is_empty()
    }
}

/// Runs the server until the source is dropped, restarting it when it dies.
async fn supervise(shared: Arc<Shared>, mut stop: watch::Receiver<()>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (tx, mut changed) = tokio::sync::mpsc::channel(1);
        let handler = Handler::watching(tx);
        match shared.spec.open(&shared.id, handler.clone()).await {
            Err(e) => fail_first(&shared, e.to_string()),
            Ok(service) => {
                let connection = Connection::new(&service, &handler);
                match refresh(&shared, &connection).await {
                    Ok(()) => backoff = FIRST_BACKOFF,
                    Err(why) => fail_first(&shared, why),
                }
                shared.slot.set(Some(connection.clone()));
                let waiting = service.waiting();
                tokio::pin!(waiting);
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.changed() => return, // dropping `waiting` closes the server
                        _ = &mut waiting => break,
                        Some(()) = changed.recv() => {
                            if let Err(why) = refresh(&shared, &connection).await {
                                tracing::warn!(server = %shared.id, "{why}");
                            }
                        }
                    }
                }
                shared.slot.set(None);
            }
        }
        tracing::warn!(server = %shared.id, ?backoff, "MCP server stopped: restarting");
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Lists the server's tools and publishes them.
async fn refresh(shared: &Shared, connection: &Arc<Connection>) -> Result<(), String> {
    let id = &shared.id;
    let (tools, _) = list(id, connection, &shared.options, &shared.slot)
        .await
        .map_err(|e| format!("MCP server `{id}`: {e}"))?;
    *shared.tools.lock().unwrap_or_else(PoisonError::into_inner) = Arc::from(tools);
    shared.first.send_if_modified(|state| {
        let pending = matches!(state, First::Pending);
        if pending {
            *state = First::Listed;
        }
        pending
    });
    Ok(())
}

/// The first attempt failed: whoever waits for the first list learns why (later failures
/// only reach the log).
fn fail_first(shared: &Shared, why: String) {
    tracing::warn!(server = %shared.id, "{why}");
    shared.first.send_if_modified(|state| {
        let pending = matches!(state, First::Pending);
        if pending {
            *state = First::Failed(why);
        }
        pending
    });
}
