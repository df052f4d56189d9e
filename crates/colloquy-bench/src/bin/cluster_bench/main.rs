//! `cluster-bench`: the workload of docs/benchmarks.md with its sessions on cluster nodes
//! (docs/cluster.md) instead of in the host's process (docs/benchmarks.md#across-nodes).
//!
//! Starts a nats-server (the pinned one of `scripts/install-nats.sh`) on a free 127.0.0.1 port
//! with its store in a temporary directory, and N nodes in this process, each with its own
//! connection, serving the workload's agent and scripted model as `colloquy-bench` builds
//! them. The host, in the same process, then measures:
//!
//! 1. **One turn** across nodes against the same turn in process: S user turns of one session
//!    placed on a node (`RemoteSession::user_turn`, then the events read from `subscribe()`
//!    until the reply delivering the turn's final output has completed), alternating with the
//!    same turns of a local session (`SessionHandle`); after a few turns of warm-up.
//! 2. **The workload**: K sessions placed by the cluster on the least loaded node, T turns
//!    each, all starting together, as `colloquy-bench` runs them in process; calls per second
//!    and turn latency over the run phase.
//!
//! Every session is checked as `colloquy-bench` checks it; any problem makes the exit status 1.
//! Prints one JSON object.
//!
//! ```sh
//! cargo run --release -p colloquy-bench --bin cluster-bench -- --sessions 1000 --turns 5
//! ```

mod chaos;
mod failover;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bench_support::workload::{self, Seen};
use bench_support::{Load, StartLine, Totals, latency_summary_ms, mean, round, usage};
use colloquy::chat::ChatItem;
use colloquy::events::EventStream;
use colloquy::prelude::*;
use colloquy_cluster::{Cluster, Node, NodeHandle, RemoteEvents, RemoteSession, StartOptions};
use serde_json::{Value, json};
use server::NatsServer;
use tokio::sync::Semaphore;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns of the one-turn comparison not counted (connections, consumers and caches warm up).
const WARMUP_TURNS: u32 = 10;
/// Placements in flight at once: each reads the nodes bucket and waits for a node, which
/// takes its placements one at a time.
const PLACING: usize = 8;
/// The longest a turn, or the rest of a session's events after it closed, may take before the
/// session is reported stuck (far above any turn here; it only keeps a broken run finite).
const STUCK: Duration = Duration::from_secs(60);

/// The workload of docs/benchmarks.md with its sessions on cluster nodes instead of in the
/// host's process (docs/benchmarks.md#across-nodes); or, with `--failover K`, the time from
/// `kill -9` of a node to its sessions' answers from the next (docs/benchmarks.md#failover).
#[derive(clap::Parser)]
#[command(name = "cluster-bench")]
struct Args {
    #[command(flatten)]
    load: Load,
    /// Nodes in this process.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = bench_support::at_least_one::<usize>)]
    nodes: usize,
    /// Turns of the one-turn comparison, on each side (0: none).
    #[arg(long = "turn-samples", value_name = "S", default_value_t = 200)]
    turn_samples: u32,
    /// The nats-server binary (the pinned one `scripts/install-nats.sh` installs).
    #[arg(long = "nats-server", value_name = "PATH", default_value = server::DEFAULT_BINARY)]
    nats_server: PathBuf,
    /// Whether the nodes journal their sessions on the server (their default).
    #[arg(long, value_name = "yes|no", default_value = "yes", value_parser = yes_no, action = clap::ArgAction::Set)]
    durable: bool,
    /// Measure a failover of K sessions instead of the others (0: none).
    #[arg(long, value_name = "K", default_value_t = 0)]
    failover: usize,
    /// Instead of the others: the workload (`--sessions`, `--turns`, `--tool-ms`) on three
    /// node processes while node-1 is killed, the server restarted and node-2 killed, then
    /// the failover's invariants checked (docs/benchmarks.md#chaos).
    #[arg(long, conflicts_with = "failover")]
    chaos: bool,
}

fn yes_no(value: &str) -> Result<bool, String> {
    match value {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("`yes` or `no`, not `{value}`")),
    }
}

