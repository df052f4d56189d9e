//! `colloquy node`: a cluster node serving the chat's agent (its model, instructions and
//! tools, `--mcp` servers included) under one or more names, until SIGTERM or SIGINT (or a
//! host's drain request) drains it. It prints a line when it is ready and one for each session
//! it starts or closes; with `--metrics-addr` it serves colloquy-ops' `/metrics` and
//! `/healthz` (`503 draining` while it drains) and counts every session it starts from its
//! first event. Its sessions publish the agent's text as it streams unless `--no-agent-text`.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use colloquy::cluster::{DrainReport, Node, NodeHandle, OnDrain};
use colloquy::events::{EventFilter, EventKind, EventType};
use colloquy::ops::{Health, Metrics};
use colloquy::session::SessionHandle;

use crate::command::{CommandError, nats_config};

/// How long the node waits, once drained, for its sessions' closing lines to be printed.
const CLOSE_LINES_BOUND: Duration = Duration::from_secs(1);

/// The tasks that print each session's closing line: awaited before the drained line, so a
/// close is never lost to the process's exit. Finished ones are dropped as sessions start.
type CloseLines = Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>;
use crate::console::terminal::{Style, Terminal};
use crate::console::{Signals, clean};
use crate::ops::Ops;
use crate::served::{self, Served};
use crate::{NodeArgs, OnDrainArg};

/// Runs the node until it has drained; its lines go to `out`.
pub async fn run(args: &NodeArgs, out: Box<dyn Write + Send>) -> Result<(), CommandError> {
    let nats = nats_config(&args.nats, &args.nats_auth).map_err(CommandError::Usage)?;
    let terminal = Terminal::new(out, false);
    let served = Served::new(&args.served, &terminal).map_err(CommandError::Usage)?;
    let names = served.names();
    let Served { agents, about, servers } = served;
    let mut signals = Signals::new().map_err(|e| CommandError::Failed(e.to_string()))?;
    let health = Arc::new(Mutex::new(Health::not_ready("starting")));
    let ops = match args.metrics_addr {
        Some(addr) => Some(Ops::serve(addr, Metrics::new(), &health).await?),
        None => None,
    };
    let mut builder = Node::builder()
        .nats(nats.clone())
        .name(args.name.as_str())
        .agents(agents)
        .max_sessions(args.max_sessions)
        .load_threshold(args.load_threshold)
        .drain_timeout(args.drain_timeout)
        .lost_after(args.lost_after)
        .host_lost_after(args.host_lost_after);
    if !args.no_agent_text {
        builder = builder.events(EventFilter::ALL);
    }
    builder = builder.durable(!args.no_durable).on_drain(match args.on_drain {
        OnDrainArg::Move => OnDrain::Move,
        OnDrainArg::Close => OnDrain::Close,
    });
    let metrics = ops.as_ref().map(|ops| ops.metrics.clone());
    let (lines, close_lines) = (terminal.clone(), CloseLines::default());
    let watchers = Arc::clone(&close_lines);
    builder = builder.on_session(move |session, _| {
        let watcher = on_session(session, metrics.as_ref(), &lines);
        let mut watchers = watchers.lock().unwrap_or_else(PoisonError::into_inner);
        watchers.retain(|w| !w.is_finished());
        watchers.push(watcher);
    });
    let node = match builder.start().await {
        Ok(node) => node,
        Err(e) => {
            if let Some(ops) = ops {
                ops.server.stop().await;
            }
            return Err(CommandError::Cluster(e));
        }
    };
    crate::ops::set(&health, Health::Ready);
    served::report_mcp_servers(&servers, &terminal);
    let metrics = ops.as_ref().map(|ops| format!("; metrics on http://{}/metrics", ops.addr));
    let journals = match node.info().durable {
        true => "sessions journaled on NATS",
        false => "no journals (--no-durable)",
    };
    terminal.line(
        Style::Dim,
        &format!(
            "node {} ready on {}: agents {} on {about}; {journals}{}",
            node.name(),
            args.nats,
            names,
            metrics.unwrap_or_default()
        ),
    );
    // Until a signal, or a host asks the node to drain (the node has begun by itself then).
    tokio::select! {
        biased;
        _ = signals.recv() => {}
        () = node.drain_requested() => {}
    }
    crate::ops::set(&health, Health::not_ready("draining"));
    let (live, wait) = (node.info().sessions, args.drain_timeout);
    terminal.line(
        Style::Dim,
        &format!(
            "node {} draining: {live} live, up to {wait:?} for them to {}",
            node.name(),
            match args.on_drain {
                OnDrainArg::Move if node.info().durable => "move to another node (or end)",
                _ => "end",
            }
        ),
    );
    let drained = drain(&node, &mut signals).await;
    let watchers = std::mem::take(&mut *close_lines.lock().unwrap_or_else(PoisonError::into_inner));
    let deadline = tokio::time::Instant::now() + CLOSE_LINES_BOUND;
    for watcher in watchers {
        let _ = tokio::time::timeout_at(deadline, watcher).await;
    }
    if let Some(ops) = ops {
        ops.server.stop().await;
    }
    match drained {
        Some(report) => {
            let (ended, closed, moved) = (report.ended, report.closed, report.moved);
            terminal.line(
                Style::Dim,
                &format!(
                    "node {} drained: {moved} moved to other nodes, {ended} ended by themselves, \
                     {closed} closed",
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

/// Drains the node; `None` if a second signal stops the wait.
async fn drain(node: &NodeHandle, signals: &mut Signals) -> Option<DrainReport> {
    tokio::select! {
        biased;
        report = node.drain() => Some(report),
        _ = signals.recv() => None,
    }
}

/// A session the node just started: its line, its metrics, and a line when it closes (the
/// task that prints it).
fn on_session(
    session: &SessionHandle,
    metrics: Option<&Metrics>,
    terminal: &Terminal,
) -> tokio::task::JoinHandle<()> {
    let id = clean::line(session.id());
    terminal.line(Style::Dim, &format!("session {id} started"));
    if let Some(metrics) = metrics {
        metrics.watch(session);
    }
    let mut events = session.subscribe_to(EventFilter::only([EventType::SessionClosed]));
    let terminal = terminal.clone();
    tokio::spawn(async move {
        let line = match events.recv().await.map(|e| e.kind) {
            Some(EventKind::SessionClosed { reason }) if reason == "suspended" => {
                format!("session {id} suspended: its journal resumes it elsewhere")
            }
            Some(EventKind::SessionClosed { reason }) => {
                format!("session {id} closed: {}", clean::line(&reason))
            }
            _ => format!("session {id} closed"),
        };
        terminal.line(Style::Dim, &line);
    })
}
