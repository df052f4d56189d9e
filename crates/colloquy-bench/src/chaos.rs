//! Chaos under load (`colloquy-bench --chaos RATE`, docs/benchmarks.md#chaos): the workload's
//! sessions run their turns while faults are injected into a share of them — actors killed
//! (the call's ToolCall, its Toolset, the Activity), the model's stream cut, failed or slow to
//! start, the tool panicking or running past its deadline — then the invariants are checked:
//!
//! - every call started ended exactly once;
//! - every call that finished (`done`) has its result in its session's history;
//! - every session still answers a new turn, with no fault;
//! - no actor is left once the sessions are closed (the Host's lifecycle records balance) and
//!   no task (tokio's count of live tasks is back where it was);
//! - the process's memory is back to its baseline: the sessions run twice, and the second
//!   round's peak is within a tenth of the first's (what a round left in use would add to it).
//!
//! Which turn gets which fault is a pure function of the seed, the session's number and the
//! turn's ([`fault`]): a failure names all three, and the same options replay the same faults.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use colloquy::events::{EventFilter, EventType, ToolCallStatus};
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use colloquy::session::{Host, Lifecycle, LifecycleEvent};
use serde::Serialize;
use serde_json::{Value, json};

use crate::workload;
use crate::{Load, round, usage};

/// The longest a turn (or the final turn's answer) may take before the session is reported
/// stuck: far above any fault's own delay, it only keeps a broken run finite.
const STUCK: Duration = Duration::from_secs(60);
/// The tool's deadline above its own sleep: a `tool_timeout` runs past it.
const DEADLINE_ROOM: Duration = Duration::from_millis(300);
/// How long a body that killed an actor of its own call goes on, so the kill lands mid-call.
const AFTER_A_KILL: Duration = Duration::from_millis(20);
/// The model's first token, when it is slow.
const SLOW_FIRST_TOKEN: Duration = Duration::from_millis(200);
/// How far the second round's peak memory may go above the first's. The memory a closed round
/// leaves is mostly the allocator's free pages, returned to the system on its own schedule
/// (so the resident size after a round varies by tens of MiB from run to run); the second
/// round reuses them, and only what the first round left in use pushes its peak higher. One
/// session's state left behind (about 35 KB) would be 34 MiB at K = 1,000, a third of the peak.
const MEMORY_GROWTH: f64 = 1.1;

/// A fault injected into one turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The call's ToolCall actor panics while the body runs.
    KillToolCall,
    /// The call's Toolset actor panics while the body runs.
    KillToolset,
    /// The Activity panics while the call runs (the Session restarts it).
    KillActivity,
    /// The model's stream breaks after some text.
    LlmCut,
    /// The model's request fails.
    LlmError,
    /// The model's first token comes late.
    LlmSlow,
    /// The tool's body panics.
    ToolPanic,
    /// The tool's body runs past its deadline.
    ToolTimeout,
}

const FAULTS: [Fault; 8] = [
    Fault::KillToolCall,
    Fault::KillToolset,
    Fault::KillActivity,
    Fault::LlmCut,
    Fault::LlmError,
    Fault::LlmSlow,
    Fault::ToolPanic,
    Fault::ToolTimeout,
];

