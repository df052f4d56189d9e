//! The testing API (§17): `run` (a user turn watched to its end) and mocked tool bodies.
//!
//! Invariants: a run ends once its speeches, the deferred replies it caused and the floor
//! holds granted during it are all done, and answers exactly once; agent mocks override
//! session mocks of the same name.
//!
//! Applies: `RunStarted`, `RunRecorded`, `RunFailed`, `RunEnded`, and what a run watches:
//! `SpeechCreated`, `SpeechDone`, `HoldGranted`, `HoldReleased`, `ReplyAwaited`,
//! `RepliesTaken`, `AgentEntered`. Handles: the run's caller, the mocks (tool code).

use std::collections::{BTreeMap, BTreeSet};

use colloquy_model::run_result::validated_arguments;
use colloquy_model::{ChatItem, FunctionTool, RunResult};
use ractor::RpcReplyPort;
use serde_json::Value;

use super::fact::Fact;
use crate::catalog::ToolCatalog;
use crate::messages::MockScope;
use crate::types::error::SessionError;

/// The testing API's state: the run in progress, if any, its caller, and the mocks.
#[derive(Default)]
pub(crate) struct Testing {
    run: Option<Run>,
    caller: Option<RpcReplyPort<Result<RunResult, SessionError>>>,
    mocks: Mocks,
}

impl Testing {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        if let Fact::RunStarted = fact {
            self.run = Some(Run::default());
            return;
        }
        let Some(run) = &mut self.run else { return };
        match fact {
            // Speeches created while a run is active belong to it (§17.1).
            Fact::SpeechCreated { speech_id, .. } => {
                run.speeches.insert(speech_id.to_string());
            }
            Fact::SpeechDone { speech_id, .. } => {
                run.speeches.remove(speech_id);
            }
            // Floor holds granted while a run is active keep it open until they end.
            Fact::HoldGranted { hold } => {
                run.holds.insert(hold);
            }
            Fact::HoldReleased { hold } => {
                run.holds.remove(&hold);
            }
            // A pair inserted during the run waits for its deferred reply: so does the run.
            Fact::ReplyAwaited { update_id } => {
                run.pending_updates.insert(update_id.to_string());
            }
            Fact::RepliesTaken { update_ids } => {
                for id in update_ids {
                    run.pending_updates.remove(id);
                }
            }
            Fact::RunRecorded { items, validated } => {
                run.items.extend(items.iter().map(|item| ChatItem::clone(item)));
                run.validated.extend(validated.iter().cloned());
            }
            // A handoff's item, which a run's result lists too.
            Fact::AgentEntered { item } => run.items.push(ChatItem::clone(item)),
            Fact::RunFailed { message } => {
                run.failure.get_or_insert_with(|| message.to_string());
            }
            Fact::RunEnded => self.run = None,
            _ => {}
        }
    }

    /// A run is in progress.
    pub(crate) fn running(&self) -> bool {
        self.run.is_some()
    }

    /// Whether a run watches speech `speech_id` (its commits are recorded).
    pub(crate) fn watches(&self, speech_id: &str) -> bool {
        self.run.as_ref().is_some_and(|run| run.speeches.contains(speech_id))
    }

    /// A run is in progress and everything it waits for is done.
    pub(crate) fn run_done(&self) -> bool {
        self.run.as_ref().is_some_and(Run::done)
    }

    /// The run's caller, answered when it ends.
    pub(crate) fn answer_to(&mut self, caller: RpcReplyPort<Result<RunResult, SessionError>>) {
        self.caller = Some(caller);
    }

    /// Answers the run's caller (before `RunEnded`): `error`, or the run's first failure, or
    /// the committed items.
    pub(crate) fn answer(&mut self, error: Option<SessionError>) {
        let (Some(run), Some(caller)) = (&self.run, self.caller.take()) else { return };
        let _ = caller.send(run.result(error));
    }

    /// Replaces one scope's mocks (none removes the scope).
    pub(crate) fn set_mocks(&mut self, scope: MockScope, mocks: Vec<FunctionTool>) {
        self.mocks.set(scope, mocks);
    }

    /// The mocks in force while `agent` is current: session mocks, overridden by the agent's.
    pub(crate) fn mocks(&self, agent: &str) -> BTreeMap<String, FunctionTool> {
        self.mocks.effective(agent)
    }
}

/// What each call of `items` received from its tool in `catalog` (the testing API's
/// `with_validated_args`), by call id: arguments as its tool validated them.
pub(crate) fn validated(
    items: &[std::sync::Arc<ChatItem>],
    catalog: &ToolCatalog,
) -> Vec<(String, Value)> {
    let mut validated = Vec::new();
    for item in items {
        if let ChatItem::FunctionCall(call) = &**item {
            let tool = match catalog.get(&call.name) {
                Some(tool) => Some(tool.clone()),
                None => catalog.resolve(&call.name).map(|(tool, _)| tool),
            };
            if let Some(valid) = tool.and_then(|t| validated_arguments(&t, &call.arguments)) {
                validated.push((call.call_id.clone(), valid));
            }
        }
    }
    validated
}

/// A `run` in progress: the speeches it watches and the items they committed.
#[derive(Default)]
struct Run {
    speeches: BTreeSet<String>,
    /// Pairs inserted during the run whose deferred reply is not admitted yet: the run waits
    /// for that reply too (§9.1 step 4).
    pending_updates: BTreeSet<String>,
    /// Floor holds granted while the run was active: the run stays open until they end.
    holds: BTreeSet<u64>,
    items: Vec<ChatItem>,
    /// What each recorded call's tool received, by call id (the testing API's
    /// `with_validated_args`).
    validated: Vec<(String, Value)>,
    /// The first LLM error of the run: it fails with it.
    failure: Option<String>,
}

impl Run {
    /// Everything the run waits for is done.
    fn done(&self) -> bool {
        self.speeches.is_empty() && self.pending_updates.is_empty() && self.holds.is_empty()
    }

    /// The answer: `error`, or the run's first failure, or the committed items.
    fn result(&self, error: Option<SessionError>) -> Result<RunResult, SessionError> {
        match (error, &self.failure) {
            (Some(e), _) => Err(e),
            (None, Some(failure)) => Err(SessionError::RunFailed(failure.clone())),
            (None, None) => {
                let mut result = RunResult::new(self.items.clone());
                for (call_id, valid) in &self.validated {
                    result.set_validated_args(call_id.clone(), valid.clone());
                }
                Ok(result)
            }
        }
    }
}

/// Mocked tool bodies by scope, then tool name.
#[derive(Default)]
struct Mocks(BTreeMap<MockScope, BTreeMap<String, FunctionTool>>);

impl Mocks {
    /// Replaces one scope's mocks (none removes the scope).
    fn set(&mut self, scope: MockScope, mocks: Vec<FunctionTool>) {
        let named: BTreeMap<String, FunctionTool> =
            mocks.into_iter().map(|m| (m.name().to_string(), m)).collect();
        if named.is_empty() {
            self.0.remove(&scope);
        } else {
            self.0.insert(scope, named);
        }
    }

    /// The mocks in force while `agent` is current: session mocks, overridden by the agent's.
    fn effective(&self, agent: &str) -> BTreeMap<String, FunctionTool> {
        let mut effective = self.0.get(&MockScope::Session).cloned().unwrap_or_default();
        if let Some(mocks) = self.0.get(&MockScope::Agent(agent.to_string())) {
            effective.extend(mocks.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        effective
    }
}
