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
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_support::{StartLine, kernel_cpu_s, latency_summary_ms, mean, round, usage};
use colloquy::events::{EventFilter, EventStream, EventType, ReplyStatus};
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The allocator: mimalloc unless built with `--no-default-features` (glibc malloc fragments
/// under hundreds of thousands of small, short-lived, cross-thread allocations; see
/// docs/benchmarks-history.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Deserialize, JsonSchema)]
struct Task {
    turn: u32,
}

fn progress_task(tool_ms: u64) -> FunctionTool {
    FunctionTool::new(
        "progress_task",
        "Works in two steps.",
        move |ctx: RunContext, t: Task| async move {
            ctx.update("step 1 of 2").await?;
            if tool_ms > 0 {
                tokio::time::sleep(Duration::from_millis(tool_ms)).await;
            }
            ctx.update("step 2 of 2").await?;
            Ok::<_, ToolError>(Json(json!({"turn": t.turn, "ok": true})))
        },
    )
}

/// The scripted model: a call for each user message, a short text for anything else.
fn llm() -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(|_, request| {
        let user = request
            .items
            .items()
            .last()
            .and_then(|i| i.as_message())
            .filter(|m| m.role == Role::User);
        match (request.kind, user) {
            (RequestKind::UserTurn, Some(message)) => {
                let turn = message.text.trim_start_matches("turn ").to_string();
                let call = ScriptedCall::new(
                    format!("t{turn}"),
                    "progress_task",
                    format!(r#"{{"turn":{turn}}}"#),
                );
                ScriptedResponse::calls([call]).with_latency(Duration::ZERO)
            }
            _ => ScriptedResponse::text("noted").with_latency(Duration::ZERO),
        }
    })
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

/// What one session's events showed: per turn, how often its call (`t<turn>`) started, was
/// updated and ended; how many deferred replies were scheduled and completed; any event about
/// a call the workload never makes. Counted as the events arrive, without building a key per
/// event (the bench is the host here, and its bookkeeping is part of the measured run).
#[derive(Default)]
struct Seen {
    calls: Vec<[u32; 3]>,
    unknown_calls: Vec<String>,
    errors: Vec<String>,
    scheduled: u32,
    completed: u32,
}

impl Seen {
    const STARTED: usize = 0;
    const UPDATED: usize = 1;
    const ENDED: usize = 2;

    fn call(&mut self, call_id: &str, what: usize) {
        match call_id.strip_prefix('t').and_then(|n| n.parse::<usize>().ok()) {
            Some(turn) => {
                if self.calls.len() <= turn {
                    self.calls.resize(turn + 1, [0; 3]);
                }
                self.calls[turn][what] += 1;
            }
            None => self.unknown_calls.push(call_id.to_string()),
        }
    }
}

/// Starts one session, waits for every session to be started, then runs its turns.
async fn drive(turns: u32, tool_ms: u64, start: StartLine) -> Driven {
    let mut result = SessionResult::default();
    let llm = llm();
    let mut builder = Session::builder().llm(llm.clone()).user_away_timeout(None);
    // What the peer listens to (`session.on("tool_execution_updated")` and `on("error")`):
    // the session then sends this subscriber nothing else.
    let mut events = builder.subscribe_to(EventFilter::tool_execution().with(EventType::Error));
    let started = builder.start(Agent::new("bench", "Run tasks.").tool(progress_task(tool_ms)));
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
        if let Err(e) = session.user_turn(format!("turn {turn}")).await {
            result.problems.push(format!("turn {turn}: {e}"));
            break;
        }
        let final_id = format!("t{turn}_final");
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
        count(&event, &mut seen);
    }
    // The checks: every call started, updated twice and ended; every reply completed; every
    // pair in history.
    for id in &seen.unknown_calls {
        result.problems.push(format!("{id}: events of a call the workload never made"));
    }
    for error in &seen.errors {
        result.problems.push(format!("session error event: {error}"));
    }
    if seen.calls.len() > turns as usize {
        result.problems.push(format!("calls of {} turns, expected {turns}", seen.calls.len()));
    }
    // Every output's call id, once (the history is checked in one pass, not once per item).
    let outputs: BTreeSet<&str> = history
        .iter()
        .filter_map(|i| i.as_function_call_output().map(|o| o.call_id.as_str()))
        .collect();
    for turn in 0..turns {
        let id = format!("t{turn}");
        let counts = seen.calls.get(turn as usize).copied().unwrap_or_default();
        for (what, index, want) in [
            ("started", Seen::STARTED, 1),
            ("updated", Seen::UPDATED, 2),
            ("ended", Seen::ENDED, 1),
        ] {
            let got = counts[index];
            if got != want {
                result.problems.push(format!("{id}: {what} {got} times, expected {want}"));
            }
        }
        for item in [id.clone(), format!("{id}_update_1"), format!("{id}_final")] {
            if !outputs.contains(item.as_str()) {
                result.problems.push(format!("{item}: missing from history"));
            }
        }
    }
    let (scheduled, completed) = (seen.scheduled, seen.completed);
    if scheduled != completed {
        result.problems.push(format!("{scheduled} replies scheduled, {completed} completed"));
    }
    result.deferred_replies = completed;
    result.llm_requests = llm.request_count();
    result
}

fn count(event: &SessionEvent, seen: &mut Seen) {
    match &event.kind {
        EventKind::ToolCallStarted { call_id, .. } => seen.call(call_id, Seen::STARTED),
        EventKind::ToolCallUpdated { call_id, .. } => seen.call(call_id, Seen::UPDATED),
        EventKind::ToolCallEnded { call_id, .. } => seen.call(call_id, Seen::ENDED),
        EventKind::ToolReplyUpdated { status: ReplyStatus::Scheduled, .. } => seen.scheduled += 1,
        EventKind::ToolReplyUpdated { status: ReplyStatus::Completed, .. } => seen.completed += 1,
        EventKind::Error { source, message, .. } => {
            seen.errors.push(format!("{source:?}: {message}"));
        }
        _ => {}
    }
}

/// Reads events until the reply carrying `final_id` has completed.
async fn wait_for_delivery(events: &mut EventStream, final_id: &str, seen: &mut Seen) -> bool {
    while let Some(event) = events.recv().await {
        count(&event, seen);
        if let EventKind::ToolReplyUpdated { update_ids, status: ReplyStatus::Completed, .. } =
            &event.kind
            && update_ids.iter().any(|id| id == final_id)
        {
            return true;
        }
    }
    false
}

struct Args {
    sessions: usize,
    turns: u32,
    tool_ms: u64,
    idle_sessions: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { sessions: 100, turns: 5, tool_ms: 0, idle_sessions: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--sessions" => {
                args.sessions = value()?.parse().map_err(|e| format!("--sessions: {e}"))?;
            }
            "--turns" => args.turns = value()?.parse().map_err(|e| format!("--turns: {e}"))?,
            "--tool-ms" => {
                args.tool_ms = value()?.parse().map_err(|e| format!("--tool-ms: {e}"))?;
            }
            "--idle-sessions" => {
                args.idle_sessions =
                    Some(value()?.parse().map_err(|e| format!("--idle-sessions: {e}"))?);
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(args)
}

async fn idle(n: usize) -> (serde_json::Value, bool) {
    let (_, before, _) = usage();
    let mut sessions = Vec::with_capacity(n);
    let mut failures = Vec::new();
    for _ in 0..n {
        let session = Session::builder()
            .llm(llm())
            .user_away_timeout(None)
            .start(Agent::new("bench", "Run tasks.").tool(progress_task(0)))
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
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
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
    let (_, rss_before, _) = usage();
    let start = StartLine::new(args.sessions);
    let (turns, tool_ms) = (args.turns, args.tool_ms);
    let tasks: Vec<_> =
        (0..args.sessions).map(|_| tokio::spawn(drive(turns, tool_ms, start.clone()))).collect();
    start.ready.wait().await; // every session started
    let (cpu_before, rss_after_setup, _) = usage();
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
    let mut latencies: Vec<f64> =
        results.iter().flat_map(|r| r.latencies.iter().map(Duration::as_secs_f64)).collect();
    latencies.sort_by(f64::total_cmp);
    let completed: u32 = results.iter().map(|r| r.completed_calls).sum();
    let expected = args.sessions as u64 * u64::from(args.turns);
    let problems: Vec<&String> = results.iter().flat_map(|r| r.problems.iter()).collect();
    let calls = expected.max(1) as f64;
    let tool_s = args.tool_ms as f64 / 1000.0;
    let mean = mean(&latencies);
    let ok = problems.is_empty() && u64::from(completed) == expected;
    let report = json!({
        "framework": "colloquy",
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
        "nproc": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        "sessions": args.sessions,
        "turns": args.turns,
        "tool_ms": args.tool_ms,
        "run_wall_s": round(run_wall, 3),
        "cpu_s_run": round(cpu_run, 4),
        "cpu_kernel_s_run": round(kernel_run, 4),
        "cpu_util_run": round(if run_wall > 0.0 { cpu_run / run_wall } else { 0.0 }, 3),
        "rss_before_sessions_mib": round(rss_before, 1),
        "rss_after_setup_mib": round(rss_after_setup, 1),
        "peak_rss_mib": round(peak, 1),
        "tool_calls_expected": expected,
        "tool_calls_completed": completed,
        "tool_calls_per_s": round(if run_wall > 0.0 { f64::from(completed) / run_wall } else { 0.0 }, 1),
        "llm_requests": results.iter().map(|r| r.llm_requests).sum::<usize>(),
        "deferred_replies": results.iter().map(|r| r.deferred_replies).sum::<u32>(),
        "turn_latency_ms": latency_summary_ms(&latencies),
        "overhead_ms_per_call": {
            "latency": round((mean - tool_s) * 1000.0, 3),
            "amortised_wall": round((run_wall - f64::from(args.turns) * tool_s) * 1000.0 / calls, 3),
            "cpu": round(cpu_run * 1000.0 / calls, 3),
        },
        "sessions_with_problems": results.iter().filter(|r| !r.problems.is_empty()).count(),
        "problems_sample": problems.iter().take(5).collect::<Vec<_>>(),
        "ok": ok,
    });
    (report, ok)
}

fn main() -> ExitCode {
    let usage = "[--sessions K] [--turns T] [--tool-ms M] | --idle-sessions N";
    let (args, runtime) = match bench_support::start("colloquy-bench", usage, parse_args) {
        Ok(started) => started,
        Err(status) => return status,
    };
    let (report, ok) = match args.idle_sessions {
        Some(n) => runtime.block_on(idle(n)),
        None => runtime.block_on(run(&args)),
    };
    println!("{report}");
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
