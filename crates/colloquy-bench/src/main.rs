//! `colloquy-bench`: the benchmark workload of docs/benchmarks.md, the same as
//! `../shared/peer/livekit_bench.py` runs on LiveKit Agents, so the figures compare.
//!
//! K sessions run concurrently in one process (multi-threaded runtime, real clock), each
//! running T user turns one after another. In every turn the scripted LLM answers the user
//! with one call of the background tool `progress_task` — `update("step 1 of 2")`, sleep
//! `tool_ms`, `update("step 2 of 2")`, return a small JSON object — and answers every other
//! request with a short text at once. A turn ends when the reply that delivers the tool's
//! `_final` output has completed. Every session is checked at the end; any missing call,
//! update, reply or history item makes the exit status 1. Prints one JSON object.
//!
//! ```sh
//! cargo run --release -p colloquy-bench -- --sessions 1000 --turns 5 --tool-ms 0
//! cargo run --release -p colloquy-bench -- --idle-sessions 10000
//! cargo run --release -p colloquy-bench -- --sessions 1000 --store target/bench.db  # durable
//! cargo run --release -p colloquy-bench -- --resume-turns 150 --store target/bench.db
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_support::workload::{self, Seen};
use bench_support::{
    Load, StartLine, Totals, kernel_cpu_s, latency_summary_ms, mean, round, usage,
};
use colloquy::events::EventStream;
use colloquy::prelude::*;
use serde_json::json;

/// The allocator: mimalloc unless built with `--no-default-features` (glibc malloc fragments
/// under hundreds of thousands of small, short-lived, cross-thread allocations; see
/// docs/benchmarks-history.md).
#[cfg(all(feature = "mimalloc", not(feature = "alloc-count")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// With `alloc-count`, the system allocator, counted: stats_alloc can wrap only that one in a
/// static on stable Rust. The counts (allocations, bytes in use) are the program's, whichever
/// allocator serves them.
#[cfg(feature = "alloc-count")]
#[global_allocator]
static ALLOCATOR: stats_alloc::StatsAlloc<std::alloc::System> = stats_alloc::StatsAlloc::system();

/// The allocator the figures were made with.
fn allocator() -> &'static str {
    match (cfg!(feature = "alloc-count"), cfg!(feature = "mimalloc")) {
        (true, _) => "system, counted",
        (false, true) => "mimalloc",
        (false, false) => "system",
    }
}

/// Hands the allocator's counters to the measurements (`alloc-count` only).
/// The messages actors have handled so far, if this build counts them (`alloc-count`).
fn messages() -> Option<colloquy_actors::MessageCounts> {
    use colloquy_actors::MessageCounts;
    MessageCounts::counted().then(MessageCounts::now)
}

fn count_the_heap() {
    #[cfg(feature = "alloc-count")]
    bench_support::count_with(|| {
        let stats = ALLOCATOR.stats();
        // A realloc's change is in the first two already (`bytes_reallocated` repeats it).
        let live = stats.bytes_allocated as i64 - stats.bytes_deallocated as i64;
        bench_support::Heap { allocations: stats.allocations as u64, live_bytes: live }
    });
}

#[derive(Default)]
struct SessionResult {
    latencies: Vec<Duration>,
    completed_calls: u32,
    deferred_replies: u32,
    llm_requests: usize,
    problems: Vec<String>,
}

/// One session after its turns: what the checks need, kept out of the timed run phase (as the
/// peer keeps its checks and closing out of `run_wall_s`).
struct Driven {
    session: Option<SessionHandle>,
    events: EventStream,
    llm: ScriptedLlm,
    seen: Seen,
    result: SessionResult,
}

/// Starts one session, waits for every session to be started, then runs its turns.
async fn drive(turns: u32, tool_ms: u64, start: StartLine, store: Option<Store>) -> Driven {
    let mut result = SessionResult::default();
    let llm = workload::llm();
    let mut builder = Session::builder().llm(llm.clone()).user_away_timeout(None);
    if let Some(store) = store {
        builder = builder.store(store);
    }
    let mut events = builder.subscribe_to(workload::event_filter());
    let started = builder.start(workload::agent(tool_ms));
    let session = match started.await {
        Ok(session) => session,
        Err(e) => {
            result.problems.push(format!("start: {e}"));
            start.wait().await;
            return Driven { session: None, events, llm, seen: Seen::default(), result };
        }
    };
    start.wait().await;
    let mut seen = Seen::default();
    for turn in 0..turns {
        let began = Instant::now();
        if let Err(e) = session.user_turn(workload::user_text(turn)).await {
            result.problems.push(format!("turn {turn}: {e}"));
            break;
        }
        let final_id = workload::final_id(turn);
        if !wait_for_delivery(&mut events, &final_id, &mut seen).await {
            result.problems.push(format!("turn {turn}: the final result was never delivered"));
            break;
        }
        result.latencies.push(began.elapsed());
        result.completed_calls += 1;
    }
    Driven { session: Some(session), events, llm, seen, result }
}

