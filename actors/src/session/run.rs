//! The testing API (§17): `run` (a user turn watched to its end) and mocked tool bodies. The
//! state is `parts/testing.rs`'s.
//!
//! Decides `RunStarted` and `RunEnded` (answering the run's caller); starts the run's user
//! turn; hands the current agent's mocks to its toolsets.

use std::sync::Arc;

use colloquy_model::{FunctionTool, RunResult};
use ractor::RpcReplyPort;

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ActivityMsg, MockScope};
use crate::types::error::SessionError;

impl SessionState {
    /// A user turn watched to its end: replies with the items its speeches committed.
    pub(super) fn run(
        &mut self,
        text: String,
        reply: RpcReplyPort<Result<RunResult, SessionError>>,
    ) {
        if self.host.testing.running() {
            let _ = reply.send(Err(SessionError::NestedRun));
            return;
        }
        self.apply(Fact::RunStarted);
        self.host.testing.answer_to(reply);
        if let Err(e) = self.user_turn(text) {
            self.finish_run(Some(e));
        }
    }

    pub(super) fn finish_run(&mut self, error: Option<SessionError>) {
        if self.host.testing.running() {
            self.host.testing.answer(error);
            self.apply(Fact::RunEnded);
        }
    }

    /// Replaces one scope's mocks (an empty list removes them) and hands the current agent's
    /// effective set to its toolset. A name the current agent does not have is an error.
    pub(super) fn mock_tools(
        &mut self,
        scope: MockScope,
        mocks: Vec<FunctionTool>,
    ) -> Result<(), SessionError> {
        let current = &self.agent.current;
        let applies_now = match &scope {
            MockScope::Session => true,
            MockScope::Agent(agent) => agent == current.id(),
        };
        if applies_now
            && let Some(unknown) = mocks.iter().find(|m| current.catalog().get(m.name()).is_none())
        {
            return Err(SessionError::Config(format!(
                "cannot mock `{}`: agent `{}` has no such tool",
                unknown.name(),
                current.id()
            )));
        }
        self.host.testing.set_mocks(scope, mocks);
        self.mock_tools_refresh()
    }

    /// Hands the current agent's effective mocks to its toolsets.
    pub(super) fn mock_tools_refresh(&self) -> Result<(), SessionError> {
        let current = &self.agent.current;
        let effective = self.host.testing.mocks(current.id());
        current
            .activity()
            .cast(ActivityMsg::SetMocks(Arc::new(effective)))
            .map_err(|_| SessionError::Closed)
    }
}
