//! A seeded random test of tool controls together (docs/tool-controls.md, decision 70): each
//! case draws the controls of three tools (approval, a cap, a deadline, a heartbeat, retries,
//! memory, a duplicate policy, cancellable or not), a before-call hook or none, and host actions
//! over time on the paused clock (user turns of 1–4 calls, approvals and rejections, cancels,
//! handoffs, interruptions, waits), then closes the session. Every case checks:
//!
//! - every call that started ends exactly once, and nothing ends that did not start;
//! - a call that needs approval is asked exactly once, unless the hook refused it, it was
//!   answered from memory, or it ended before the hook let it go; no other call is asked, and
//!   no body of such a tool runs unapproved;
//! - no waiting call holds its step's reply: `function_tools_executed` comes when the last of
//!   its step's outputs does, and a call waiting for approval or a place is answered the
//!   moment it starts waiting;
//! - a close ends within its `drain_timeout`, and nobody is asked to approve a call after it
//!   began.
//!
//! A failure prints the seed and the drawn case; `COLLOQUY_SEED=<n>` replays case `n` alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy::chat::ChatContext;
use colloquy::events::SessionEvent;
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use colloquy::tools::{DuplicateScope, OnDuplicate, RetryPolicy};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

/// How many cases a run plays (seeds 0 to CASES − 1).
const CASES: u64 = 500;

/// xorshift64*: small and seedable (as in background_random.rs).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Mixed so that neighbouring seeds start far apart; never zero.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// `Some(lo..hi)` with `percent` chance.
    fn maybe(&mut self, percent: u64, lo: u64, hi: u64) -> Option<u64> {
        self.chance(percent).then(|| lo + self.below(hi - lo))
    }
}

/// One tool's controls.
#[derive(Clone, Debug)]
struct Controls {
    approval: bool,
    max_concurrent: Option<usize>,
    deadline_ms: Option<u64>,
    heartbeat_ms: Option<u64>,
    /// Attempts and first backoff.
    retry: Option<(u32, u64)>,
    idempotent: bool,
    on_duplicate: OnDuplicate,
    /// `key` only, or the whole arguments, else the name.
    scope: u8,
    cancellable: bool,
}

impl Controls {
    fn draw(rng: &mut Rng) -> Self {
        let policies =
            [OnDuplicate::Allow, OnDuplicate::Reject, OnDuplicate::Replace, OnDuplicate::Confirm];
        Controls {
            approval: rng.chance(50),
            max_concurrent: rng.maybe(50, 1, 3).map(|n| n as usize),
            deadline_ms: rng.maybe(35, 300, 3_000),
            heartbeat_ms: rng.maybe(25, 300, 2_000),
            retry: rng.chance(30).then(|| (2 + rng.below(2) as u32, 100 + rng.below(900))),
            idempotent: rng.chance(35),
            // Allow half the time: the others refuse most repeats, which hides the rest.
            on_duplicate: policies[[0, 0, 0, 1, 2, 3][rng.below(6) as usize]],
            scope: rng.below(3) as u8,
            cancellable: rng.chance(60),
        }
    }
}

/// What a call's body does, and what the hook answers for it.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
struct Plan {
    /// Drawn from a small pool, so that duplicates and remembered results happen.
    key: u32,
    /// Time the body takes, spread over its updates.
    ms: u64,
    /// Updates before the result.
    updates: u32,
    /// 0: succeeds; 1: every attempt fails; 2: the first attempt fails.
    fail: u32,
    /// Awaits `ctx.cancelled()` and cleans up for 50 ms.
    cooperative: bool,
    /// The hook's answer: 0 run, 1 reject, 2 skip, 3 rewrite (halves `ms`), 4 an error.
    hook: u32,
}

impl Plan {
    fn draw(rng: &mut Rng, key: u32) -> Self {
        Plan {
            key,
            ms: rng.below(2_500),
            updates: [0, 0, 1, 2][rng.below(4) as usize],
            fail: [0, 0, 0, 1, 2][rng.below(5) as usize],
            cooperative: rng.chance(50),
            hook: [0, 0, 0, 1, 2, 3, 4][rng.below(7) as usize],
        }
    }

