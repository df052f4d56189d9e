//! The companion tools (§12.3, decisions 14 and 18): listed after every other
//! tool whenever a cancellable tool is registered, so the model can see and stop running work.

use colloquy_model::call_ids::derived_base;
use colloquy_model::duplicate::running_call_json;
use colloquy_model::{FunctionTool, Json, RunContext, ToolError, tool::NoArgs};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::builtin::tool_context::RunContextExt;
use crate::types::error::CancelError;

/// Name of the cancel companion.
pub(crate) const CANCEL_TASK: &str = "lk_agents_cancel_task";
/// Name of the listing companion.
pub(crate) const GET_RUNNING_TASKS: &str = "lk_agents_get_running_tasks";

#[derive(Deserialize, JsonSchema)]
struct CancelTask {
    /// The call_id of the running tool call to cancel.
    call_id: String,
}

/// `lk_agents_cancel_task(call_id)`.
pub(crate) fn cancel_task() -> FunctionTool {
    FunctionTool::new(
        CANCEL_TASK,
        "Cancel a running tool call by its call_id.",
        |ctx: RunContext, args: CancelTask| async move {
            let session = ctx.session().ok_or_else(|| ToolError::internal("no session"))?;
            let mut call_id = args.call_id;
            let mut cancelled = session.cancel_tool_call(&call_id).await;
            // The deferred-reply instructions list the pairs' ids (`<id>_update_<n>`,
            // `<id>_final`): a model that names one means its call (decision 67).
            if let (Err(CancelError::NotFound(_)), Some(base)) =
                (&cancelled, derived_base(&call_id))
            {
                call_id = base.to_owned();
                cancelled = session.cancel_tool_call(&call_id).await;
            }
            match cancelled {
                Ok(()) => Ok(format!("Task {call_id} cancelled successfully.")),
                Err(
                    e @ (CancelError::NotFound(_)
                    | CancelError::NotCancellable(_)
                    | CancelError::InterruptionsDisallowed(_)),
                ) => Err(ToolError::new(e.to_string())),
                Err(e) => Err(ToolError::internal(e)),
            }
        },
    )
}

/// `lk_agents_get_running_tasks()`: a JSON array of the running cancellable calls.
pub(crate) fn get_running_tasks() -> FunctionTool {
    FunctionTool::new(
        GET_RUNNING_TASKS,
        "List the running tool calls that can be cancelled.",
        |ctx: RunContext, _a: NoArgs| async move {
            let session = ctx.session().ok_or_else(|| ToolError::internal("no session"))?;
            let running = session.running_tool_calls().await.map_err(ToolError::internal)?;
            let calls: Vec<Value> = running
                .iter()
                .filter(|c| c.cancellable)
                .map(|c| running_call_json(&c.call_id, &c.name, &c.arguments))
                .collect();
            Ok::<_, ToolError>(Json(calls))
        },
    )
}
