//! Chaos under load (`colloquy-bench --chaos RATE`, docs/benchmarks.md#chaos): the workload's
//! sessions run their turns while faults are injected into a share of them — actors killed
//! (the call's ToolCall, its Toolset, the Activity), the model's stream cut, failed or slow to
//! start, the tool panicking or running past its deadline; with a store, the whole session
//! dying and resumed from it — then the invariants are checked:
//!
//! - every call started ended exactly once (with a store, in its journal too: a crash may take
//!   back an end the journal did not hold yet, and the resume settles the call in doubt);
//! - every call that finished (`done`) has its result in its session's history;
//! - every session still answers a new turn, with no fault;
//! - no actor is left once the sessions are closed (the Host's lifecycle records balance) and
//!   no task (tokio's count of live tasks is back where it was);
//! - the process's memory is back to its baseline: the sessions run twice, and the second
//!   round leaves no more of the heap in use than the first (built with `alloc-count`, which
//!   counts it), or, without the count and without a store, peaks within a tenth of the first
//!   (what a round left in use would add to it).
//!
//! Which turn gets which fault is a pure function of the seed, the session's number and the
//! turn's ([`fault`]): a failure names all three, and the same options replay the same faults.

mod faults;
mod session;

pub use faults::{Fault, fault};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use colloquy::session::{Host, Lifecycle, LifecycleEvent};
use colloquy::store::Durability;
use serde_json::{Value, json};

use crate::{Load, round, usage};
use session::{Outcome, session};

/// How far the second round's peak memory may go above the first's. The memory a closed round
/// leaves is mostly the allocator's free pages, returned to the system on its own schedule
/// (so the resident size after a round varies by tens of MiB from run to run); the second
/// round reuses them, and only what the first round left in use pushes its peak higher. One
/// session's state left behind (about 35 KB) would be 34 MiB at K = 1,000, a third of the peak.
const MEMORY_GROWTH: f64 = 1.1;
/// Counted (`alloc-count`), how many more bytes the second round may leave in use than the
/// first: the runtime's caches that warm once (a worker's free lists, a registry's capacity;
/// measured flat, 56 KiB after each of five rounds of 1,000 sessions, 84 KiB with a store).
const HEAP_SLACK: i64 = 64 * 1024;

/// What a chaos run does.
#[derive(Clone, Debug)]
pub struct Chaos {
    /// Sessions, turns, the tool's sleep.
    pub load: Load,
    /// The share of turns that get a fault (0 to 1).
    pub rate: f64,
    /// Draws the faults.
    pub seed: u64,
    /// With a store (`--store`, fresh for each round): sessions journal to it, and a fault may
    /// be a crash, resumed from it.
    pub store: Option<(PathBuf, Durability)>,
}

/// Runs `chaos` and reports it (as JSON) with whether every invariant held. The sessions run
/// twice, one round after the other: the memory a closed round leaves is the allocator's and
/// the runtime's warm state, so the second round must leave it where the first did.
pub async fn run(chaos: Chaos) -> (Value, bool) {
    quiet_injected_panics();
    let (_, rss_before, _) = usage();
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let round = match run_round(&chaos).await {
            Ok(round) => round,
            Err(e) => return (json!({"error": e}), false),
        };
        rounds.push(round);
    }
    report(&chaos, &rounds, rss_before)
}

/// Rounds of the sessions in a run.
const ROUNDS: usize = 2;

/// One round: every session run and closed, then what was left.
struct Round {
    /// Its sessions' outcomes, summed (each session's kept only if it failed: what a round
    /// keeps must not count as what it left in use).
    outcome: Outcome,
    wall: f64,
    actors_left: Vec<String>,
    /// Live tasks before the sessions started, and after they closed.
    tasks: (usize, usize),
    /// The process's memory (MiB) at its peak, and once every session closed.
    rss_peak: f64,
    rss_after: f64,
    /// The heap's bytes in use once every session closed, if the binary counts them.
    heap_after: Option<i64>,
}

async fn run_round(chaos: &Chaos) -> Result<Round, String> {
    let store = match &chaos.store {
        Some((path, durability)) => Some(crate::durable::fresh_store(path, *durability)?),
        None => None,
    };
    let host = Host::new().await.map_err(|e| format!("cannot start a host: {e}"))?;
    let lifecycle = host.lifecycle_events_with_limit(usize::MAX >> 1);
    let balance = tokio::spawn(actor_balance(lifecycle));
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    let started = Instant::now();
    let runs: Vec<_> = (0..chaos.load.sessions)
        .map(|index| tokio::spawn(session(chaos.clone(), index, host.clone(), store.clone())))
        .collect();
    let mut outcome = Outcome::default();
    for (index, run) in runs.into_iter().enumerate() {
        outcome.add(run.await.unwrap_or_else(|e| Outcome::broken(index, e.to_string())));
    }
    let wall = started.elapsed().as_secs_f64();
    let (_, _, rss_peak) = usage();
    // Once the host is gone and every session closed, nothing holds the lifecycle records'
    // sender: their stream ends, unless an actor still runs.
    drop(host);
    let actors_left = match tokio::time::timeout(Duration::from_secs(5), balance).await {
        Ok(Ok(balance)) => balance
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .map(|((session, actor), n)| {
                format!("{actor} of {session}: {n} more started than stopped")
            })
            .collect(),
        _ => vec!["the lifecycle records never ended: an actor of a closed session runs on".into()],
    };
    // The sessions' last tasks (a writer, a timer) end as their actors stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tasks = (tasks_before, metrics.num_alive_tasks());
    drop(store);
    let (_, rss_after, _) = usage();
    let heap_after = crate::heap().map(|h| h.live_bytes);
    Ok(Round { outcome, wall, actors_left, tasks, rss_peak, rss_after, heap_after })
}

