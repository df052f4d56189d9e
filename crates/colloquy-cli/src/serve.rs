//! `colloquy serve`: the chat's agent (its model, instructions and tools, `--mcp` servers
//! included) over HTTP and a WebSocket with colloquy-server, under one or more names, until
//! SIGTERM or SIGINT. It prints the page's URL when ready and a line when it stops. The token
//! comes from an environment variable, never from the command line, and is never printed.
//! It serves colloquy-ops' `/metrics` on its own address, counting every session it runs from
//! its start (not with `--nats`: the nodes count theirs), and with `--metrics-addr` on that
//! address too, beside a `/healthz` of its own (`503 stopping` while it stops). With
//! `--store FILE` its sessions are kept in FILE, resumed after a restart, and suspended at a
//! stop.

use std::io::Write;
use std::sync::{Arc, Mutex};

use colloquy::cluster::Cluster;
use colloquy::ops::{Health, Metrics};
use colloquy::store::{SessionStore, SqliteStore};
use colloquy_server::{BindError, ClusterBackend, Limits, Server};

use crate::ServeArgs;
use crate::command::{CommandError, nats_config};
use crate::console::Signals;
use crate::console::terminal::{Style, Terminal};
use crate::ops::Ops;
use crate::served::{self, Served};

/// Serves until a signal; its lines go to `out`.
pub async fn run(args: &ServeArgs, out: Box<dyn Write + Send>) -> Result<(), CommandError> {
    let token = match &args.token_env {
        Some(name) => match std::env::var(name) {
            Ok(token) if !token.is_empty() => Some(token),
            Ok(_) => {
                return Err(CommandError::Usage(format!(
                    "--token-env {name}: that variable is empty"
                )));
            }
            Err(_) => {
                return Err(CommandError::Usage(format!(
                    "--token-env {name}: that variable is not set"
                )));
            }
        },
        None => None,
    };
    let terminal = Terminal::new(out, false);
    let mut signals = Signals::new().map_err(|e| CommandError::Failed(e.to_string()))?;
    let health = Arc::new(Mutex::new(Health::not_ready("starting")));
    // One set of figures, on the server's own address and on `--metrics-addr`'s.
    let metrics = Metrics::new();
    let ops = match args.metrics_addr {
        Some(addr) => Some(Ops::serve(addr, metrics.clone(), &health).await?),
        None => None,
    };
    let mut limits = Limits::default();
    limits.max_sessions = args.max_sessions;
    limits.replay_events = args.replay_events;
    limits.max_unread_frames = args.max_unread_frames;
    limits.max_websockets = args.max_websockets;
    limits.max_websockets_per_client = args.max_websockets_per_client;
    limits.idle_session = args.idle_session;
    let mut builder = Server::builder().limits(limits);
    let mut servers = Vec::new();
    let (names, about) = match &args.nats {
        Some(url) => {
            let nats = nats_config(url, &args.nats_auth).map_err(CommandError::Usage)?;
            let cluster = Cluster::connect(nats).await.map_err(CommandError::Cluster)?;
            let default = args.served.agent_names.first().cloned();
            builder = builder.backend(ClusterBackend::new(cluster, default));
            let names = match args.served.agent_names.is_empty() {
                true => "the nodes' agents".to_owned(),
                false => {
                    format!("agents {} (the default first)", args.served.agent_names.join(", "))
                }
            };
            (names, format!("the cluster at {url}"))
        }
        None => {
            let served = Served::new(&args.served, &terminal).map_err(CommandError::Usage)?;
            let names = format!("agents {}", served.names());
            let Served { agents, about, servers: mcp } = served;
            servers = mcp;
            builder = builder.agents(agents).metrics(metrics);
            if let Some(path) = &args.store {
                let store = SqliteStore::open(path).map_err(|e| {
                    CommandError::Failed(format!("--store {}: {e}", path.display()))
                })?;
                builder =
                    builder.store(Arc::new(store) as Arc<dyn SessionStore>, numbers_dir(path));
            }
            (names, about)
        }
    };
    for origin in &args.allow_origins {
        builder = builder.allow_origin(origin.as_str());
    }
    if let Some(token) = token {
        builder = builder.token(token);
    }
    let server = builder.bind(args.addr).await.map_err(|e| match e {
        BindError::TokenRequired(_) | BindError::InvalidOrigin { .. } => {
            CommandError::Usage(e.to_string())
        }
        BindError::InvalidToken => {
            let name = args.token_env.as_deref().unwrap_or_default();
            CommandError::Usage(format!("--token-env {name}: {e}"))
        }
        other => CommandError::Failed(other.to_string()),
    })?;
    served::report_mcp_servers(&servers, &terminal);
    let auth = match &args.token_env {
        Some(name) => format!("; a bearer token is required (the value of ${name})"),
        None => String::new(),
    };
    let metrics = ops.as_ref().map(|ops| format!("; metrics on http://{}/metrics", ops.addr));
    let metrics = metrics.unwrap_or_default();
    let kept = args.store.as_ref().map(|path| format!("; sessions kept in {}", path.display()));
    let kept = kept.unwrap_or_default();
    crate::ops::set(&health, Health::Ready);
    terminal.line(
        Style::Dim,
        &format!("serving on {}: {names} on {about}{auth}{metrics}{kept}", server.url()),
    );
    signals.recv().await;
    crate::ops::set(&health, Health::not_ready("stopping"));
    let live = server.sessions();
    let verb = if args.store.is_some() { "suspending" } else { "closing" };
    terminal.line(Style::Dim, &format!("stopping: {verb} {live} sessions"));
    // A second signal stops waiting for the sessions and the connections.
    tokio::select! {
        biased;
        () = server.shutdown() => {}
        _ = signals.recv() => {
            return Err(CommandError::Failed("stopped by a second signal before its sessions closed".into()));
        }
    }
    if let Some(ops) = ops {
        ops.server.stop().await;
    }
    terminal.line(Style::Dim, "stopped");
    Ok(())
}

/// Where `--store FILE` keeps its sessions' event numbers: the directory `FILE.events`.
fn numbers_dir(store: &std::path::Path) -> std::path::PathBuf {
    let mut dir = store.as_os_str().to_owned();
    dir.push(".events");
    dir.into()
}