/// The fault of session `session`'s turn `turn`, if it gets one: each turn does with
/// probability `rate`, drawn from the seed (splitmix64 of the three).
pub fn fault(seed: u64, rate: f64, session: usize, turn: u32) -> Option<Fault> {
    let draw = splitmix(seed ^ splitmix((session as u64) << 32 | u64::from(turn)));
    let unit = (draw >> 11) as f64 / (1_u64 << 53) as f64;
    (unit < rate).then(|| FAULTS[(splitmix(draw) % FAULTS.len() as u64) as usize])
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One session's faults, by turn, shared by its tool and its model.
struct Plan {
    faults: Vec<Option<Fault>>,
    /// Whether the model's fault of each turn fired (once: a retried request goes through).
    fired: Vec<AtomicBool>,
}

impl Plan {
    fn new(faults: Vec<Option<Fault>>) -> Arc<Self> {
        let fired = faults.iter().map(|_| AtomicBool::new(false)).collect();
        Arc::new(Self { faults, fired })
    }

    fn of(&self, turn: u32) -> Option<Fault> {
        self.faults.get(turn as usize).copied().flatten()
    }

    /// The model's fault of `turn`, the first time it is asked.
    fn model_fault(&self, turn: u32) -> Option<Fault> {
        let fault = self.of(turn).filter(|f| matches!(f, Fault::LlmCut | Fault::LlmError))?;
        let fired = self.fired.get(turn as usize)?;
        (!fired.swap(true, Ordering::SeqCst)).then_some(fault)
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Task {
    turn: u32,
}

/// The workload's agent, its tool doing what `plan` says on a faulty turn.
fn agent(tool_ms: u64, plan: Arc<Plan>) -> Agent {
    let deadline = Duration::from_millis(tool_ms) + DEADLINE_ROOM;
    let tool = FunctionTool::new(
        "progress_task",
        "Works in two steps.",
        move |ctx: RunContext, t: Task| {
            let fault = plan.of(t.turn);
            async move {
                ctx.update("step 1 of 2").await?;
                match fault {
                    Some(Fault::ToolPanic) => panic!("chaos: the tool panics"),
                    Some(Fault::ToolTimeout) => tokio::time::sleep(deadline * 2).await,
                    Some(
                        kill @ (Fault::KillToolCall | Fault::KillToolset | Fault::KillActivity),
                    ) => {
                        let target = match kill {
                            Fault::KillToolCall => format!("tool_call:{}", ctx.call_id()),
                            Fault::KillToolset => format!("toolset:agent:{}", workload::AGENT),
                            _ => format!("activity:{}", workload::AGENT),
                        };
                        if let Some(session) = ctx.session() {
                            session.inject_failure(&target);
                        }
                        tokio::time::sleep(AFTER_A_KILL).await;
                    }
                    _ if tool_ms > 0 => tokio::time::sleep(Duration::from_millis(tool_ms)).await,
                    _ => {}
                }
                ctx.update("step 2 of 2").await?;
                Ok::<_, ToolError>(Json(json!({"turn": t.turn, "ok": true})))
            }
        },
    )
    .deadline(deadline);
    Agent::new(workload::AGENT, "Run tasks.").tool(tool)
}

/// The workload's model, its stream failing or slow on a faulty turn.
fn llm(plan: Arc<Plan>) -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(move |_, request| {
        let user = request
            .items
            .items()
            .last()
            .and_then(|i| i.as_message())
            .filter(|m| m.role == Role::User)
            .and_then(|m| m.text.trim_start_matches("turn ").parse::<u32>().ok());
        let Some(turn) = user.filter(|_| request.kind == RequestKind::UserTurn) else {
            return ScriptedResponse::text("noted").with_latency(Duration::ZERO);
        };
        match plan.model_fault(turn) {
            Some(Fault::LlmCut) => ScriptedResponse::cut("Working on it", "chaos: stream cut"),
            Some(_) => ScriptedResponse::error("chaos: the model failed"),
            None => {
                let call = ScriptedCall::new(
                    format!("t{turn}"),
                    "progress_task",
                    format!(r#"{{"turn":{turn}}}"#),
                );
                let latency = if plan.of(turn) == Some(Fault::LlmSlow) {
                    SLOW_FIRST_TOKEN
                } else {
                    Duration::ZERO
                };
                ScriptedResponse::calls([call]).with_latency(latency)
            }
        }
    })
}

/// What a chaos run does.
#[derive(Clone, Copy, Debug)]
pub struct Chaos {
    /// Sessions, turns, the tool's sleep.
    pub load: Load,
    /// The share of turns that get a fault (0 to 1).
    pub rate: f64,
    /// Draws the faults.
    pub seed: u64,
}

/// One broken invariant, with what replays it: the session's number and its faults (the run's
/// seed and options are in the report's `replay`).
#[derive(Clone, Debug, Serialize)]
struct Failure {
    invariant: &'static str,
    session: usize,
    call: Option<String>,
    what: String,
    /// The session's faults, by turn.
    faults: Vec<(u32, Fault)>,
}

/// What one session showed.
#[derive(Default)]
struct Outcome {
    faults: BTreeMap<Fault, u32>,
    started: u32,
    ended: u32,
    failures: Vec<Failure>,
}

/// Runs the session numbered `index`: its turns, faults and all, then one more without, then
/// the checks of its events and history.
async fn session(chaos: Chaos, index: usize, host: Host) -> Outcome {
    let turns = chaos.load.turns;
    let faults: Vec<Option<Fault>> = (0..=turns)
        .map(|turn| (turn < turns).then(|| fault(chaos.seed, chaos.rate, index, turn)).flatten())
        .collect();
    let plan = Plan::new(faults.clone());
    let mut outcome = Outcome::default();
    for fault in faults.iter().flatten() {
        *outcome.faults.entry(*fault).or_default() += 1;
    }
    let by_turn: Vec<(u32, Fault)> =
        (0..).zip(&faults).filter_map(|(turn, fault)| Some((turn, (*fault)?))).collect();
    let fail = |invariant, call: Option<&str>, what: String| Failure {
        invariant,
        session: index,
        call: call.map(str::to_owned),
        what,
        faults: by_turn.clone(),
    };
    let mut builder =
        Session::builder().host(&host).llm(llm(Arc::clone(&plan))).user_away_timeout(None);
    let filter =
        EventFilter::tool_execution().with(EventType::Error).with(EventType::ToolReplyUpdated);
    let mut events = builder.subscribe_to(filter);
    let session = match builder.start(agent(chaos.load.tool_ms, plan)).await {
        Ok(session) => session,
        Err(e) => {
            outcome.failures.push(fail("sessions_answer", None, format!("start: {e}")));
            return outcome;
        }
    };
    let mut seen = Vec::new();
    for turn in 0..turns {
        let settled = async {
            session.user_turn(workload::user_text(turn)).await?;
            session.wait_for_quiet().await?;
            session.wait_for_idle().await
        };
        match tokio::time::timeout(STUCK, settled).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                outcome.failures.push(fail("sessions_answer", None, format!("turn {turn}: {e}")));
            }
            Err(_) => {
                outcome.failures.push(fail("sessions_answer", None, format!("turn {turn} stuck")));
            }
        }
    }
    // A new turn, no fault: answered, its result delivered by a reply.
    let final_id = workload::final_id(turns);
    let answered = async {
        session.user_turn(workload::user_text(turns)).await.ok()?;
        while let Some(event) = events.recv().await {
            let done = workload::delivers(&event, &final_id);
            seen.push(event);
            if done {
                return Some(());
            }
        }
        None
    };
    if tokio::time::timeout(STUCK, answered).await.ok().flatten().is_none() {
        let what = format!("the turn after the faults was not answered ({final_id})");
        outcome.failures.push(fail("sessions_answer", None, what));
    }
    let history = match session.close_with_reason("close").await {
        Ok(closed) => closed.history.items().iter().map(|i| (**i).clone()).collect(),
        Err(e) => {
            outcome.failures.push(fail("sessions_answer", None, format!("close: {e}")));
            Vec::new()
        }
    };
    while let Some(event) = events.recv().await {
        seen.push(event);
    }
    // Each call: its starts and ends, and whether it finished.
    let mut calls: BTreeMap<String, (u32, u32, bool)> = BTreeMap::new();
    for event in &seen {
        match &event.kind {
            EventKind::ToolCallStarted { call_id, .. } => {
                calls.entry(call_id.clone()).or_default().0 += 1;
            }
            EventKind::ToolCallEnded { call_id, status, .. } => {
                let call = calls.entry(call_id.clone()).or_default();
                call.1 += 1;
                call.2 |= *status == ToolCallStatus::Done;
            }
            _ => {}
        }
    }
    for (call_id, (started, ended, done)) in &calls {
        outcome.started += started;
        outcome.ended += ended;
        if *started != 1 || *ended != 1 {
            let what = format!("started {started} times, ended {ended} times");
            outcome.failures.push(fail("calls_end_once", Some(call_id), what));
        }
        let final_pair = format!("{call_id}_final");
        let in_history = history.iter().any(|item| {
            item.as_function_call_output()
                .is_some_and(|o| !o.is_error && (o.call_id == *call_id || o.call_id == final_pair))
        });
        if *done && !in_history {
            let what = "finished, its result not in the history".to_owned();
            outcome.failures.push(fail("results_in_history", Some(call_id), what));
        }
    }
    outcome
}

/// Runs `chaos` and reports it (as JSON) with whether every invariant held. The sessions run
/// twice, one round after the other: the memory a closed round leaves is the allocator's and
/// the runtime's warm state, so the second round must leave it where the first did.
pub async fn run(chaos: Chaos) -> (Value, bool) {
    quiet_injected_panics();
    let (_, rss_before, _) = usage();
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let round = match run_round(chaos).await {
            Ok(round) => round,
            Err(e) => return (json!({"error": e}), false),
        };
        rounds.push(round);
    }
    report(chaos, &rounds, rss_before)
}

