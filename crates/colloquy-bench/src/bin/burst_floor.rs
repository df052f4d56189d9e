//! `burst-floor`: what this machine's scheduler and timer give the workload's shape with
//! nothing of colloquy in it — the floor under `colloquy-bench`'s turn latency.
//!
//! K tasks stand for K sessions and start together, as the harness's sessions do. Each runs T
//! turns; a turn keeps a worker busy for `work_us`, half before a `tool_ms` sleep and half
//! after it, each half in `steps` slices with a yield to the scheduler between them (where a
//! session's messages would pass from actor to actor). The turn latency is measured as the
//! harness measures it, and the report gives the CPU each turn really cost (the scheduler's
//! share included), so the figures say what the machine alone makes of a burst of turns of a
//! given CPU cost: the floor under colloquy's p99 at K = 100 × 50 ms (docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p colloquy-bench --bin burst-floor -- --sessions 100 --work-us 50
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_support::{Load, StartLine, latency_summary_ms, mean, round, usage};
use serde_json::json;

/// The floor under `colloquy-bench`'s turn latency: K tasks in bursts of T turns of a fixed
/// CPU cost around a `tool_ms` sleep, with nothing of colloquy in them.
#[derive(clap::Parser)]
#[command(name = "burst-floor", mut_arg("tool_ms", |a| a.default_value("50")))]
struct Args {
    #[command(flatten)]
    load: Load,
    /// Busy time of one turn, in microseconds.
    #[arg(long = "work-us", value_name = "US", default_value_t = 50)]
    work_us: u64,
    /// Slices each half of a turn's work is cut into, with a yield between them.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = bench_support::at_least_one::<u32>)]
    steps: u32,
}

/// Keeps this thread busy for `seconds` (by the monotonic clock, read through the vDSO without
/// entering the kernel; if the vCPU is taken away meanwhile, the turn pays for it as real
/// work would, and the run's CPU, which the report measures, shows less than asked).
fn burn(seconds: f64) {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// One half of a turn: `work_s` of busy time in `steps` slices, yielding between them.
async fn half(work_s: f64, steps: u32) {
    for _ in 0..steps {
        burn(work_s / f64::from(steps));
        tokio::task::yield_now().await;
    }
}

/// One session's turns; their latencies in seconds.
async fn session(args: (u32, u64, f64, u32), start: StartLine) -> Vec<f64> {
    let (turns, tool_ms, work_s, steps) = args;
    start.wait().await;
    let mut latencies = Vec::with_capacity(turns as usize);
    for _ in 0..turns {
        let began = Instant::now();
        half(work_s / 2.0, steps).await;
        tokio::time::sleep(Duration::from_millis(tool_ms)).await;
        half(work_s / 2.0, steps).await;
        latencies.push(began.elapsed().as_secs_f64());
    }
    latencies
}

async fn run(args: &Args) -> serde_json::Value {
    let start = StartLine::new(args.load.sessions);
    let each = (args.load.turns, args.load.tool_ms, args.work_us as f64 / 1e6, args.steps);
    let tasks: Vec<_> =
        (0..args.load.sessions).map(|_| tokio::spawn(session(each, start.clone()))).collect();
    start.ready.wait().await;
    let (cpu_before, _, _) = usage();
    let started = Instant::now();
    start.go.wait().await;
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let run_wall = started.elapsed().as_secs_f64();
    let cpu_run = usage().0 - cpu_before;
    latencies.sort_by(f64::total_cmp);
    let turns = latencies.len().max(1) as f64;
    let tool_s = args.load.tool_ms as f64 / 1000.0;
    json!({
        "framework": "tokio, no colloquy",
        "sessions": args.load.sessions,
        "turns": args.load.turns,
        "tool_ms": args.load.tool_ms,
        "work_us_per_turn": args.work_us,
        "steps_per_half": args.steps,
        "turns_completed": latencies.len(),
        "run_wall_s": round(run_wall, 3),
        "cpu_s_run": round(cpu_run, 4),
        "cpu_us_per_turn": round(cpu_run * 1e6 / turns, 1),
        "turn_latency_ms": latency_summary_ms(&latencies),
        "overhead_ms": {
            "mean": round((mean(&latencies) - tool_s) * 1000.0, 2),
            "p99": round((bench_support::percentile(&latencies, 0.99) - tool_s) * 1000.0, 2),
        },
    })
}

fn main() -> ExitCode {
    let (args, runtime) = match bench_support::start::<Args>() {
        Ok(started) => started,
        Err(status) => return status,
    };
    let report = runtime.block_on(run(&args));
    let complete =
        report["turns_completed"] == args.load.sessions as u64 * u64::from(args.load.turns);
    println!("{report}");
    if complete { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
