//! The ToolCall actor: one per running call, a child of its Toolset.
//!
//! It runs the tool's future in a task it owns (aborted if the actor dies), so its mailbox
//! stays free while the tool works. A panic in the body is caught and becomes an internal
//! error (`panic: <text>`), so the session lives on. The actor forwards the result to its
//! Toolset and waits to be stopped there: it never stops itself, because supervision events
//! overtake messages (RACTOR-NOTES §2.3 item 4).

pub(crate) mod messages;

use std::panic::AssertUnwindSafe;

use colloquy_core::{FunctionTool, RunContext, ToolError};
use futures_util::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Map, Value};

pub(crate) use messages::ToolCallMsg;

use crate::task::{OwnedTask, panic_text};
use crate::toolset::ToolsetMsg;

pub(crate) struct ToolCallActor;

pub(crate) struct ToolCallArgs {
    pub tool: FunctionTool,
    pub ctx: RunContext,
    pub arguments: Map<String, Value>,
    pub toolset: ActorRef<ToolsetMsg>,
}

pub(crate) struct ToolCallState {
    call_id: String,
    toolset: ActorRef<ToolsetMsg>,
    /// Taken by `post_start` to start the body.
    start: Option<(FunctionTool, RunContext, Map<String, Value>)>,
    /// The body's task; dropping the state aborts it.
    _task: Option<OwnedTask>,
}

impl Actor for ToolCallActor {
    type Msg = ToolCallMsg;
    type State = ToolCallState;
    type Arguments = ToolCallArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Kept cheap: this runs inside the Toolset's handler.
        Ok(ToolCallState {
            call_id: args.ctx.call_id().to_string(),
            toolset: args.toolset,
            start: Some((args.tool, args.ctx, args.arguments)),
            _task: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((tool, ctx, arguments)) = state.start.take() else { return Ok(()) };
        let body = async move { tool.invoke(ctx, arguments).await };
        state._task = Some(OwnedTask::spawn(async move {
            let result = match AssertUnwindSafe(body).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => {
                    Err(ToolError::internal(format!("panic: {}", panic_text(&*payload))))
                }
            };
            let _ = myself.cast(ToolCallMsg::Finished(result));
        }));
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ToolCallMsg::Finished(result) => {
                let call_id = state.call_id.clone();
                if let Err(e) = state.toolset.cast(ToolsetMsg::Finished { call_id, result }) {
                    tracing::warn!(call_id = %state.call_id, "toolset gone before the call ended: {e}");
                }
            }
        }
        Ok(())
    }
}