    fn json(&self) -> String {
        format!(
            r#"{{"key":{},"ms":{},"updates":{},"fail":{},"cooperative":{},"hook":{}}}"#,
            self.key, self.ms, self.updates, self.fail, self.cooperative, self.hook
        )
    }
}

/// A host action.
#[derive(Clone, Debug)]
enum Op {
    /// A user turn whose reply calls these (tool index, plan index), then a wait (ms): with
    /// none, the next action may interrupt the reply before its calls are made.
    Turn(Vec<(usize, usize)>, u64),
    /// Approve the n-th call waiting for approval (modulo how many wait), if any.
    Approve(usize),
    /// Reject the n-th call waiting for approval, if any.
    Reject(usize),
    /// Cancel the n-th running call, if any (refusals are fine).
    Cancel(usize),
    /// Hand off to the other agent.
    Handoff,
    Interrupt,
    Wait(u64),
}

/// One drawn case.
#[derive(Clone, Debug)]
struct Case {
    /// Tools `a` and `b` on both agents, `s` in a session-scoped async toolset.
    tools: [Controls; 3],
    /// A cap on the session-scoped toolset.
    shared_cap: Option<usize>,
    /// The hook's delay, if the session has a hook.
    hook_ms: Option<u64>,
    plans: Vec<Plan>,
    ops: Vec<Op>,
    drain_ms: u64,
    approval_timeout_ms: Option<u64>,
}

const TOOLS: [&str; 3] = ["a", "b", "s"];

impl Case {
    fn draw(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let tools = [Controls::draw(&mut rng), Controls::draw(&mut rng), Controls::draw(&mut rng)];
        let plans = (0..3).map(|i| Plan::draw(&mut rng, i % 2)).collect();
        let mut ops = Vec::new();
        for _ in 0..6 + rng.below(10) {
            ops.push(match rng.below(15) {
                0..=3 => {
                    let n = 1 + rng.below(4) as usize;
                    let calls = (0..n).map(|_| (rng.below(3) as usize, rng.below(3) as usize));
                    let calls = calls.collect();
                    let wait = if rng.chance(80) { 20 + rng.below(800) } else { 0 };
                    Op::Turn(calls, wait)
                }
                4..=6 => Op::Approve(rng.below(4) as usize),
                7 => Op::Reject(rng.below(4) as usize),
                8 => Op::Cancel(rng.below(4) as usize),
                9 => Op::Handoff,
                10 => Op::Interrupt,
                _ => {
                    let longest = [100, 1_000, 4_000][rng.below(3) as usize];
                    Op::Wait(rng.below(longest))
                }
            });
        }
        Case {
            tools,
            shared_cap: rng.maybe(40, 1, 3).map(|n| n as usize),
            hook_ms: rng.chance(60).then(|| [0, 0, 50, 400, 1_500][rng.below(5) as usize]),
            plans,
            ops,
            drain_ms: 1_000 + rng.below(3_000),
            approval_timeout_ms: rng.maybe(50, 500, 5_000),
        }
    }
}

/// What the bodies and the hook saw (times in virtual ms since the session started).
#[derive(Default)]
struct Log {
    /// Call ids whose body started.
    bodies: BTreeSet<String>,
    /// Attempts per call id.
    attempts: BTreeMap<String, u32>,
    /// The hook's answers: call id → (let it go on, remembered, when).
    hooked: BTreeMap<String, (bool, bool, u64)>,
}

type Shared = Arc<Mutex<Log>>;