/// A session of the workload, here or on a node.
enum Driver {
    Local(SessionHandle),
    Remote(RemoteSession),
}

impl Driver {
    async fn user_turn(&self, text: String) -> Result<(), String> {
        match self {
            Self::Local(session) => session.user_turn(text).await.map_err(|e| e.to_string()),
            Self::Remote(session) => session.user_turn(text).await.map_err(|e| e.to_string()),
        }
    }

    /// Closes the session; its final history.
    async fn close(&self) -> Result<Vec<ChatItem>, String> {
        match self {
            Self::Local(session) => match session.close_with_reason("close").await {
                Ok(closed) => Ok(closed.history.iter().cloned().collect()),
                Err(e) => Err(e.to_string()),
            },
            Self::Remote(session) => {
                session.close_with_reason("close").await.map_err(|e| e.to_string())
            }
        }
    }
}

/// A session's events: its own stream, or the cluster's events stream read for it.
enum Events {
    Local(EventStream),
    Remote(RemoteEvents),
}

/// A session's events as the host reads them: counted for the checks, by type if asked.
struct Reader {
    events: Events,
    seen: Seen,
    read: u64,
    by_type: Option<BTreeMap<String, u64>>,
    problems: Vec<String>,
}

impl Reader {
    fn new(events: Events) -> Self {
        Self { events, seen: Seen::default(), read: 0, by_type: None, problems: Vec::new() }
    }

    /// The next event, counted; `None` once the stream has ended.
    async fn next(&mut self) -> Option<SessionEvent> {
        let event = loop {
            match &mut self.events {
                Events::Local(events) => break events.recv().await?,
                Events::Remote(events) => match events.recv().await? {
                    Ok(event) => break event.event,
                    // Lost to retention, or unreadable: a problem, and the stream goes on.
                    Err(e) => self.problems.push(format!("events: {e}")),
                },
            }
        };
        self.read += 1;
        self.seen.count(&event);
        if let Some(by_type) = &mut self.by_type {
            *by_type.entry(format!("{:?}", event.kind.event_type())).or_default() += 1;
        }
        Some(event)
    }

    /// Reads until the reply delivering `turn`'s final output has completed.
    async fn until_turn_end(&mut self, turn: u32) -> bool {
        let final_id = workload::final_id(turn);
        let delivered = async {
            while let Some(event) = self.next().await {
                if workload::delivers(&event, &final_id) {
                    return true;
                }
            }
            false
        };
        tokio::time::timeout(STUCK, delivered).await.unwrap_or(false)
    }

    /// Reads the rest, up to the session's end.
    async fn read_to_end(&mut self) -> bool {
        let rest = async { while self.next().await.is_some() {} };
        tokio::time::timeout(STUCK, rest).await.is_ok()
    }
}

/// One session being driven, with what it showed so far.
struct Driven {
    session: Driver,
    reader: Reader,
    node: Option<String>,
    latencies: Vec<f64>,
    problems: Vec<String>,
}

/// What a session showed, once closed and checked.
#[derive(Default)]
struct Outcome {
    latencies: Vec<f64>,
    completed_calls: u32,
    deferred_replies: u32,
    events: u64,
    problems: Vec<String>,
}

impl Outcome {
    fn failed(problem: String) -> Self {
        Self { problems: vec![problem], ..Self::default() }
    }
}

impl Driven {
    async fn local(tool_ms: u64) -> Result<Self, String> {
        let mut builder = Session::builder().llm(workload::llm()).user_away_timeout(None);
        let events = builder.subscribe_to(workload::event_filter());
        let session = builder.start(workload::agent(tool_ms)).await.map_err(|e| e.to_string())?;
        Ok(Self::new(Driver::Local(session), Events::Local(events), None))
    }

    async fn remote(cluster: &Cluster) -> Result<Self, String> {
        let options = StartOptions::new();
        let session = cluster.start_session(workload::AGENT, options).await;
        let session = session.map_err(|e| format!("placement: {e}"))?;
        let events = session.subscribe().await.map_err(|e| format!("subscribe: {e}"))?;
        let node = Some(session.node().to_owned());
        Ok(Self::new(Driver::Remote(session), Events::Remote(events), node))
    }

