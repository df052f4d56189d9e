//! The Toolset actor: runs the calls of one toolset, each in its own ToolCall child.
//!
//! For now every agent has one, its implicit toolset `agent:<id>`, child of its Activity.
//! The Toolset registers a call, emits `tool_call_started`, spawns the ToolCall, and when the
//! body ends turns the result into the output the model sees, emits exactly one
//! `tool_call_ended` (status derived from that output, decision 13), answers dispatch and
//! stops the ToolCall.

pub(crate) mod messages;

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{
    EventKind, FunctionTool, RunContext, ToolCallStatus, ToolError, ToolErrorKind, ToolOutput, text,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

pub(crate) use messages::{CallOutcome, ExecuteCall, ToolsetMsg};

use crate::catalog::ToolCatalog;
use crate::session::SessionLink;
use crate::tool_call::{ToolCallActor, ToolCallArgs, ToolCallMsg};

pub(crate) struct ToolsetActor;

pub(crate) struct ToolsetArgs {
    pub id: String,
    pub agent_id: String,
    pub catalog: Arc<ToolCatalog>,
    pub session: SessionLink,
    pub userdata: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

struct RunningCall {
    actor: ActorRef<ToolCallMsg>,
    reply: RpcReplyPort<CallOutcome>,
}

pub(crate) struct ToolsetState {
    args: ToolsetArgs,
    /// Running calls by call id (ordered: anything observable iterates deterministically).
    running: BTreeMap<String, RunningCall>,
    /// Mocked bodies by tool name (the testing API).
    mocks: Arc<BTreeMap<String, FunctionTool>>,
}

impl Actor for ToolsetActor {
    type Msg = ToolsetMsg;
    type State = ToolsetState;
    type Arguments = ToolsetArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ToolsetState { args, running: BTreeMap::new(), mocks: Arc::default() })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ToolsetMsg::Execute(call, reply) => state.execute(myself, *call, reply).await,
            ToolsetMsg::SetMocks(mocks) => state.mocks = mocks,
            ToolsetMsg::Finished { call_id, result } => state.finish(&call_id, result),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A ToolCall that dies before reporting (it is killed, or its actor code fails) still
        // ends its call exactly once.
        let (cell, why) = match &event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.clone().unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        let orphan = state
            .running
            .iter()
            .find(|(_, call)| call.actor.get_id() == cell.get_id())
            .map(|(id, _)| id.clone());
        if let Some(call_id) = orphan {
            let error =
                ToolError::internal(format!("tool call actor ended before its call: {why}"));
            state.finish(&call_id, Err(error));
        }
        Ok(())
    }
}

impl ToolsetState {
    async fn execute(
        &mut self,
        myself: ActorRef<ToolsetMsg>,
        exec: ExecuteCall,
        reply: RpcReplyPort<CallOutcome>,
    ) {
        let session = &self.args.session;
        let call_id = exec.call.call_id.clone();
        let tool = match self.args.catalog.get(&exec.call.name) {
            Some(tool) if !self.running.contains_key(&call_id) => match self.mocks.get(tool.name())
            {
                Some(mock) => tool.with_body_of(mock),
                None => tool.clone(),
            },
            found => {
                // Dispatch only routes known tools here; a reused call id is a model error.
                let why = if found.is_some() { "is already running" } else { "has no tool here" };
                tracing::warn!(toolset = %self.args.id, %call_id, name = %exec.call.name, "call {why}");
                let _ = reply.send(self.error_outcome(text::INTERNAL_ERROR));
                return;
            }
        };
        session.emit(EventKind::ToolCallStarted {
            call_id: call_id.clone(),
            name: tool.name().into(),
        });
        let ctx = RunContext::new(
            exec.call,
            exec.speech_id,
            self.args.agent_id.clone(),
            self.args.userdata.clone(),
        );
        let args = ToolCallArgs { tool, ctx, arguments: exec.arguments, toolset: myself.clone() };
        match Actor::spawn_linked(None, ToolCallActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                self.running.insert(call_id, RunningCall { actor, reply });
            }
            Err(e) => {
                session.emit(EventKind::ToolCallEnded {
                    id: call_id.clone(),
                    call_id,
                    status: ToolCallStatus::Error,
                    message: Some(format!("could not start the tool call: {e}")),
                });
                let _ = reply.send(self.error_outcome(text::INTERNAL_ERROR));
            }
        }
    }

    fn error_outcome(&self, output: &str) -> CallOutcome {
        CallOutcome {
            output: output.to_string(),
            is_error: true,
            reply_required: true,
            finished_at: self.args.session.clock.now(),
        }
    }

    fn finish(&mut self, call_id: &str, result: Result<ToolOutput, ToolError>) {
        let Some(call) = self.running.remove(call_id) else { return };
        let finished_at = self.args.session.clock.now();
        let (outcome, status, message) = match result {
            Ok(out) => {
                let outcome = CallOutcome {
                    output: out.output_text().to_string(),
                    is_error: false,
                    reply_required: out.reply_required,
                    finished_at,
                };
                (outcome, ToolCallStatus::Done, out.text)
            }
            Err(e) => {
                if e.kind() == ToolErrorKind::Internal {
                    tracing::warn!(toolset = %self.args.id, %call_id, "tool failed: {}", e.message());
                }
                let outcome = CallOutcome {
                    output: e.model_text().to_string(),
                    is_error: true,
                    reply_required: true,
                    finished_at,
                };
                (outcome, ToolCallStatus::Error, Some(e.message().to_string()))
            }
        };
        self.args.session.emit(EventKind::ToolCallEnded {
            id: call_id.to_string(),
            call_id: call_id.to_string(),
            status,
            message,
        });
        let _ = call.reply.send(outcome);
        call.actor.stop(None);
    }
}