fn since(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

fn tool(name: &'static str, c: &Controls, log: &Shared) -> FunctionTool {
    let log = Arc::clone(log);
    let mut tool = FunctionTool::new(name, "Works.", move |ctx: RunContext, plan: Plan| {
        let log = Arc::clone(&log);
        async move {
            let attempt = {
                let mut log = log.lock().unwrap();
                let id = ctx.call_id().to_string();
                log.bodies.insert(id.clone());
                let n = log.attempts.entry(id).or_default();
                *n += 1;
                *n
            };
            let slice = plan.ms / u64::from(plan.updates + 1);
            for i in 0..plan.updates {
                tokio::time::sleep(Duration::from_millis(slice)).await;
                ctx.update(format!("step {i}")).await?;
            }
            if plan.cooperative {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(slice)) => {}
                    () = ctx.cancelled() => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        return Ok("cleaned up".to_string());
                    }
                }
            } else {
                tokio::time::sleep(Duration::from_millis(slice)).await;
            }
            match (plan.fail, attempt) {
                (1, _) | (2, 1) => Err(ToolError::new(format!("failed attempt {attempt}"))),
                _ => Ok(format!("done {}", plan.key)),
            }
        }
    });
    if c.approval {
        tool = tool.requires_approval();
    }
    if let Some(n) = c.max_concurrent {
        tool = tool.max_concurrent(n);
    }
    if let Some(ms) = c.deadline_ms {
        tool = tool.deadline(Duration::from_millis(ms));
    }
    if let Some(ms) = c.heartbeat_ms {
        tool = tool.heartbeat(Duration::from_millis(ms));
    }
    if let Some((attempts, backoff)) = c.retry {
        tool = tool.retry(RetryPolicy::new(attempts, Duration::from_millis(backoff)));
    }
    if c.idempotent {
        tool = tool.idempotent(Duration::from_secs(600));
    }
    if c.cancellable {
        tool = tool.cancellable();
    }
    let scope = match c.scope {
        0 => DuplicateScope::Name,
        1 => DuplicateScope::args(["key"]),
        _ => DuplicateScope::NameAndArgs,
    };
    tool.on_duplicate(c.on_duplicate, scope)
}

fn agent(id: &str, case: &Case, log: &Shared) -> Agent {
    Agent::new(id, "inst").tool(tool(TOOLS[0], &case.tools[0], log)).tool(tool(
        TOOLS[1],
        &case.tools[1],
        log,
    ))
}

/// Awaits `f`, failing the case if the session stalls (a minute of virtual time).
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .map_err(|_| format!("{what} stalled for a minute"))
}