    fn new(session: Driver, events: Events, node: Option<String>) -> Self {
        let reader = Reader::new(events);
        Self { session, reader, node, latencies: Vec::new(), problems: Vec::new() }
    }

    /// One turn, from the user's message to the delivery of its final output; its latency in
    /// seconds, or `None` (and a problem) if it failed.
    async fn turn(&mut self, turn: u32) -> Option<f64> {
        let began = Instant::now();
        if let Err(e) = self.session.user_turn(workload::user_text(turn)).await {
            self.problems.push(format!("turn {turn}: {e}"));
            return None;
        }
        if !self.reader.until_turn_end(turn).await {
            self.problems.push(format!("turn {turn}: the final result was never delivered"));
            return None;
        }
        Some(began.elapsed().as_secs_f64())
    }

    /// Runs `turns` turns, keeping their latencies; stops at the first that fails.
    async fn turns(&mut self, turns: u32) {
        for turn in 0..turns {
            match self.turn(turn).await {
                Some(latency) => self.latencies.push(latency),
                None => break,
            }
        }
    }

    /// Closes the session and checks everything it must show after `turns` turns.
    async fn check(mut self, turns: u32) -> Outcome {
        let history = self.session.close().await;
        let history = match history {
            Ok(history) => history,
            Err(e) => {
                self.problems.push(format!("close failed: {e}"));
                Vec::new()
            }
        };
        if !self.reader.read_to_end().await {
            self.problems.push(format!("the events did not end within {STUCK:?}"));
        }
        self.problems.extend(self.reader.seen.problems(&history, turns));
        self.problems.append(&mut self.reader.problems);
        Outcome {
            completed_calls: self.latencies.len() as u32,
            latencies: self.latencies,
            deferred_replies: self.reader.seen.completed_replies(),
            events: self.reader.read,
            problems: self.problems,
        }
    }
}

/// The nodes, serving the workload's agent; every session gets a scripted model of its own,
/// kept in `models` for the request count.
async fn nodes(
    url: &str,
    args: &Args,
    models: &Arc<Mutex<Vec<ScriptedLlm>>>,
) -> Result<Vec<NodeHandle>, String> {
    let mut nodes = Vec::with_capacity(args.nodes);
    for n in 1..=args.nodes {
        let tool_ms = args.load.tool_ms;
        let models = Arc::clone(models);
        let node = Node::builder()
            .nats(url)
            .name(format!("node-{n}"))
            .agent(workload::AGENT, move || workload::agent(tool_ms))
            .session(move |builder, _| {
                let llm = workload::llm();
                models.lock().unwrap_or_else(PoisonError::into_inner).push(llm.clone());
                builder.llm(llm).user_away_timeout(None)
            })
            // Room for every session of the run on any one node: placement, not admission,
            // spreads them.
            .max_sessions(args.load.sessions + 16)
            .load_threshold(1.0)
            .durable(args.durable)
            .start()
            .await
            .map_err(|e| format!("node-{n}: {e}"))?;
        nodes.push(node);
    }
    Ok(nodes)
}

/// The scripted models' requests since the last call.
fn take_requests(models: &Mutex<Vec<ScriptedLlm>>) -> usize {
    let models = std::mem::take(&mut *models.lock().unwrap_or_else(PoisonError::into_inner));
    models.iter().map(ScriptedLlm::request_count).sum()
}

