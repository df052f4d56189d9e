//! What colloquy's load harness (`colloquy-bench`) and the machine's floor (`burst-floor`)
//! both measure with: the start line every session waits at, the process's CPU and memory,
//! and the turn-latency summary both print (the fields of `../shared/peer/livekit_bench.py`).

use std::sync::Arc;

use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use serde_json::{Value, json};

/// When the sessions may start talking: every session waits at `ready` once started, the run
/// reads its clocks, and only then passes `go` with them (a session that went on at `ready`
/// could finish its turns before the run's clock started).
#[derive(Clone)]
pub struct StartLine {
    /// Passed once every session and the run are ready.
    pub ready: Arc<tokio::sync::Barrier>,
    /// Passed once the run has read its clocks.
    pub go: Arc<tokio::sync::Barrier>,
}

impl StartLine {
    /// For `sessions` sessions and the run.
    pub fn new(sessions: usize) -> Self {
        let barrier = || Arc::new(tokio::sync::Barrier::new(sessions + 1));
        Self { ready: barrier(), go: barrier() }
    }

    /// A session's side: ready, then wait for the run's go.
    pub async fn wait(&self) {
        self.ready.wait().await;
        self.go.wait().await;
    }
}

/// CPU seconds (user + system) this process has used, from the process CPU clock.
pub fn process_cpu_s() -> f64 {
    match clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID) {
        Ok(now) => now.tv_sec() as f64 + now.tv_nsec() as f64 / 1e9,
        Err(_) => 0.0,
    }
}

/// The part of this process's CPU time spent in the kernel (page faults, futex waits and
/// wake-ups), from `getrusage`: the kernel splits the precise total by its tick samples, so
/// this is an estimate, good to a few ticks.
pub fn kernel_cpu_s() -> f64 {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let t = usage.system_time();
            t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6
        }
        Err(_) => 0.0,
    }
}

/// (user + system CPU seconds, current RSS MiB, peak RSS MiB) of this process.
pub fn usage() -> (f64, f64, f64) {
    let cpu = process_cpu_s();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (cpu, kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// The value at quantile `p` (0..=1) of sorted values, nearest rank; 0 when there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// `x` rounded to `digits` decimal places.
pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The mean of `values` (0 when there are none).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// `turn_latency_ms` of a report: mean, p50, p95, p99 and max of sorted latencies in seconds.
///
/// ```
/// let summary = bench_support::latency_summary_ms(&[0.010, 0.020, 0.030]);
/// assert_eq!(summary["p50"], 20.0);
/// assert_eq!(summary["max"], 30.0);
/// ```
pub fn latency_summary_ms(sorted: &[f64]) -> Value {
    let ms = |s: f64| round(s * 1000.0, 2);
    json!({
        "mean": ms(mean(sorted)),
        "p50": ms(percentile(sorted, 0.50)),
        "p95": ms(percentile(sorted, 0.95)),
        "p99": ms(percentile(sorted, 0.99)),
        "max": ms(sorted.last().copied().unwrap_or(0.0)),
    })
}

/// A binary's start: its options parsed by `parse`, and the multi-threaded runtime it
/// measures on (every driver, one worker per core unless `TOKIO_WORKER_THREADS` says
/// otherwise). On failure prints `name: error` (with `usage` after a bad option) and hands back
/// the exit status: 2 for a bad option, 1 when the runtime cannot start.
pub fn start<A>(
    name: &str,
    usage: &str,
    parse: impl FnOnce() -> Result<A, String>,
) -> Result<(A, tokio::runtime::Runtime), std::process::ExitCode> {
    let args = parse().map_err(|e| {
        eprintln!("{name}: {e}\nusage: {name} {usage}");
        std::process::ExitCode::from(2)
    })?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| {
            eprintln!("{name}: cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        })?;
    Ok((args, runtime))
}