/// Plays `case` and checks its invariants.
async fn play(case: &Case) -> Result<Tally, String> {
    let origin = Instant::now();
    let log: Shared = Arc::default();
    let count = case.ops.iter().filter(|op| matches!(op, Op::Turn(..))).count();
    let script: Vec<Vec<(String, &'static str, String)>> =
        (0..count).map(|t| calls_of(case, t)).collect();
    let llm = ScriptedLlm::new([]).with_fallback(move |_, request| {
        let last =
            request.items.items().last().and_then(|i| i.as_message()).map(|m| m.text.clone());
        match (request.kind, last) {
            (RequestKind::UserTurn, Some(text)) => {
                let t: usize = text.trim_start_matches("turn ").parse().unwrap_or(0);
                let calls = script[t]
                    .iter()
                    .map(|(id, name, args)| ScriptedCall::new(id.clone(), *name, args.clone()));
                ScriptedResponse::calls(calls)
            }
            _ => ScriptedResponse::text("ok"),
        }
    });
    let mut shared = Toolset::new_async("shared").tool(tool(TOOLS[2], &case.tools[2], &log));
    if let Some(n) = case.shared_cap {
        shared = shared.max_concurrent(n);
    }
    let drain = Duration::from_millis(case.drain_ms);
    let mut builder = Session::builder()
        .llm(llm)
        .toolset(shared)
        .cancel_grace(Duration::from_millis(100))
        .drain_timeout(Some(drain))
        .approval_timeout(case.approval_timeout_ms.map(Duration::from_millis));
    if let Some(delay) = case.hook_ms {
        let log = Arc::clone(&log);
        builder = builder.before_tool_call(move |call: PendingToolCall| {
            let log = Arc::clone(&log);
            async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let plan: u64 = call.arguments["hook"].as_u64().unwrap_or(0);
                let goes_on = matches!(plan, 0 | 3);
                let at = since(origin);
                log.lock().unwrap().hooked.insert(call.call_id, (goes_on, call.remembered, at));
                match plan {
                    1 => Ok(BeforeCall::Reject("policy".into())),
                    2 => Ok(BeforeCall::Skip("skipped".into())),
                    3 => {
                        let mut arguments = call.arguments;
                        let ms = arguments["ms"].as_u64().unwrap_or(0) / 2;
                        arguments.insert("ms".into(), ms.into());
                        Ok(BeforeCall::Rewrite(arguments))
                    }
                    4 => Err(ToolError::new("audit log down")),
                    _ => Ok(BeforeCall::Run),
                }
            }
        });
    }
    let mut events = builder.subscribe();
    let session = builder.start(agent("A", case, &log)).await.map_err(|e| e.to_string())?;
    let (mut turn, mut current) = (0, "A");
    for op in &case.ops {
        match op {
            Op::Turn(_, wait) => {
                bounded("a user turn", session.user_turn(format!("turn {turn}")))
                    .await?
                    .map_err(|e| e.to_string())?;
                turn += 1;
                tokio::time::sleep(Duration::from_millis(*wait)).await;
            }
            Op::Approve(n) | Op::Reject(n) => {
                let running = bounded("running calls", session.running_tool_calls()).await?;
                let waiting: Vec<String> = running
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| c.awaiting_approval)
                    .map(|c| c.call_id)
                    .collect();
                if let Some(id) = waiting.get(n % waiting.len().max(1)) {
                    // Refusals (the call ended meanwhile) are fine.
                    let _ = match op {
                        Op::Approve(_) => bounded("approve", session.approve(id.clone())).await?,
                        _ => bounded("reject", session.reject(id.clone(), "no")).await?,
                    };
                }
            }
            Op::Cancel(n) => {
                let running = bounded("running calls", session.running_tool_calls()).await?;
                let running = running.unwrap_or_default();
                if let Some(call) = running.get(n % running.len().max(1)) {
                    let _ =
                        bounded("cancel", session.cancel_tool_call(call.call_id.clone())).await?;
                }
            }
            Op::Handoff => {
                current = if current == "A" { "B" } else { "A" };
                let next = agent(current, case, &log);
                let _ = bounded("a handoff", session.update_agent(next)).await?;
            }
            Op::Interrupt => {
                let _ = bounded("an interrupt", session.interrupt()).await?;
            }
            Op::Wait(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
    }
    let closing = Instant::now();
    let closed = bounded("the close", session.close_with_reason("close"))
        .await?
        .map_err(|e| e.to_string())?;
    let took = closing.elapsed();
    if took > drain {
        return Err(format!("the close took {took:?}, past its drain timeout {drain:?}"));
    }
    let mut seen = Vec::new();
    while let Some(e) = events.recv().await {
        seen.push(e);
    }
    // Nobody is left to approve a call once the close began (decision 58).
    let close_ms = closing.duration_since(origin).as_millis() as u64;
    let late = seen
        .iter()
        .find(|e| matches!(e.kind, EventKind::ToolApprovalRequested { .. }) && e.at_ms > close_ms);
    if let Some(e) = late {
        return Err(format!(
            "asked for approval at {} ms, after the close began at {close_ms} ms",
            e.at_ms
        ));
    }
    let log = log.lock().unwrap();
    check(case, &seen, &closed.history, &log)?;
    Ok(tally(&seen, &closed.history))
}

/// What a case exercised: how many calls were asked about, approved, rejected, queued,
/// remembered, retried, timed out, cancelled, refused by the hook, aborted by a drain, and
/// how many handoffs happened.
type Tally = BTreeMap<&'static str, u64>;

fn tally(events: &[SessionEvent], history: &ChatContext) -> Tally {
    let mut tally = Tally::new();
    for e in events {
        let what = match &e.kind {
            EventKind::ToolApprovalRequested { .. } => "asked",
            EventKind::ToolCallApproved { .. } => "approved",
            EventKind::ToolCallRetry { .. } => "retried",
            EventKind::AgentHandoff { old_agent: Some(_), .. } => "handed off",
            EventKind::ToolCallEnded { cached: true, .. } => "remembered",
            EventKind::ToolCallEnded { message: Some(m), .. } if m == "drain timeout" => {
                "aborted by a drain"
            }
            EventKind::ToolCallEnded { message: Some(m), .. }
                if m.starts_with("The host rejected") =>
            {
                "refused by the hook"
            }
            EventKind::ToolCallEnded { status, .. } => match status.as_str() {
                "rejected" => "rejected",
                "timed_out" => "timed out",
                "cancelled" => "cancelled",
                _ => continue,
            },
            _ => continue,
        };
        *tally.entry(what).or_default() += 1;
    }
    let outputs = history.items().iter().filter_map(|i| i.as_function_call_output());
    let queued = outputs.filter(|o| o.output.contains("waits for other calls of its kind"));
    *tally.entry("queued").or_default() += queued.count() as u64;
    tally
}

/// The calls of turn `t`: (call id, tool name, arguments).
fn calls_of(case: &Case, t: usize) -> Vec<(String, &'static str, String)> {
    let mut turns = case.ops.iter().filter_map(|op| match op {
        Op::Turn(calls, _) => Some(calls),
        _ => None,
    });
    let calls = turns.nth(t).map(Vec::as_slice).unwrap_or_default();
    calls
        .iter()
        .enumerate()
        .map(|(k, (tool, plan))| (format!("t{t}c{k}"), TOOLS[*tool], case.plans[*plan].json()))
        .collect()
}

/// One started call, as the events tell it.
#[derive(Debug, Default)]
struct Seen {
    name: String,
    started_ms: u64,
    /// (at_ms, status, cached, message)
    ends: Vec<(u64, String, bool, String)>,
    asked_ms: Vec<u64>,
    approved: bool,
}

fn check(
    case: &Case,
    events: &[SessionEvent],
    history: &ChatContext,
    log: &Log,
) -> Result<(), String> {
    let mut calls: BTreeMap<String, Seen> = BTreeMap::new();
    let mut executed: Vec<(u64, Vec<String>)> = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::ToolCallStarted { call_id, name } => {
                let seen = calls.entry(call_id.clone()).or_default();
                if !seen.name.is_empty() {
                    return Err(format!("{call_id} started twice"));
                }
                (seen.name, seen.started_ms) = (name.clone(), e.at_ms);
            }
            EventKind::ToolCallEnded { call_id, status, cached, message, .. } => {
                let Some(seen) = calls.get_mut(call_id) else {
                    return Err(format!("{call_id} ended without having started"));
                };
                let message = message.clone().unwrap_or_default();
                seen.ends.push((e.at_ms, status.as_str().to_string(), *cached, message));
            }
            EventKind::ToolApprovalRequested { call_id, .. } => {
                let Some(seen) = calls.get_mut(call_id) else {
                    return Err(format!("{call_id} was put to the approver before it started"));
                };
                seen.asked_ms.push(e.at_ms);
            }
            EventKind::ToolCallApproved { call_id } => {
                if let Some(seen) = calls.get_mut(call_id) {
                    seen.approved = true;
                }
            }
            EventKind::FunctionToolsExecuted { call_ids } => {
                executed.push((e.at_ms, call_ids.clone()));
            }
            _ => {}
        }
    }
    let tool_index = |name: &str| TOOLS.iter().position(|t| *t == name);
    for (id, seen) in &calls {
        // Every call that started ends exactly once.
        if seen.ends.len() != 1 {
            return Err(format!("{id} ended {} times: {:?}", seen.ends.len(), seen.ends));
        }
        let (ended_ms, status, cached, message) = &seen.ends[0];
        let Some(index) = tool_index(&seen.name) else { continue };
        let controls = &case.tools[index];
        let hooked = log.hooked.get(id);
        // A hook that is set sees every call that started, unless the call ended first.
        if case.hook_ms.is_some() && hooked.is_none() && !ended_early(status, message) {
            return Err(format!("the hook missed {id}, which ended {status} {message:?}"));
        }
        if seen.asked_ms.len() > 1 {
            return Err(format!("{id} was put to the approver {} times", seen.asked_ms.len()));
        }
        let asked = !seen.asked_ms.is_empty();
        if asked && !controls.approval {
            return Err(format!("{id} was put to the approver, but `{}` needs none", seen.name));
        }
        if controls.approval {
            let remembered = *cached || hooked.is_some_and(|h| h.1);
            let let_go = match (case.hook_ms, hooked) {
                (None, _) => Some(seen.started_ms),
                (Some(_), Some((true, _, at))) => Some(*at),
                (Some(_), _) => None,
            };
            if remembered || let_go.is_none() {
                if asked {
                    return Err(format!(
                        "{id} was put to the approver though the hook refused it or it was remembered"
                    ));
                }
            } else if !asked {
                // Only a call that ended before the hook's answer reached its toolset is spared.
                // And one a drain (close, handoff) reached while its hook decided: it is
                // rejected as the hook lets it go, nobody being left to approve it.
                let drained = status == "rejected" && message.ends_with("before approval");
                let spared = let_go.is_some_and(|at| *ended_ms <= at)
                    && (ended_early(status, message) || drained);
                if !spared {
                    return Err(format!(
                        "{id} needed approval and nobody was asked (it ended {status} {message:?} at {ended_ms})"
                    ));
                }
            }
            if log.bodies.contains(id) && !seen.approved {
                return Err(format!("the body of {id} ran without an approval"));
            }
        }
        // Rejected unasked: only by a drain that reached it while its hook decided.
        if status == "rejected" && !asked && !message.ends_with("before approval") {
            return Err(format!("{id} ended rejected without being asked"));
        }
        if *cached && !controls.idempotent {
            return Err(format!(
                "{id} was answered from memory, but `{}` remembers nothing",
                seen.name
            ));
        }
    }
    // No waiting call holds its step's reply.
    let outputs: BTreeMap<&str, (u64, &str)> = history
        .items()
        .iter()
        .filter_map(|i| i.as_function_call_output())
        .map(|o| (o.call_id.as_str(), (o.created_at.as_millis(), o.output.as_str())))
        .collect();
    for (at, ids) in &executed {
        let answered: Vec<u64> =
            ids.iter().filter_map(|id| outputs.get(id.as_str())).map(|o| o.0).collect();
        if answered.len() == ids.len() && answered.iter().max() != Some(at) {
            return Err(format!(
                "function_tools_executed {ids:?} at {at} ms, its outputs at {answered:?}"
            ));
        }
        for id in ids {
            let (Some(&(answered_ms, text)), Some(seen)) =
                (outputs.get(id.as_str()), calls.get(id))
            else {
                continue;
            };
            let waits_since = if text.contains("needs approval before it runs") {
                seen.asked_ms.first().copied()
            } else if text.contains("waits for other calls of its kind") {
                match case.hook_ms {
                    Some(_) => log.hooked.get(id).map(|h| h.2),
                    None => Some(seen.started_ms),
                }
            } else {
                continue;
            };
            if waits_since != Some(answered_ms) {
                return Err(format!(
                    "{id} waited from {waits_since:?} ms but was answered at {answered_ms} ms"
                ));
            }
        }
    }
    Ok(())
}

