//! The faults a chaos run injects, which turn gets which (drawn from the seed), and the
//! workload's agent and model that carry them out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

use crate::workload;

/// The tool's deadline above its own sleep: a `tool_timeout` runs past it.
const DEADLINE_ROOM: Duration = Duration::from_millis(300);
/// How long a body that killed an actor of its own call goes on, so the kill lands mid-call.
const AFTER_A_KILL: Duration = Duration::from_millis(20);
/// The model's first token, when it is slow.
const SLOW_FIRST_TOKEN: Duration = Duration::from_millis(200);
/// How long the body of a call a crash cuts off runs, once it has said it started.
const CUT_OFF_BODY: Duration = Duration::from_millis(200);

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
    /// With a store: the whole session dies while the call runs (its Session actor panics, as
    /// a killed process's would stop), and is resumed from the store.
    Crash,
}

const FAULTS: [Fault; 9] = [
    Fault::KillToolCall,
    Fault::KillToolset,
    Fault::KillActivity,
    Fault::LlmCut,
    Fault::LlmError,
    Fault::LlmSlow,
    Fault::ToolPanic,
    Fault::ToolTimeout,
    Fault::Crash,
];

/// The fault of session `session`'s turn `turn`, if it gets one: each turn does with
/// probability `rate`, drawn from the seed (splitmix64 of the three); `crash` only with a
/// store (`with_store`).
pub fn fault(seed: u64, rate: f64, session: usize, turn: u32, with_store: bool) -> Option<Fault> {
    let draw = splitmix(seed ^ splitmix((session as u64) << 32 | u64::from(turn)));
    let unit = (draw >> 11) as f64 / (1_u64 << 53) as f64;
    let kinds = if with_store { FAULTS.len() } else { FAULTS.len() - 1 };
    (unit < rate).then(|| FAULTS[(splitmix(draw) % kinds as u64) as usize])
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One session's faults, by turn, shared by its tool, its model and its driver.
pub(super) struct Plan {
    faults: Vec<Option<Fault>>,
    /// Whether the model's fault of each turn fired (once: a retried request goes through).
    fired: Vec<AtomicBool>,
    /// Told when the body of a turn that crashes has begun.
    begun: Vec<Notify>,
}

impl Plan {
    pub(super) fn new(faults: Vec<Option<Fault>>) -> Arc<Self> {
        let n = faults.len();
        let fired = (0..n).map(|_| AtomicBool::new(false)).collect();
        let begun = (0..n).map(|_| Notify::new()).collect();
        Arc::new(Self { faults, fired, begun })
    }

    pub(super) fn of(&self, turn: u32) -> Option<Fault> {
        self.faults.get(turn as usize).copied().flatten()
    }

    /// Waits until the body of turn `turn`'s call has begun (a turn that crashes).
    pub(super) async fn begun(&self, turn: u32) {
        if let Some(begun) = self.begun.get(turn as usize) {
            begun.notified().await;
        }
    }

    /// The model's fault of `turn`, the first time it is asked.
    fn model_fault(&self, turn: u32) -> Option<Fault> {
        let fault = self.of(turn).filter(|f| matches!(f, Fault::LlmCut | Fault::LlmError))?;
        let fired = self.fired.get(turn as usize)?;
        (!fired.swap(true, Ordering::SeqCst)).then_some(fault)
    }

    fn began(&self, turn: u32) {
        if let Some(begun) = self.begun.get(turn as usize) {
            begun.notify_one();
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Task {
    turn: u32,
}

/// The workload's agent, its tool doing what `plan` says on a faulty turn.
pub(super) fn agent(tool_ms: u64, plan: Arc<Plan>) -> Agent {
    let deadline = Duration::from_millis(tool_ms) + DEADLINE_ROOM;
    let tool = FunctionTool::new(
        "progress_task",
        "Works in two steps.",
        move |ctx: RunContext, t: Task| {
            let plan = Arc::clone(&plan);
            async move {
                plan.began(t.turn);
                ctx.update("step 1 of 2").await?;
                match plan.of(t.turn) {
                    Some(Fault::ToolPanic) => panic!("chaos: the tool panics"),
                    Some(Fault::ToolTimeout) => tokio::time::sleep(deadline * 2).await,
                    Some(Fault::Crash) => tokio::time::sleep(CUT_OFF_BODY).await,
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
pub(super) fn llm(plan: Arc<Plan>) -> ScriptedLlm {
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
                let slow = plan.of(turn) == Some(Fault::LlmSlow);
                let latency = if slow { SLOW_FIRST_TOKEN } else { Duration::ZERO };
                ScriptedResponse::calls([call]).with_latency(latency)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_drawn_from_the_seed_at_the_rate() {
        let draw = |seed, rate, store| -> Vec<Option<Fault>> {
            (0..10_000).map(|n| fault(seed, rate, n, 3, store)).collect()
        };
        let drawn = draw(7, 0.1, false);
        assert_eq!(drawn, draw(7, 0.1, false), "the same seed replays the same faults");
        let share = drawn.iter().flatten().count() as f64 / drawn.len() as f64;
        assert!((0.08..0.12).contains(&share), "{share}");
        for kind in &FAULTS[..8] {
            assert!(drawn.contains(&Some(*kind)), "{kind:?} is drawn");
        }
        assert!(!drawn.contains(&Some(Fault::Crash)), "a crash needs a store");
        assert!(draw(7, 0.1, true).contains(&Some(Fault::Crash)));
        assert!((0..1_000).all(|n| fault(7, 0.0, n, 0, true).is_none()));
        assert!((0..1_000).all(|n| fault(7, 1.0, n, 0, true).is_some()));
        assert_ne!(drawn, draw(8, 0.1, false));
    }
}