/// Closes a driven session and checks everything it must show after `turns` turns.
async fn check(driven: Driven, turns: u32) -> SessionResult {
    let Driven { session, mut events, llm, mut seen, mut result } = driven;
    let Some(session) = session else { return result };
    // Closing hands back the final history, its items shared with the session (no copy).
    let history = match session.close_with_reason("close").await {
        Ok(closed) => closed.history,
        Err(e) => {
            result.problems.push(format!("close failed: {e}"));
            return result;
        }
    };
    while let Some(event) = events.recv().await {
        seen.count(&event);
    }
    result.problems.extend(seen.problems(history.iter(), turns));
    result.deferred_replies = seen.completed_replies();
    result.llm_requests = llm.request_count();
    result
}

/// Reads events until the reply carrying `final_id` has completed.
async fn wait_for_delivery(events: &mut EventStream, final_id: &str, seen: &mut Seen) -> bool {
    while let Some(event) = events.recv().await {
        seen.count(&event);
        if workload::delivers(&event, final_id) {
            return true;
        }
    }
    false
}

type Store = std::sync::Arc<dyn colloquy::store::SessionStore>;

/// The benchmark workload of docs/benchmarks.md: K sessions in this process, T turns each,
/// every turn a background tool call; prints one JSON object (exit status 1 if any session
/// showed a problem).
#[derive(clap::Parser)]
#[command(name = "colloquy-bench")]
struct Args {
    #[command(flatten)]
    load: Load,
    /// Start N idle sessions instead, and report the memory each holds.
    #[arg(long, value_name = "N")]
    idle_sessions: Option<usize>,
    /// Every session journals to a fresh SQLite file here (`memory`: in memory; a `nats://`
    /// URL: the cluster's store on that server).
    #[arg(long, value_name = "FILE|memory|nats://URL")]
    store: Option<std::path::PathBuf>,
    /// Measure a resume of a session of N turns instead (needs `--store`).
    #[arg(long, value_name = "N", requires = "store")]
    resume_turns: Option<u32>,
    /// With `--store`: `disk` (an fsync per commit) or `process`.
    #[arg(long, value_parser = durability, default_value = "disk")]
    durability: colloquy::store::Durability,
    /// Chaos mode: inject a fault into this share of the turns (0 to 1), then check the
    /// invariants (docs/benchmarks.md#chaos); with `--store`, a fault may be a crash of the
    /// whole session, resumed from the store.
    #[arg(long, value_name = "RATE", value_parser = share, conflicts_with_all = ["idle_sessions", "resume_turns"])]
    chaos: Option<f64>,
    /// Chaos mode: the seed the faults are drawn from.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "chaos")]
    seed: u64,
}

fn share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        Ok(_) => Err("a share of the turns, from 0 to 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn durability(value: &str) -> Result<colloquy::store::Durability, String> {
    match value {
        "disk" => Ok(colloquy::store::Durability::Disk),
        "process" => Ok(colloquy::store::Durability::Process),
        other => Err(format!("`{other}` is not disk or process")),
    }
}