/// Whether a call was ended by someone else before its body's end: a cancel, a time-out, or
/// a drain that ran out of time.
fn ended_early(status: &str, message: &str) -> bool {
    matches!(status, "cancelled" | "timed_out") || message == "drain timeout"
}

#[test]
fn random_controls_and_host_actions_keep_every_call_s_promises() {
    let only: Option<u64> = std::env::var("COLLOQUY_SEED").ok().and_then(|s| s.parse().ok());
    let seeds: Vec<u64> = match only {
        Some(seed) => vec![seed],
        None => (0..CASES).collect(),
    };
    let mut total = Tally::new();
    for seed in seeds {
        let case = Case::draw(seed);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        match runtime.block_on(play(&case)) {
            Ok(tally) => {
                for (what, n) in tally {
                    *total.entry(what).or_default() += n;
                }
            }
            Err(why) => panic!("COLLOQUY_SEED={seed}: {why}\n{case:#?}"),
        }
    }
    // The cases reached every control: a generator that drew none of one would pass vacuously.
    println!("{total:?}");
    if only.is_none() {
        for what in [
            "asked",
            "approved",
            "rejected",
            "queued",
            "remembered",
            "retried",
            "timed out",
            "cancelled",
            "refused by the hook",
            "aborted by a drain",
            "handed off",
        ] {
            assert!(total.get(what).copied().unwrap_or(0) > 0, "no case had a call {what}");
        }
    }
}
