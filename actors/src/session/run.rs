//! The testing API (§17): `run` (a user turn watched to its end) and mocked tool bodies.
//!
//! Invariants: a run ends once its speeches, the deferred replies it caused and the floor
//! holds granted during it are all done, and answers exactly once; agent mocks override
//! session mocks of the same name.
//!
//! Reads: `current` (its id, catalog and Activity). Writes: `testing`. Starts the run's user
//! turn (floor); the other concerns tell `testing` what the run watches through its methods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use colloquy_model::run_result::validated_arguments;
use colloquy_model::{ChatItem, FunctionTool, RunResult};
use ractor::RpcReplyPort;
use serde_json::Value;

use super::state::SessionState;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, MockScope};
use crate::types::error::SessionError;

/// The testing API's state: the run in progress, if any, and the mocks.
#[derive(Default)]
pub(super) struct Testing {
    run: Option<Run>,
    mocks: Mocks,
}

impl Testing {
    /// Speeches created while a run is active belong to it (§17.1).
    pub(super) fn speech_created(&mut self, speech_id: &str) {
        if let Some(run) = &mut self.run {
            run.speeches.insert(speech_id.to_string());
        }
    }

    pub(super) fn speech_done(&mut self, speech_id: &str) {
        if let Some(run) = &mut self.run {
            run.speeches.remove(speech_id);
        }
    }

    /// Floor holds granted while a run is active keep it open until they end.
    pub(super) fn hold_granted(&mut self, hold: u64) {
        if let Some(run) = &mut self.run {
            run.holds.insert(hold);
        }
    }

    pub(super) fn hold_released(&mut self, hold: u64) {
        if let Some(run) = &mut self.run {
            run.holds.remove(&hold);
        }
    }

    /// Whether a run watches speech `speech_id` (its commits are recorded).
    pub(super) fn watches(&self, speech_id: &str) -> bool {
        self.run.as_ref().is_some_and(|run| run.speeches.contains(speech_id))
    }

    /// Records items a watched speech committed (see [`Run::record`]).
    pub(super) fn record(&mut self, items: &[ChatItem], catalog: Option<&ToolCatalog>) {
        if let Some(run) = &mut self.run {
            run.record(items, catalog);
        }
    }

    /// A handoff's item, which a run's result lists too.
    pub(super) fn record_handoff(&mut self, item: &ChatItem) {
        if let Some(run) = &mut self.run {
            run.items.push(item.clone());
        }
    }

    /// An LLM error: the run fails with the first one.
    pub(super) fn llm_failed(&mut self, message: &str) {
        if let Some(run) = &mut self.run {
            run.failure.get_or_insert_with(|| message.to_string());
        }
    }

    /// A pair inserted during the run waits for its deferred reply: so does the run.
    pub(super) fn awaits_reply(&mut self, update_id: &str) {
        if let Some(run) = &mut self.run {
            run.pending_updates.insert(update_id.to_string());
        }
    }

    /// A reply speech took these pairs.
    pub(super) fn replied(&mut self, update_ids: &[String]) {
        if let Some(run) = &mut self.run {
            for id in update_ids {
                run.pending_updates.remove(id);
            }
        }
    }

    /// A run is in progress and everything it waits for is done.
    pub(super) fn run_done(&self) -> bool {
        self.run.as_ref().is_some_and(Run::done)
    }
}

/// A `run` in progress: the speeches it watches and the items they committed.
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
    reply: RpcReplyPort<Result<RunResult, SessionError>>,
}

impl Run {
    fn new(reply: RpcReplyPort<Result<RunResult, SessionError>>) -> Self {
        Self {
            speeches: BTreeSet::new(),
            pending_updates: BTreeSet::new(),
            holds: BTreeSet::new(),
            items: Vec::new(),
            validated: Vec::new(),
            failure: None,
            reply,
        }
    }

    /// Records items a speech of the run committed; `catalog` is its agent's, to validate
    /// each call's arguments as its tool did (`None`: that agent is no longer current).
    fn record(&mut self, items: &[ChatItem], catalog: Option<&ToolCatalog>) {
        for item in items {
            if let (ChatItem::FunctionCall(call), Some(catalog)) = (item, catalog) {
                let tool = match catalog.get(&call.name) {
                    Some(tool) => Some(tool.clone()),
                    None => catalog.resolve(&call.name).map(|(tool, _)| tool),
                };
                if let Some(valid) = tool.and_then(|t| validated_arguments(&t, &call.arguments)) {
                    self.validated.push((call.call_id.clone(), valid));
                }
            }
            self.items.push(item.clone());
        }
    }

    /// Everything the run waits for is done.
    fn done(&self) -> bool {
        self.speeches.is_empty() && self.pending_updates.is_empty() && self.holds.is_empty()
    }

    /// Answers the caller: `error`, or the run's first failure, or the committed items.
    fn finish(self, error: Option<SessionError>) {
        let result = match (error, self.failure) {
            (Some(e), _) => Err(e),
            (None, Some(failure)) => Err(SessionError::RunFailed(failure)),
            (None, None) => {
                let mut result = RunResult::new(self.items);
                for (call_id, valid) in self.validated {
                    result.set_validated_args(call_id, valid);
                }
                Ok(result)
            }
        };
        let _ = self.reply.send(result);
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

impl SessionState {
    /// A user turn watched to its end: replies with the items its speeches committed.
    pub(super) fn run(
        &mut self,
        text: String,
        reply: RpcReplyPort<Result<RunResult, SessionError>>,
    ) {
        if self.testing.run.is_some() {
            let _ = reply.send(Err(SessionError::NestedRun));
            return;
        }
        self.testing.run = Some(Run::new(reply));
        if let Err(e) = self.user_turn(text) {
            self.finish_run(Some(e));
        }
    }

    pub(super) fn finish_run(&mut self, error: Option<SessionError>) {
        if let Some(run) = self.testing.run.take() {
            run.finish(error);
        }
    }

    /// Replaces one scope's mocks (an empty list removes them) and hands the current agent's
    /// effective set to its toolset. A name the current agent does not have is an error.
    pub(super) fn mock_tools(
        &mut self,
        scope: MockScope,
        mocks: Vec<FunctionTool>,
    ) -> Result<(), SessionError> {
        let applies_now = match &scope {
            MockScope::Session => true,
            MockScope::Agent(agent) => agent == self.current.id(),
        };
        if applies_now
            && let Some(unknown) =
                mocks.iter().find(|m| self.current.catalog().get(m.name()).is_none())
        {
            return Err(SessionError::Config(format!(
                "cannot mock `{}`: agent `{}` has no such tool",
                unknown.name(),
                self.current.id()
            )));
        }
        self.testing.mocks.set(scope, mocks);
        self.mock_tools_refresh()
    }

    /// Hands the current agent's effective mocks to its toolsets.
    pub(super) fn mock_tools_refresh(&self) -> Result<(), SessionError> {
        let effective = self.testing.mocks.effective(self.current.id());
        self.current
            .activity()
            .cast(ActivityMsg::SetMocks(Arc::new(effective)))
            .map_err(|_| SessionError::Closed)
    }
}
