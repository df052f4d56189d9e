//! `--failover K`: the time from `kill -9` of a node to each of its sessions' first answer
//! from the node it moved to (docs/benchmarks.md#failover).
//!
//! Three node processes (this binary run again as a node, [`NODE_VAR`] in its environment)
//! serve the workload's agent with journals on the server (their default). The host places
//! K sessions on them in turn, each answers one turn, then the first node is killed with
//! SIGKILL. Each of its sessions, all at once, sends its next turn at the kill (the call
//! waits for the move) and waits until the session is idle again: that answer's time after
//! the kill is what is measured. A turn that reached the node as it died is sent again to the
//! next node by `RemoteSession` itself, and runs once (docs/cluster.md#commands). The nodes
//! bucket's `max_age` (3 s, the default `lost_after`) is most of it: the rest is detection,
//! the move and the turn.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench_support::{latency_summary_ms, workload};
use colloquy_cluster::{Cluster, Node, RemoteSession, StartOptions};
use serde_json::{Value, json};

use crate::server::NatsServer;

/// Set in a node process's environment: its name and the server's URL, `name@url`.
pub(crate) const NODE_VAR: &str = "COLLOQUY_BENCH_NODE";
/// The nodes.
pub(crate) const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
/// The bound on the whole measurement's every wait.
pub(crate) const BOUND: Duration = Duration::from_secs(120);

/// Runs this process as a node, if it was started as one; `None` otherwise.
pub(crate) async fn node_process(tool_ms: u64) -> Option<Result<(), String>> {
    let spec = std::env::var(NODE_VAR).ok()?;
    let (name, url) = spec.split_once('@')?;
    let run = Node::builder()
        .nats(url)
        .name(name)
        .agent(workload::AGENT, move || workload::agent(tool_ms))
        .session(|builder, _| builder.llm(workload::llm()).user_away_timeout(None))
        .max_sessions(100_000)
        .load_threshold(1.0)
        .run()
        .await;
    Some(run.map(drop).map_err(|e| format!("{name}: {e}")))
}

/// A node process, killed on drop if it still runs.
pub(crate) struct NodeProcess(Child);

impl NodeProcess {
    /// Node `name` of the server at `url`: this binary run again as a node, its tool sleeping
    /// `tool_ms`.
    pub(crate) fn spawn(url: &str, name: &str, tool_ms: u64) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(&exe)
            .args(["--tool-ms", &tool_ms.to_string()])
            .env(NODE_VAR, format!("{name}@{url}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("{name}: {e}"))?;
        Ok(Self(child))
    }

    /// SIGKILL.
    pub(crate) fn kill(&mut self) -> Result<(), String> {
        self.0.kill().map_err(|e| format!("kill -9: {e}"))
    }
}

/// Waits until `cluster` sees `n` nodes under a lease, within the bound.
pub(crate) async fn live_nodes(cluster: &Cluster, n: usize) -> Result<(), String> {
    let started = Instant::now();
    while cluster.nodes().await.map_or(0, |nodes| nodes.iter().filter(|n| n.lease > 0).count()) != n
    {
        if started.elapsed() > BOUND {
            return Err(format!("{n} node processes did not announce themselves"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The measurement, as a JSON part of the report, and whether every session moved.
pub(crate) async fn run(server: &NatsServer, sessions: usize) -> Result<(Value, bool), String> {
    let mut nodes = Vec::new();
    for name in NODES {
        nodes.push(NodeProcess::spawn(server.url(), name, 0)?);
    }
    let cluster = Cluster::connect(server.url()).await.map_err(|e| format!("host: {e}"))?;
    live_nodes(&cluster, NODES.len()).await?;
    let mut doomed = Vec::new();
    for i in 0..sessions {
        let node = NODES[i % NODES.len()];
        let start = cluster.start_session_on(node, workload::AGENT, StartOptions::new());
        let session = start.await.map_err(|e| format!("placing a session: {e}"))?;
        answer(&session, "hello").await?;
        if i % NODES.len() == 0 {
            doomed.push(session);
        }
    }
    // Every journal write of the turns on the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    nodes[0].kill()?;
    let killed = Instant::now();
    let answers = doomed.iter().map(|session| async move {
        answer(session, "are you still there?").await?;
        Ok::<_, String>(killed.elapsed().as_secs_f64())
    });
    let answered = futures_util::future::join_all(answers).await;
    let mut times: Vec<f64> = answered.iter().filter_map(|a| a.as_ref().ok().copied()).collect();
    let problems: Vec<&String> = answered.iter().filter_map(|a| a.as_ref().err()).collect();
    times.sort_by(f64::total_cmp);
    let moved_to_other_nodes =
        doomed.iter().filter(|s| s.node() != NODES[0] && !s.is_node_lost()).count();
    let ok = problems.is_empty() && moved_to_other_nodes == doomed.len();
    let part = json!({
        "sessions": sessions,
        "on_killed_node": doomed.len(),
        "moved": moved_to_other_nodes,
        "kill_to_answer_ms": latency_summary_ms(&times),
        "problems_sample": problems.iter().take(5).collect::<Vec<_>>(),
    });
    Ok((part, ok))
}

/// One turn of `session`, answered: taken, then the session idle again.
async fn answer(session: &RemoteSession, text: &str) -> Result<(), String> {
    let turn = async {
        session.user_turn(text).await?;
        session.wait_for_idle().await
    };
    match tokio::time::timeout(BOUND, turn).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{}: {e}", session.id())),
        Err(_) => Err(format!("{}: no answer within {BOUND:?}", session.id())),
    }
}
