//! Calls that wait for the host's approval (docs/decisions.md, "Human approval" and "Tool
//! controls together").
//!
//! The ToolCall is spawned at once with its body held behind a one-shot gate, so a waiting
//! call is an ordinary running call for everything else: the duplicate policy, cancels,
//! handoff, close and the drop guard. It is asked about once the before-call hook has let it
//! go on, and before it looks for a place under a cap: a waiting call holds no place. Dispatch
//! is answered provisionally (the agent can tell the user it waits) and the result arrives
//! later as the `_final` pair of a background call. `approve` lets it look for a place and
//! restarts its deadline; `reject`, the approval timeout, or a drain ends it `rejected` and the
//! body never runs.

use colloquy_model::{EventKind, ToolCallStatus, ToolError, text};
use ractor::ActorRef;

use super::{RunningCall, Stage, ToolsetState};
use crate::messages::ToolsetMsg;
use crate::support::task::OwnedTask;
use crate::types::error::ApprovalError;

impl ToolsetState {
    /// The hook let `call_id` go on (or it has none): ask for approval, else find a place.
    pub(super) fn screened(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        needs_approval: bool,
        rewritten: Option<String>,
    ) {
        let drained = match self.running.get_mut(call_id).map(|c| &mut c.stage) {
            Some(Stage::Screening { drained }) => drained.take(),
            _ => None,
        };
        match (needs_approval, drained) {
            // A drain began while the hook decided: the call is rejected as it would have
            // been had it waited already (decision 58).
            (true, Some(reason)) => self.end_rejected(call_id, &reason),
            (true, None) => self.await_approval(myself, call_id, rewritten),
            (false, _) => self.seek_place(myself, call_id),
        }
    }

    /// Asks the host about `call_id` (showing `rewritten` arguments if the hook changed
    /// them), answers dispatch provisionally, and starts the approval timer.
    fn await_approval(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        rewritten: Option<String>,
    ) {
        let timeout = self.args.session.options.approval_timeout;
        let Some(call) = self.running.get(call_id) else { return };
        self.args.session.emit(EventKind::ToolApprovalRequested {
            call_id: call_id.to_string(),
            name: call.call.name.clone(),
            arguments: rewritten.unwrap_or_else(|| call.call.arguments.clone()),
        });
        // The request takes the first update's place: dispatch goes on, the agent can say that
        // it waits, and the outcome comes as this call's `_final` pair.
        let waiting = self.args.templates.approval_waiting.clone();
        self.answer_provisionally(call_id, &waiting);
        let Some(call) = self.running.get_mut(call_id) else { return };
        let timer = timeout.map(|after| {
            let (toolset, call_id, from) =
                (myself.clone(), call_id.to_string(), call.actor.get_id());
            OwnedTask::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = toolset.cast(ToolsetMsg::ApprovalTimeout { call_id, from });
            })
        });
        call.stage = Stage::AwaitingApproval { _timer: timer };
        self.hold(call_id);
    }

    /// The host approved `call_id`: it looks for a place, and its limits count from now.
    pub(super) fn approve(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
    ) -> Result<(), ApprovalError> {
        let call = self.waiting(call_id)?;
        if !matches!(call.stage, Stage::AwaitingApproval { .. }) {
            return Err(ApprovalError::NotAwaiting(call_id.to_string()));
        }
        call.stage = Stage::Screening { drained: None };
        // The deadline counts from now, queue included (the timer is not armed while a person
        // is asked).
        call.watch.restart();
        super::watch::arm(myself, call_id, call);
        // The event first: the body's first report then always follows it.
        self.args.session.emit(EventKind::ToolCallApproved { call_id: call_id.to_string() });
        self.seek_place(myself, call_id);
        Ok(())
    }

    /// Ends a waiting call `rejected` with `reason`: the model reads the `approval_rejected`
    /// template in its `_final` pair. With `drain`, a call approved meanwhile is cancelled
    /// instead (if it can be), as the drain would have done.
    pub(super) fn reject(
        &mut self,
        call_id: &str,
        reason: &str,
        drain: bool,
    ) -> Result<(), ApprovalError> {
        let waits = |call: &RunningCall| matches!(call.stage, Stage::AwaitingApproval { .. });
        // In a durable session, a body still waiting for its start to reach the disk never
        // ran: a drain ends it as one waiting for approval (docs/durability.md#write-ahead).
        let unstarted =
            |call: &RunningCall| call.gate.is_some() && self.unjournaled.contains(call_id);
        if drain && self.running.get(call_id).is_some_and(|c| unstarted(c) && !waits(c)) {
            self.end_rejected(call_id, reason);
            return Ok(());
        }
        if drain && self.running.get(call_id).is_some_and(|c| !waits(c)) {
            if let Some(Stage::Screening { drained }) =
                self.running.get_mut(call_id).map(|c| &mut c.stage)
            {
                *drained = Some(reason.to_string());
            }
            let _ = self.cancel(call_id, true);
            return Ok(());
        }
        let call = self.waiting(call_id)?;
        if !waits(call) {
            return Err(ApprovalError::NotAwaiting(call_id.to_string()));
        }
        self.end_rejected(call_id, reason);
        Ok(())
    }

    /// Ends `call_id` `rejected` with `reason`, its body never run.
    fn end_rejected(&mut self, call_id: &str, reason: &str) {
        let Some(call) = self.running.get(call_id) else { return };
        let name = call.call.name.clone();
        let values = [("function_name", name.as_str()), ("call_id", call_id), ("reason", reason)];
        let template = &self.args.templates.approval_rejected;
        let why = template.render_with(&values).unwrap_or_else(|e| e.to_string());
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
    }

    /// The approval timer of `call_id` fired: reject it if it still waits.
    pub(super) fn approval_timed_out(&mut self, call_id: &str, from: ractor::ActorId) {
        let waits = self
            .running
            .get(call_id)
            .is_some_and(|c| matches!(c.stage, Stage::AwaitingApproval { .. }));
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
