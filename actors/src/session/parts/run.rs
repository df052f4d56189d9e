//! The testing API's state: the `run` in progress and mocked tool bodies (§17).
//!
//! Invariants: a run ends once its speeches, the deferred replies it caused and the floor
//! holds granted during it are all done, and answers exactly once; agent mocks override
//! session mocks of the same name.

use std::collections::{BTreeMap, BTreeSet};

use colloquy_core::run_result::validated_arguments;
use colloquy_core::{ChatItem, FunctionTool, RunResult};
use ractor::RpcReplyPort;
use serde_json::Value;

use crate::api::error::SessionError;
use crate::protocol::MockScope;
use crate::support::catalog::ToolCatalog;

/// A `run` in progress: the speeches it watches and the items they committed.
pub(crate) struct Run {
    pub speeches: BTreeSet<String>,
    /// Pairs inserted during the run whose deferred reply is not admitted yet: the run waits
    /// for that reply too (§9.1 step 4).
    pub pending_updates: BTreeSet<String>,
    /// Floor holds granted while the run was active: the run stays open until they end.
    pub holds: BTreeSet<u64>,
    pub items: Vec<ChatItem>,
    /// What each recorded call's tool received, by call id (the testing API's
    /// `with_validated_args`).
    validated: Vec<(String, Value)>,
    /// The first LLM error of the run: it fails with it.
    pub failure: Option<String>,
    reply: RpcReplyPort<Result<RunResult, SessionError>>,
}

impl Run {
    pub fn new(reply: RpcReplyPort<Result<RunResult, SessionError>>) -> Self {
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
    pub fn record(&mut self, items: &[ChatItem], catalog: Option<&ToolCatalog>) {
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
    pub fn done(&self) -> bool {
        self.speeches.is_empty() && self.pending_updates.is_empty() && self.holds.is_empty()
    }

    /// Answers the caller: `error`, or the run's first failure, or the committed items.
    pub fn finish(self, error: Option<SessionError>) {
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
pub(crate) struct Mocks(BTreeMap<MockScope, BTreeMap<String, FunctionTool>>);

impl Mocks {
    /// Replaces one scope's mocks (none removes the scope).
    pub fn set(&mut self, scope: MockScope, mocks: Vec<FunctionTool>) {
        let named: BTreeMap<String, FunctionTool> =
            mocks.into_iter().map(|m| (m.name().to_string(), m)).collect();
        if named.is_empty() {
            self.0.remove(&scope);
        } else {
            self.0.insert(scope, named);
        }
    }

    /// The mocks in force while `agent` is current: session mocks, overridden by the agent's.
    pub fn effective(&self, agent: &str) -> BTreeMap<String, FunctionTool> {
        let mut effective = self.0.get(&MockScope::Session).cloned().unwrap_or_default();
        if let Some(mocks) = self.0.get(&MockScope::Agent(agent.to_string())) {
            effective.extend(mocks.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        effective
    }
}
