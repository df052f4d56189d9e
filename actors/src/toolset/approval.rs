//! Calls that wait for the host's approval (docs/decisions.md, "Human approval").
//!
//! The ToolCall is spawned at once with its body held behind a one-shot gate, so a waiting
//! call is an ordinary running call for everything else: the duplicate policy, cancels,
//! handoff, close and the drop guard. Dispatch is answered provisionally (the agent can tell
//! the user it waits) and the result arrives later as the `_final` pair of a background call.
//! `approve` opens the gate and arms the call's deadline and heartbeat; `reject`, the approval
//! timeout, or a drain ends it `rejected` and the body never runs.

use colloquy_core::{CallLimits, EventKind, ToolCallStatus, ToolError, text};
use ractor::ActorRef;
use tokio::sync::oneshot;

use super::{RunningCall, ToolsetState};
use crate::api::error::ApprovalError;
use crate::protocol::mark_non_blocking;
use crate::protocol::{CallOutcome, ToolsetMsg};
use crate::support::task::OwnedTask;

/// A call waiting for approval: its body's gate, the limits to arm once it may run, and the
/// timer that rejects it if nobody answers.
pub(super) struct Waiting {
    gate: oneshot::Sender<()>,
    limits: CallLimits,
    _timer: Option<OwnedTask>,
}

impl ToolsetState {
    /// A call that must wait was just spawned with `gate`'s receiver: ask the host, answer
    /// dispatch provisionally, and start the approval timer.
    pub(super) fn await_approval(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        gate: oneshot::Sender<()>,
        limits: CallLimits,
    ) {
        let timeout = self.args.session.options.approval_timeout;
        let session = &self.args.session;
        let Some(call) = self.running.get_mut(call_id) else { return };
        session.emit(EventKind::ToolApprovalRequested {
            call_id: call_id.to_string(),
            name: call.call.name.clone(),
            arguments: call.call.arguments.clone(),
        });
        // The request takes the first update's place: dispatch goes on, the agent can say that
        // it waits, and the outcome comes as this call's `_final` pair.
        mark_non_blocking(&mut call.call.extra);
        call.updates = 1;
        call.update_offset = 1;
        if let Some(reply) = call.reply.take() {
            let _ = reply.send(CallOutcome {
                output: text::tool_awaiting_approval(&call.call.name),
                is_error: false,
                reply_required: true,
                finished_at: session.clock.now(),
                provisional: true,
                handoff: None,
            });
        }
        let timer = timeout.map(|after| {
            let (toolset, call_id, from) =
                (myself.clone(), call_id.to_string(), call.actor.get_id());
            OwnedTask::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = toolset.cast(ToolsetMsg::ApprovalTimeout { call_id, from });
            })
        });
        call.approval = Some(Waiting { gate, limits, _timer: timer });
    }

    /// The host approved `call_id`: its body starts, and its limits count from now.
    pub(super) fn approve(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
    ) -> Result<(), ApprovalError> {
        let call = self.waiting(call_id)?;
        let Some(waiting) = call.approval.take() else {
            return Err(ApprovalError::NotAwaiting(call_id.to_string()));
        };
        call.watch = super::watch::Watch::none(tokio::time::Instant::now());
        // The event first: the body's first report then always follows it.
        self.args.session.emit(EventKind::ToolCallApproved { call_id: call_id.to_string() });
        let _ = waiting.gate.send(());
        self.watch(myself, call_id, waiting.limits);
        Ok(())
    }

    /// Ends a waiting call `rejected` with `reason`: the model reads
    /// ``The user rejected `NAME`: REASON`` in its `_final` pair. With `drain`, a call approved
    /// meanwhile is cancelled instead (if it can be), as the drain would have done.
    pub(super) fn reject(
        &mut self,
        call_id: &str,
        reason: &str,
        drain: bool,
    ) -> Result<(), ApprovalError> {
        if drain && self.running.get(call_id).is_some_and(|c| c.approval.is_none()) {
            let _ = self.cancel(call_id, true);
            return Ok(());
        }
        let call = self.waiting(call_id)?;
        if call.approval.is_none() {
            return Err(ApprovalError::NotAwaiting(call_id.to_string()));
        }
        let why = text::tool_rejected(&call.call.name, reason);
        let status = Some(ToolCallStatus::Rejected);
        if let Some(call) = self.conclude(call_id, Err(ToolError::new(why)), status) {
            // Its body never ran: nothing to wind down (dropping the gate keeps it from
            // starting, and the stop aborts its task).
            let cell = call.actor.get_cell();
            if let Some(toolset) = cell.try_get_supervisor() {
                cell.unlink(toolset);
            }
            call.actor.stop(Some("rejected".into()));
        }
        Ok(())
    }

    /// The approval timer of `call_id` fired: reject it if it still waits.
    pub(super) fn approval_timed_out(&mut self, call_id: &str, from: ractor::ActorId) {
        let waits = self.running.get(call_id).is_some_and(|c| c.approval.is_some());
        if !self.runs(call_id, from) || !waits {
            return;
        }
        let Some(after) = self.args.session.options.approval_timeout else { return };
        let _ = self.reject(call_id, &text::approval_timed_out(after), false);
    }

    fn waiting(&mut self, call_id: &str) -> Result<&mut RunningCall, ApprovalError> {
        match self.running.get_mut(call_id) {
            Some(call) => Ok(call),
            None => Err(ApprovalError::NotFound(call_id.to_string())),
        }
    }
}
