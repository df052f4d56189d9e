//! `colloquy node`: a cluster node serving the chat's agent (its model, instructions and
//! tools, `--mcp` servers included) under one or more names, until SIGTERM or SIGINT (or a
//! host's drain request) drains it. It prints a line when it is ready and one for each session
//! it starts or closes; with `--metrics-addr` it serves colloquy-ops' `/metrics` and
//! `/healthz` (`503 draining` while it drains) and counts every session it starts.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use colloquy::cluster::{DrainReport, Node, NodeHandle};
use colloquy::events::{EventFilter, EventKind, EventType};
use colloquy::ops::{Health, Metrics, OpsServer, router, serve};

use super::{CommandError, DEFAULT_AGENT, Nats};
use crate::chat::terminal::{Style, Terminal};
use crate::chat::{self, Signals, clean, llm};
use crate::{NodeArgs, Provider};

/// How often the node's sessions are looked over for new ones, which get their line and
/// their metrics (the node tells of its sessions only when asked).
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Runs the node until it has drained; its lines go to `out`.
pub async fn run(args: &NodeArgs, out: Box<dyn Write + Send>) -> Result<(), CommandError> {
    let nats =
        Nats::from_args(&args.nats, args.token_env.as_deref()).map_err(CommandError::Usage)?;
    let provider = args.provider.unwrap_or(Provider::Scripted);
    let (llm, about) = llm::choose(provider, &args.agent).map_err(CommandError::Usage)?;
    let terminal = Terminal::new(out, false, false);
    let mut signals = Signals::new().map_err(|e| CommandError::Failed(e.to_string()))?;
    let health = Arc::new(Mutex::new(Health::not_ready("starting")));
    let ops = match args.metrics_addr {
        Some(addr) => Some(Ops::serve(addr, &health).await?),
        None => None,
    };
    let (agent, servers) = chat::with_mcp_servers(
        chat::agent(args.agent.instructions.as_deref(), &args.agent.require_approval),
        &args.agent.mcp,
        &terminal,
    );
    let names = match args.agent_names.is_empty() {
        true => vec![DEFAULT_AGENT.to_owned()],
        false => args.agent_names.clone(),
    };
    let mut builder = Node::builder()
        .nats(nats.url.as_str())
        .name(args.name.as_str())
        .llm(llm)
        .max_sessions(args.max_sessions)
        .load_threshold(args.load_threshold)
        .drain_timeout(args.drain_timeout);
    if let Some(token) = nats.token {
        builder = builder.token(token);
    }
    for name in &names {
        let agent = agent.clone();
        builder = builder.agent(name.as_str(), move || agent.clone());
    }
    let node = match builder.start().await {
        Ok(node) => node,
        Err(e) => {
            if let Some(ops) = ops {
                ops.server.stop().await;
            }
            return Err(CommandError::Cluster(e));
        }
    };
    set(&health, Health::Ready);
    chat::report_mcp_servers(&servers, &terminal);
    let metrics = ops.as_ref().map(|ops| format!("; metrics on http://{}/metrics", ops.addr));
    terminal.line(
        Style::Dim,
        &format!(
            "node {} ready on {}: agents {} on {about}{}",
            node.name(),
            nats.url,
            names.join(", "),
            metrics.unwrap_or_default()
        ),
    );
    let mut sessions = Sessions {
        known: BTreeSet::new(),
        metrics: ops.as_ref().map(|ops| ops.metrics.clone()),
        terminal: terminal.clone(),
    };
    let mut look = tokio::time::interval(LOOK_EVERY);
    // Until a signal, or a host asks the node to drain (the node has begun by itself then).
    loop {
        tokio::select! {
            biased;
            _ = signals.recv() => break,
            _ = look.tick() => {
                sessions.look(&node);
                if node.info().draining {
                    break;
                }
            }
        }
    }
    set(&health, Health::not_ready("draining"));
    let (live, wait) = (node.info().sessions, args.drain_timeout);
    terminal.line(
        Style::Dim,
        &format!("node {} draining: {live} live, up to {wait:?} for them to end", node.name()),
    );
    let drained = drain(&node, &mut sessions, &mut signals).await;
    if let Some(ops) = ops {
        ops.server.stop().await;
    }
    match drained {
        Some(report) => {
            let (ended, closed) = (report.ended, report.closed);
            terminal.line(
                Style::Dim,
                &format!(
                    "node {} drained: {ended} ended by themselves, {closed} closed",
                    node.name()
                ),
            );
            Ok(())
        }
        None => Err(CommandError::Failed(format!(
            "node {} stopped by a second signal before its drain finished",
            node.name()
        ))),
    }
}

/// Drains the node, still reporting its sessions; `None` if a second signal stops the wait.
async fn drain(
    node: &NodeHandle,
    sessions: &mut Sessions,
    signals: &mut Signals,
) -> Option<DrainReport> {
    let drain = node.drain();
    tokio::pin!(drain);
    let mut look = tokio::time::interval(LOOK_EVERY);
    loop {
        tokio::select! {
            biased;
            report = &mut drain => return Some(report),
            _ = signals.recv() => return None,
            _ = look.tick() => sessions.look(node),
        }
    }
}

fn set(health: &Mutex<Health>, now: Health) {
    *health.lock().unwrap_or_else(PoisonError::into_inner) = now;
}

/// The metrics and the server that shows them.
struct Ops {
    metrics: Metrics,
    addr: SocketAddr,
    server: OpsServer,
}

impl Ops {
    /// Serves `/metrics` and `/healthz` (what `health` says) on `addr`.
    async fn serve(addr: SocketAddr, health: &Arc<Mutex<Health>>) -> Result<Self, CommandError> {
        let metrics = Metrics::new();
        let health = Arc::clone(health);
        let routes = router(metrics.clone(), move || {
            health.lock().unwrap_or_else(PoisonError::into_inner).clone()
        });
        match serve(addr, routes).await {
            Ok((addr, server)) => Ok(Self { metrics, addr, server }),
            Err(e) => Err(CommandError::Failed(format!("cannot serve metrics on {addr}: {e}"))),
        }
    }
}

/// The node's sessions seen so far: each new one gets a line, its metrics, and a line when it
/// closes.
struct Sessions {
    known: BTreeSet<String>,
    metrics: Option<Metrics>,
    terminal: Terminal,
}

impl Sessions {
    fn look(&mut self, node: &NodeHandle) {
        let live = node.sessions();
        self.known.retain(|id| live.iter().any(|s| s.id() == id));
        for session in live {
            if !self.known.insert(session.id().to_owned()) {
                continue;
            }
            let id = clean::line(session.id());
            self.terminal.line(Style::Dim, &format!("session {id} started"));
            if let Some(metrics) = &self.metrics {
                metrics.watch(&session);
            }
            let mut events = session.subscribe_to(EventFilter::only([EventType::SessionClosed]));
            let terminal = self.terminal.clone();
            tokio::spawn(async move {
                let line = match events.recv().await.map(|e| e.kind) {
                    Some(EventKind::SessionClosed { reason }) => {
                        format!("session {id} closed: {}", clean::line(&reason))
                    }
                    _ => format!("session {id} closed"),
                };
                terminal.line(Style::Dim, &line);
            });
        }
    }
}
