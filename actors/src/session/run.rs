//! The testing API, as the Session runs it (§17): `run` (a user turn watched
//! to its end) and mocked tool bodies.

use std::sync::Arc;

use colloquy_core::{FunctionTool, RunResult};
use ractor::RpcReplyPort;

use super::parts::run::Run;
use super::state::SessionState;
use crate::api::error::SessionError;
use crate::protocol::{ActivityMsg, MockScope};

impl SessionState {
    /// A user turn watched to its end: replies with the items its speeches committed.
    pub fn run(&mut self, text: String, reply: RpcReplyPort<Result<RunResult, SessionError>>) {
        if self.run.is_some() {
            let _ = reply.send(Err(SessionError::NestedRun));
            return;
        }
        self.run = Some(Run::new(reply));
        if let Err(e) = self.user_turn(text) {
            self.finish_run(Some(e));
        }
    }

    pub(super) fn finish_run(&mut self, error: Option<SessionError>) {
        if let Some(run) = self.run.take() {
            run.finish(error);
        }
    }

    /// Replaces one scope's mocks (an empty list removes them) and hands the current agent's
    /// effective set to its toolset. A name the current agent does not have is an error.
    pub fn mock_tools(
        &mut self,
        scope: MockScope,
        mocks: Vec<FunctionTool>,
    ) -> Result<(), SessionError> {
        let applies_now = match &scope {
            MockScope::Session => true,
            MockScope::Agent(agent) => *agent == self.current.id,
        };
        if applies_now
            && let Some(unknown) =
                mocks.iter().find(|m| self.current.catalog.get(m.name()).is_none())
        {
            return Err(SessionError::Config(format!(
                "cannot mock `{}`: agent `{}` has no such tool",
                unknown.name(),
                self.current.id
            )));
        }
        self.mocks.set(scope, mocks);
        self.mock_tools_refresh()
    }

    /// Hands the current agent's effective mocks to its toolsets.
    pub(super) fn mock_tools_refresh(&self) -> Result<(), SessionError> {
        let effective = self.mocks.effective(&self.current.id);
        self.current
            .activity
            .cast(ActivityMsg::SetMocks(Arc::new(effective)))
            .map_err(|_| SessionError::Closed)
    }
}