/// Rounds of the sessions in a run.
const ROUNDS: usize = 2;

/// One round: every session run and closed, then what was left.
struct Round {
    outcomes: Vec<Outcome>,
    wall: f64,
    actors_left: Vec<String>,
    /// Live tasks before the sessions started, and after they closed.
    tasks: (usize, usize),
    /// The process's memory (MiB) at its peak, and once every session closed.
    rss_peak: f64,
    rss_after: f64,
}

async fn run_round(chaos: Chaos) -> Result<Round, String> {
    let host = Host::new().await.map_err(|e| format!("cannot start a host: {e}"))?;
    let lifecycle = host.lifecycle_events_with_limit(usize::MAX >> 1);
    let balance = tokio::spawn(actor_balance(lifecycle));
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    let started = Instant::now();
    let runs: Vec<_> = (0..chaos.load.sessions)
        .map(|index| tokio::spawn(session(chaos, index, host.clone())))
        .collect();
    let mut outcomes = Vec::with_capacity(runs.len());
    for (index, run) in runs.into_iter().enumerate() {
        outcomes.push(run.await.unwrap_or_else(|e| Outcome {
            failures: vec![Failure {
                invariant: "sessions_answer",
                session: index,
                call: None,
                what: e.to_string(),
                faults: Vec::new(),
            }],
            ..Outcome::default()
        }));
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
    let (_, rss_after, _) = usage();
    Ok(Round { outcomes, wall, actors_left, tasks, rss_peak, rss_after })
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

fn report(chaos: Chaos, rounds: &[Round], rss_before: f64) -> (Value, bool) {
    let mut faults: BTreeMap<Fault, u32> = BTreeMap::new();
    let (mut started, mut ended) = (0, 0);
    let outcomes = rounds.iter().flat_map(|r| &r.outcomes);
    let failures: Vec<&Failure> = outcomes.clone().flat_map(|o| &o.failures).collect();
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
    let memory_back = peaks.windows(2).all(|w| w[1] <= w[0] * MEMORY_GROWTH);
    let invariants = json!({
        "calls_end_once": held("calls_end_once"),
        "results_in_history": held("results_in_history"),
        "sessions_answer": held("sessions_answer"),
        "no_actor_left": actors_left.is_empty(),
        "no_task_left": rounds.iter().all(|r| r.tasks.1 <= r.tasks.0),
        "memory_back": memory_back,
    });
    let all_held = invariants.as_object().is_some_and(|o| o.values().all(|v| v == true));
    let Load { sessions, turns, tool_ms } = chaos.load;
    let replay = format!(
        "colloquy-bench --chaos {} --seed {} --sessions {sessions} --turns {turns} --tool-ms {tool_ms}",
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
        "replay": replay,
    });
    (report, all_held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_drawn_from_the_seed_at_the_rate() {
        let drawn: Vec<Option<Fault>> = (0..10_000).map(|n| fault(7, 0.1, n, 3)).collect();
        let again: Vec<Option<Fault>> = (0..10_000).map(|n| fault(7, 0.1, n, 3)).collect();
        assert_eq!(drawn, again, "the same seed replays the same faults");
        let share = drawn.iter().flatten().count() as f64 / drawn.len() as f64;
        assert!((0.08..0.12).contains(&share), "{share}");
        for kind in FAULTS {
            assert!(drawn.contains(&Some(kind)), "{kind:?} is drawn");
        }
        assert!((0..1_000).all(|n| fault(7, 0.0, n, 0).is_none()));
        assert!((0..1_000).all(|n| fault(7, 1.0, n, 0).is_some()));
        assert_ne!(drawn, (0..10_000).map(|n| fault(8, 0.1, n, 3)).collect::<Vec<_>>());
    }
}
