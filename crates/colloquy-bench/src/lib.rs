//! What colloquy's load harness (`colloquy-bench`), the cluster bench (`cluster-bench`) and the
//! machine's floor (`burst-floor`) measure with: the start line every session waits at, the
//! process's CPU and memory, and the turn-latency summary they print (the fields of
//! `../shared/peer/livekit_bench.py`); and the [`workload`] itself.

pub mod chaos;
pub mod durable;
pub mod workload;

use std::sync::Arc;

use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use serde_json::{Value, json};

/// The heap as the allocator counts it (a binary built with `alloc-count`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    /// Allocations so far.
    pub allocations: u64,
    /// Bytes allocated and not freed.
    pub live_bytes: i64,
}

static HEAP: std::sync::OnceLock<fn() -> Heap> = std::sync::OnceLock::new();

/// Where [`heap`] reads the counters: the binary's counting allocator.
pub fn count_with(probe: fn() -> Heap) {
    let _ = HEAP.set(probe);
}

/// The heap now, if the binary counts it.
pub fn heap() -> Option<Heap> {
    HEAP.get().map(|probe| probe())
}

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

/// The shape of a load run, from the options every load binary takes: `--sessions K`,
/// `--turns T` (each session's, one after another) and `--tool-ms M` (the tool's sleep; a
/// binary may give it another default with `mut_arg`).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Load {
    /// Sessions running at once (K).
    #[arg(long, value_name = "K", default_value_t = 100)]
    pub sessions: usize,
    /// Turns of each session, one after another (T).
    #[arg(long, value_name = "T", default_value_t = 5)]
    pub turns: u32,
    /// How long the tool sleeps, in milliseconds (M).
    #[arg(long = "tool-ms", value_name = "M", default_value_t = 0)]
    pub tool_ms: u64,
}

impl Load {
    /// 100 sessions of 5 turns, the tool sleeping `tool_ms`.
    pub fn new(tool_ms: u64) -> Self {
        Self { sessions: 100, turns: 5, tool_ms }
    }

    /// The calls the run makes, one a turn.
    pub fn calls(&self) -> u64 {
        self.sessions as u64 * u64::from(self.turns)
    }
}

/// An option's value that must be a count of at least 1 (a clap value parser).
pub fn at_least_one<T>(value: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    let n: T = value.parse().map_err(|e: T::Err| e.to_string())?;
    if n < T::from(1) {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// What a load run's sessions showed, summed as the load reports give it: the turns'
/// latencies, the calls completed, the deferred replies, and the problems.
#[derive(Default)]
pub struct Totals {
    /// Every completed turn's latency in seconds; sorted once [`finish`](Self::finish)ed.
    pub latencies: Vec<f64>,
    /// Calls whose final output was delivered.
    pub completed: u32,
    /// Deferred replies completed.
    pub deferred_replies: u32,
    /// Sessions that reported a problem.
    pub sessions_with_problems: usize,
    /// The first few problems, for the report.
    pub problems_sample: Vec<String>,
}

impl Totals {
    /// Problems a report shows.
    const SAMPLE: usize = 5;

    /// Adds one session: its turns' latencies in seconds, its completed calls and deferred
    /// replies, its problems.
    pub fn add(
        &mut self,
        latencies: impl IntoIterator<Item = f64>,
        completed: u32,
        deferred_replies: u32,
        problems: &[String],
    ) {
        self.latencies.extend(latencies);
        self.completed += completed;
        self.deferred_replies += deferred_replies;
        if !problems.is_empty() {
            self.sessions_with_problems += 1;
            let room = Self::SAMPLE.saturating_sub(self.problems_sample.len());
            self.problems_sample.extend(problems.iter().take(room).cloned());
        }
    }

    /// Sorts the latencies; whether the run passed: `expected` calls completed and no session
    /// had a problem.
    pub fn finish(&mut self, expected: u64) -> bool {
        self.latencies.sort_by(f64::total_cmp);
        self.sessions_with_problems == 0 && u64::from(self.completed) == expected
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

/// A binary's start: its options parsed by clap (which prints `--help`, and on a bad option
/// an error naming it with the usage, exiting 2), and the multi-threaded runtime it measures
/// on (every driver, one worker per core unless `TOKIO_WORKER_THREADS` says otherwise); a
/// runtime that cannot start is exit status 1.
pub fn start<A: clap::Parser>() -> Result<(A, tokio::runtime::Runtime), std::process::ExitCode> {
    let args = A::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        })?;
    Ok((args, runtime))
}