async fn idle(n: usize) -> (serde_json::Value, bool) {
    let (_, before, _) = usage();
    let mut sessions = Vec::with_capacity(n);
    let mut failures = Vec::new();
    for _ in 0..n {
        let session = Session::builder()
            .llm(workload::llm())
            .user_away_timeout(None)
            .start(workload::agent(0))
            .await;
        match session {
            Ok(session) => sessions.push(session),
            Err(e) => failures.push(e.to_string()),
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, after, peak) = usage();
    let started = sessions.len();
    for session in &sessions {
        let _ = session.close().await;
    }
    let ok = failures.is_empty();
    let report = json!({
        "framework": "colloquy",
        "allocator": allocator(),
        "idle_sessions": started,
        "failed_to_start": failures.len(),
        "problems_sample": failures.iter().take(5).collect::<Vec<_>>(),
        "rss_before_mib": round(before, 1),
        "rss_with_sessions_mib": round(after, 1),
        "bytes_per_idle_session": ((after - before) * 1024.0 * 1024.0 / started.max(1) as f64).round(),
        "peak_rss_mib": round(peak, 1),
        "ok": ok,
    });
    (report, ok)
}

async fn run(args: &Args) -> (serde_json::Value, bool) {
    let (cpu_start, rss_before, _) = usage();
    let start = StartLine::new(args.load.sessions);
    let (turns, tool_ms) = (args.load.turns, args.load.tool_ms);
    let fresh = |path| bench_support::durable::fresh_store(path, args.durability);
    let store = match args.store.as_deref().map(fresh) {
        Some(Err(e)) => return (json!({"error": e}), false),
        Some(Ok(store)) => Some(store),
        None => None,
    };
    let tasks: Vec<_> = (0..args.load.sessions)
        .map(|_| tokio::spawn(drive(turns, tool_ms, start.clone(), store.clone())))
        .collect();
    start.ready.wait().await; // every session started
    let (cpu_before, rss_after_setup, _) = usage();
    let heap_before = bench_support::heap();
    let messages_before = messages();
    let kernel_before = kernel_cpu_s();
    let started = Instant::now();
    start.go.wait().await; // and now they talk
    let mut driven = Vec::with_capacity(tasks.len());
    let mut results = Vec::new();
    for task in tasks {
        match task.await {
            Ok(d) => driven.push(d),
            Err(e) => {
                results.push(SessionResult { problems: vec![e.to_string()], ..Default::default() });
            }
        }
    }
    let run_wall = started.elapsed().as_secs_f64();
    let (cpu_after, _, peak) = usage();
    let heap_after = bench_support::heap();
    let messages_after = messages();
    let cpu_run = cpu_after - cpu_before;
    let kernel_run = kernel_cpu_s() - kernel_before;
    // Closing and checking, outside the measured run phase.
    let checks: Vec<_> = driven.into_iter().map(|d| tokio::spawn(check(d, turns))).collect();
    for task in checks {
        results.push(task.await.unwrap_or_else(|e| SessionResult {
            problems: vec![e.to_string()],
            ..Default::default()
        }));
    }
    let mut totals = Totals::default();
    for r in &results {
        let latencies = r.latencies.iter().map(Duration::as_secs_f64);
        totals.add(latencies, r.completed_calls, r.deferred_replies, &r.problems);
    }
    let expected = args.load.calls();
    let ok = totals.finish(expected);
    let (latencies, completed) = (&totals.latencies, totals.completed);
    let calls = expected.max(1) as f64;
    let tool_s = args.load.tool_ms as f64 / 1000.0;
    let mean = mean(latencies);
    let report = json!({
        "framework": "colloquy",
        "allocator": allocator(),
        "store": match (&store, args.durability) {
            (None, _) => "none",
            _ if args.store.as_deref() == Some(std::path::Path::new("memory")) => "memory",
            (Some(_), colloquy::store::Durability::Process) => "sqlite, process",
            (Some(_), _) => "sqlite, disk",
        },
        "nproc": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "sessions": args.load.sessions,
        "turns": args.load.turns,
        "tool_ms": args.load.tool_ms,
        "run_wall_s": round(run_wall, 3),
        // Starting the sessions, outside the run phase: what a session costs before it talks.
        "cpu_s_setup": round(cpu_before - cpu_start, 4),
        "cpu_s_run": round(cpu_run, 4),
        "cpu_kernel_s_run": round(kernel_run, 4),
        "cpu_util_run": round(if run_wall > 0.0 { cpu_run / run_wall } else { 0.0 }, 3),
        // Counted (`--features alloc-count`): the run phase's allocations, per call.
        "allocations_per_call": heap_before.zip(heap_after).map(|(before, after)| {
            round((after.allocations - before.allocations) as f64 / calls, 1)
        }),
        // Counted too: the messages each kind of actor handled in the run phase, per call.
        "messages_per_call": messages_before.zip(messages_after).map(|(before, after)| {
            let per_call = |n: u64| round(n as f64 / calls, 2);
            let m = after.since(&before);
            json!({
                "session": per_call(m.session),
                "coalescer": per_call(m.coalescer),
                "activity": per_call(m.activity),
                "toolset": per_call(m.toolset),
                "tool_call": per_call(m.tool_call),
                "total": per_call(m.total()),
            })
        }),
        "rss_before_sessions_mib": round(rss_before, 1),
        "rss_after_setup_mib": round(rss_after_setup, 1),
        "peak_rss_mib": round(peak, 1),
        "tool_calls_expected": expected,
        "tool_calls_completed": completed,
        "tool_calls_per_s": round(if run_wall > 0.0 { f64::from(completed) / run_wall } else { 0.0 }, 1),
        "llm_requests": results.iter().map(|r| r.llm_requests).sum::<usize>(),
        "deferred_replies": totals.deferred_replies,
        "turn_latency_ms": latency_summary_ms(latencies),
        "overhead_ms_per_call": {
            "latency": round((mean - tool_s) * 1000.0, 3),
            "amortised_wall": round((run_wall - f64::from(args.load.turns) * tool_s) * 1000.0 / calls, 3),
            "cpu": round(cpu_run * 1000.0 / calls, 3),
        },
        "sessions_with_problems": totals.sessions_with_problems,
        "problems_sample": totals.problems_sample,
        "ok": ok,
    });
    (report, ok)
}

fn main() -> ExitCode {
    count_the_heap();
    let (args, runtime) = match bench_support::start::<Args>() {
        Ok(started) => started,
        Err(status) => return status,
    };
    if let Some(rate) = args.chaos {
        let store = args.store.clone().map(|path| (path, args.durability));
        let chaos = bench_support::chaos::Chaos { load: args.load, rate, seed: args.seed, store };
        let (report, held) = runtime.block_on(bench_support::chaos::run(chaos));
        println!("{report}");
        return if held { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let (report, ok) = match (args.idle_sessions, args.resume_turns, &args.store) {
        (Some(n), ..) => runtime.block_on(idle(n)),
        (None, Some(turns), Some(path)) => {
            match runtime.block_on(bench_support::durable::resume_time(path, turns, 5)) {
                Ok(report) => (report, true),
                Err(e) => (json!({"error": e}), false),
            }
        }
        _ => runtime.block_on(run(&args)),
    };
    println!("{report}");
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