/// Part 1: the same turns, alternately in process and across nodes.
async fn one_turn(cluster: &Cluster, args: &Args, server: &NatsServer) -> (Value, bool) {
    let started = async {
        Ok::<_, String>((Driven::local(args.load.tool_ms).await?, Driven::remote(cluster).await?))
    };
    let (mut local, mut remote) = match started.await {
        Ok(pair) => pair,
        Err(e) => return (json!({ "ok": false, "problems_sample": [e] }), false),
    };
    remote.reader.by_type = Some(BTreeMap::new());
    let turns = WARMUP_TURNS + args.turn_samples;
    let server_before = server.cpu_s();
    for turn in 0..turns {
        for driven in [&mut local, &mut remote] {
            if let Some(latency) = driven.turn(turn).await
                && turn >= WARMUP_TURNS
            {
                driven.latencies.push(latency);
            }
        }
    }
    let server_ms = (server.cpu_s() - server_before) * 1000.0;
    let by_type = remote.reader.by_type.take().unwrap_or_default();
    let per_turn = |n: u64| round(n as f64 / f64::from(turns), 2);
    let events_per_turn: BTreeMap<&String, f64> =
        by_type.iter().map(|(kind, n)| (kind, per_turn(*n))).collect();
    let node = remote.node.clone();
    let (mut local, mut remote) = (local.check(turns).await, remote.check(turns).await);
    let problems: Vec<String> = local.problems.iter().chain(&remote.problems).cloned().collect();
    let ok = problems.is_empty();
    local.latencies.sort_by(f64::total_cmp);
    remote.latencies.sort_by(f64::total_cmp);
    let report = json!({
        "turns_measured": args.turn_samples,
        "warmup_turns": WARMUP_TURNS,
        "node": node,
        "in_process_ms": latency_summary_ms(&local.latencies),
        "across_nodes_ms": latency_summary_ms(&remote.latencies),
        "events_per_turn": per_turn(by_type.values().sum()),
        "events_per_turn_by_type": events_per_turn,
        "nats_server_cpu_ms_per_turn": round(server_ms / f64::from(turns), 3),
        "problems_sample": problems.iter().take(5).collect::<Vec<_>>(),
        "ok": ok,
    });
    (report, ok)
}

/// One session of part 2: placed (a few at a time), subscribed, then its turns once every
/// session is ready.
async fn drive(
    cluster: Cluster,
    turns: u32,
    placing: Arc<Semaphore>,
    start: StartLine,
) -> Result<Driven, String> {
    let placed = {
        let _permit = placing.acquire().await;
        Driven::remote(&cluster).await
    };
    start.wait().await;
    let mut driven = placed?;
    driven.turns(turns).await;
    Ok(driven)
}