/// The panics the run injects are expected: they print nothing (any other prints as usual).
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default();
        if !(message == "injected failure" || message.starts_with("chaos: ")) {
            default(info);
        }
    }));
}

/// Started minus stopped actors, per session and actor, from the Host's lifecycle records.
async fn actor_balance(
    mut records: tokio::sync::mpsc::Receiver<LifecycleEvent>,
) -> BTreeMap<(String, String), i64> {
    let mut balance = BTreeMap::new();
    while let Some(record) = records.recv().await {
        let change = match record.what {
            Lifecycle::Started => 1,
            Lifecycle::Stopped | Lifecycle::Failed => -1,
            _ => 0,
        };
        *balance.entry((record.session_id, record.id)).or_insert(0) += change;
    }
    balance
}

fn report(chaos: &Chaos, rounds: &[Round], rss_before: f64) -> (Value, bool) {
    let mut faults: BTreeMap<Fault, u32> = BTreeMap::new();
    let (mut started, mut ended) = (0, 0);
    let outcomes = rounds.iter().map(|r| &r.outcome);
    let failures: Vec<&session::Failure> = outcomes.clone().flat_map(|o| &o.failures).collect();
    for outcome in outcomes {
        for (fault, n) in &outcome.faults {
            *faults.entry(*fault).or_default() += n;
        }
        started += outcome.started;
        ended += outcome.ended;
    }
    let actors_left: Vec<&String> = rounds.iter().flat_map(|r| &r.actors_left).collect();
    let held = |invariant: &str| !failures.iter().any(|f| f.invariant == invariant);
    let after: Vec<f64> = rounds.iter().map(|r| r.rss_after).collect();
    let peaks: Vec<f64> = rounds.iter().map(|r| r.rss_peak).collect();
    let heap: Option<Vec<i64>> = rounds.iter().map(|r| r.heap_after).collect();
    // Counted, the heap in use after a round is exact: the next may leave no more. Else the
    // peaks say it, but not with a store: mimalloc keeps the pages the journals' blocking
    // threads freed, and the peak climbs a tenth a round with the heap flat (counted).
    let memory_back = match &heap {
        Some(heap) => Some(heap.windows(2).all(|w| w[1] <= w[0] + HEAP_SLACK)),
        None if chaos.store.is_some() => None,
        None => Some(peaks.windows(2).all(|w| w[1] <= w[0] * MEMORY_GROWTH)),
    };
    let invariants = json!({
        "calls_end_once": held("calls_end_once"),
        "results_in_history": held("results_in_history"),
        "sessions_answer": held("sessions_answer"),
        "no_actor_left": actors_left.is_empty(),
        "no_task_left": rounds.iter().all(|r| r.tasks.1 <= r.tasks.0),
        "memory_back": memory_back,
    });
    // Held: every invariant that was checked (`memory_back` is null when it was not).
    let all_held =
        invariants.as_object().is_some_and(|o| o.values().all(|v| v == true || v.is_null()));
    let Load { sessions, turns, tool_ms } = chaos.load;
    let store = match &chaos.store {
        Some((path, _)) => format!(" --store {}", path.display()),
        None => String::new(),
    };
    let replay = format!(
        "colloquy-bench --chaos {} --seed {} --sessions {sessions} --turns {turns} --tool-ms {tool_ms}{store}",
        chaos.rate, chaos.seed
    );
    let report = json!({
        "framework": "colloquy",
        "mode": "chaos",
        "sessions": sessions,
        "turns": turns,
        "tool_ms": tool_ms,
        "rate": chaos.rate,
        "seed": chaos.seed,
        "store": chaos.store.as_ref().map(|(path, _)| path.display().to_string()),
        "rounds": rounds.len(),
        "faults_injected": faults.values().sum::<u32>(),
        "faults": faults,
        "calls_started": started,
        "calls_ended": ended,
        "run_wall_s": rounds.iter().map(|r| round(r.wall, 3)).collect::<Vec<_>>(),
        "invariants": invariants,
        "invariants_held": all_held,
        "failures": failures.len(),
        "failures_sample": failures.iter().take(10).collect::<Vec<_>>(),
        "actors_left_sample": actors_left.iter().take(10).collect::<Vec<_>>(),
        "tasks_alive": rounds.iter().map(|r| json!({"before": r.tasks.0, "after": r.tasks.1})).collect::<Vec<_>>(),
        "rss_mib": {
            "before": round(rss_before, 1),
            "peak": peaks.iter().map(|p| round(*p, 1)).collect::<Vec<_>>(),
            "after": after.iter().map(|a| round(*a, 1)).collect::<Vec<_>>(),
        },
        "heap_in_use_kib_after": heap.map(|h| h.iter().map(|b| b / 1024).collect::<Vec<_>>()),
        "replay": replay,
    });
    (report, all_held)
}