/// Part 2: K sessions over the nodes, T turns each, all at once.
async fn workload(
    cluster: &Cluster,
    args: &Args,
    server: &NatsServer,
    models: &Mutex<Vec<ScriptedLlm>>,
) -> (Value, bool) {
    let (_, rss_before, _) = usage();
    let start = StartLine::new(args.load.sessions);
    let placing = Arc::new(Semaphore::new(PLACING));
    let setup_began = Instant::now();
    let tasks: Vec<_> = (0..args.load.sessions)
        .map(|_| {
            let task = drive(cluster.clone(), args.load.turns, Arc::clone(&placing), start.clone());
            tokio::spawn(task)
        })
        .collect();
    start.ready.wait().await; // every session placed
    let setup_s = setup_began.elapsed().as_secs_f64();
    let (cpu_before, rss_after_setup, _) = usage();
    let server_before = server.cpu_s();
    let started = Instant::now();
    start.go.wait().await;
    let mut driven = Vec::with_capacity(tasks.len());
    let mut outcomes = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(d)) => driven.push(d),
            Ok(Err(e)) => outcomes.push(Outcome::failed(e)),
            Err(e) => outcomes.push(Outcome::failed(e.to_string())),
        }
    }
    let run_wall = started.elapsed().as_secs_f64();
    let (cpu_after, _, peak) = usage();
    let (cpu_run, server_run) = (cpu_after - cpu_before, server.cpu_s() - server_before);
    let run_events: u64 = driven.iter().map(|d| d.reader.read).sum();
    let mut placement: BTreeMap<String, usize> = BTreeMap::new();
    for d in &driven {
        *placement.entry(d.node.clone().unwrap_or_default()).or_default() += 1;
    }
    // Closing and checking, outside the measured run phase.
    let checks: Vec<_> =
        driven.into_iter().map(|d| tokio::spawn(d.check(args.load.turns))).collect();
    for task in checks {
        outcomes.push(task.await.unwrap_or_else(|e| Outcome::failed(e.to_string())));
    }
    let mut totals = Totals::default();
    for o in &outcomes {
        let latencies = o.latencies.iter().copied();
        totals.add(latencies, o.completed_calls, o.deferred_replies, &o.problems);
    }
    let expected = args.load.calls();
    let ok = totals.finish(expected);
    let calls = expected.max(1) as f64;
    let tool_s = args.load.tool_ms as f64 / 1000.0;
    let per_s = |n: f64| round(if run_wall > 0.0 { n / run_wall } else { 0.0 }, 1);
    let events: u64 = outcomes.iter().map(|o| o.events).sum();
    let report = json!({
        "sessions": args.load.sessions,
        "turns": args.load.turns,
        "tool_ms": args.load.tool_ms,
        "placement": placement,
        "setup_s": round(setup_s, 3),
        "run_wall_s": round(run_wall, 3),
        "cpu_s_run": round(cpu_run, 4),
        "cpu_util_run": round(if run_wall > 0.0 { cpu_run / run_wall } else { 0.0 }, 3),
        "nats_server_cpu_s_run": round(server_run, 2),
        "rss_before_sessions_mib": round(rss_before, 1),
        "rss_after_setup_mib": round(rss_after_setup, 1),
        "peak_rss_mib": round(peak, 1),
        "tool_calls_expected": expected,
        "tool_calls_completed": totals.completed,
        "tool_calls_per_s": per_s(f64::from(totals.completed)),
        "llm_requests": take_requests(models),
        "deferred_replies": totals.deferred_replies,
        "events_per_call": round(events as f64 / calls, 2),
        "events_per_s_run": per_s(run_events as f64),
        "turn_latency_ms": latency_summary_ms(&totals.latencies),
        "overhead_ms_per_call": {
            "latency": round((mean(&totals.latencies) - tool_s) * 1000.0, 3),
            "cpu": round(cpu_run * 1000.0 / calls, 3),
            "nats_server_cpu": round(server_run * 1000.0 / calls, 3),
        },
        "sessions_with_problems": totals.sessions_with_problems,
        "problems_sample": totals.problems_sample,
        "ok": ok,
    });
    (report, ok)
}

async fn run(args: &Args) -> Result<(Value, bool), String> {
    if let Some(node) = failover::node_process(args.load.tool_ms).await {
        return node.map(|()| (json!({ "node": "drained" }), true));
    }
    let mut server = NatsServer::start(&args.nats_server)?;
    if args.chaos {
        let (part, ok) = chaos::run(&mut server, args.load).await?;
        let report = json!({ "framework": "colloquy-cluster", "chaos": part, "ok": ok });
        return Ok((report, ok));
    }
    if args.failover > 0 {
        let (part, ok) = failover::run(&server, args.failover).await?;
        let report = json!({ "framework": "colloquy-cluster", "failover": part, "ok": ok });
        return Ok((report, ok));
    }
    let models = Arc::new(Mutex::new(Vec::new()));
    let nodes = nodes(server.url(), args, &models).await?;
    let cluster = Cluster::connect(server.url()).await.map_err(|e| format!("host: {e}"))?;
    let mut ok = true;
    let mut report = json!({
        "framework": "colloquy-cluster",
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
        "nproc": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "nodes": args.nodes,
        "durable": args.durable,
    });
    if args.turn_samples > 0 {
        let (part, passed) = one_turn(&cluster, args, &server).await;
        report["one_turn"] = part;
        ok &= passed;
    }
    take_requests(&models);
    if args.load.sessions > 0 {
        let (part, passed) = workload(&cluster, args, &server, &models).await;
        report["workload"] = part;
        ok &= passed;
    }
    report["ok"] = json!(ok);
    drop((cluster, nodes));
    Ok((report, ok))
}

fn main() -> ExitCode {
    let (args, runtime) = match bench_support::start::<Args>() {
        Ok(started) => started,
        Err(status) => return status,
    };
    match runtime.block_on(run(&args)) {
        Ok((report, ok)) => {
            println!("{report}");
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("cluster-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
