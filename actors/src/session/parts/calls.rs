//! The running-call index: every call a toolset registered and has not ended yet, by call id;
//! and the drain of calls when a handoff or a close bounds how long they may still run
//! (decision 7).
//!
//! Invariant: a call is here from its `CallRegistered` to its `tool_call_ended` event (the
//! fan-out hands every event here before it leaves), so the index answers "what runs now" for
//! the host, for cancels, for the idle and away decisions, and for the placeholder pairs an
//! LLM request needs (§16).
//!
//! Applies: `CallStarted`, `ApprovalAsked`, `CallApproved`, `CallEnded`, `RerunsAsked`,
//! `RerunsAbandoned`. Handles: the toolset
//! running each call (where cancels, approvals and drains go), the drain timer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy_model::{ChatContext, ChatItem, FunctionCall, FunctionCallOutput};
use ractor::{ActorRef, RpcReplyPort};

use super::fact::Fact;
use crate::messages::{RunningToolCall, SessionMsg, TimerMsg, ToolsetMsg};
use crate::support::task::OwnedTask;
use crate::types::error::{ApprovalError, CancelError};

/// Marks a placeholder copy of a running call in an LLM request (§16).
const PLACEHOLDER: &str = "__colloquy_running_call_placeholder";

/// The output a running call shows in requests made while it runs (§16).
use colloquy_model::text::STILL_RUNNING;

/// A running call, as the Session knows it.
pub(crate) struct Running {
    call: Arc<FunctionCall>,
    /// Installed with the call's start (a handle: the fact holds the call only).
    toolset: Option<ActorRef<ToolsetMsg>>,
    cancellable: bool,
    /// Run by the current agent's toolsets (drained at handoff).
    agent_scoped: bool,
    /// Waiting for the host's approval (from its `x_tool_approval_requested` event to its
    /// approval or end).
    awaiting_approval: bool,
}

impl Running {
    /// The toolset running it.
    pub(crate) fn toolset(&self) -> Option<&ActorRef<ToolsetMsg>> {
        self.toolset.as_ref()
    }

    /// Run by the current agent's toolsets (drained at handoff).
    pub(crate) fn agent_scoped(&self) -> bool {
        self.agent_scoped
    }
}

#[derive(Default)]
pub(crate) struct RunningCalls {
    /// Boxed: a map's first node holds room for eleven entries, and a running call is large.
    running: BTreeMap<String, Box<Running>>,
    /// Calls a resume handed to the Activity to run again, until their toolset registers them
    /// (or a drain runs out of time): they count as running, so nothing quiet or closed
    /// overtakes them (docs/durability.md#on-interrupted).
    reruns: std::collections::BTreeSet<String>,
    /// The drain timer of a handoff or close in progress.
    drain_timer: Option<OwnedTask>,
}

impl RunningCalls {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::CallStarted { call, cancellable, agent_scoped, .. } => {
                let running = Running {
                    call: Arc::clone(call),
                    toolset: None,
                    cancellable,
                    agent_scoped,
                    awaiting_approval: false, // until its toolset's request event
                };
                self.reruns.remove(&call.call_id);
                self.running.insert(call.call_id.clone(), Box::new(running));
            }
            Fact::RerunsAsked { call_ids } => self.reruns.extend(call_ids.iter().cloned()),
            Fact::RerunsAbandoned => self.reruns.clear(),
            Fact::ApprovalAsked { call_id } => self.set_awaiting(call_id, true),
            Fact::CallApproved { call_id } => self.set_awaiting(call_id, false),
            Fact::CallEnded { call_id } => {
                self.running.remove(call_id);
            }
            _ => {}
        }
    }

    /// Records whether `call_id` waits for approval (its toolset's events say so).
    fn set_awaiting(&mut self, call_id: &str, awaiting: bool) {
        if let Some(running) = self.running.get_mut(call_id) {
            running.awaiting_approval = awaiting;
        }
    }

    /// Where call `call_id` runs (after `CallStarted`).
    pub(crate) fn route(&mut self, call_id: &str, toolset: ActorRef<ToolsetMsg>) {
        if let Some(running) = self.running.get_mut(call_id) {
            running.toolset = Some(toolset);
        }
    }

    /// Bounds a drain: `session` hears `DrainTimeout` after `timeout` (decision 7).
    pub(crate) fn start_drain_timer(&mut self, timeout: Duration, session: ActorRef<SessionMsg>) {
        self.drain_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(TimerMsg::DrainTimeout.into());
        }));
    }

    /// The drain it bounded is over (a handoff completed, or the timer fired).
    pub(crate) fn stop_drain_timer(&mut self) {
        self.drain_timer = None;
    }

    /// Asks the call's toolset to approve (`reason` `None`) or reject a waiting call; the
    /// toolset answers the caller.
    pub(crate) fn answer(
        &self,
        call_id: String,
        reason: Option<String>,
        reply: RpcReplyPort<Result<(), ApprovalError>>,
    ) {
        let Some(running) = self.running.get(&call_id) else {
            let _ = reply.send(Err(ApprovalError::NotFound(call_id)));
            return;
        };
        let Some(toolset) = &running.toolset else { return };
        let reply = Some(reply);
        let message = match reason {
            None => ToolsetMsg::Approve { call_id, reply },
            Some(reason) => ToolsetMsg::Reject { call_id, reason, reply, drain: false },
        };
        let _ = toolset.cast(message);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty() && self.reruns.is_empty()
    }

    /// Call `call_id`, if it runs.
    pub(crate) fn get(&self, call_id: &str) -> Option<&Running> {
        self.running.get(call_id).map(|r| &**r)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Running> {
        self.running.values().map(|r| &**r)
    }

    /// Tells the call's toolset that its start is on disk (its body may run).
    pub(crate) fn journaled(&self, call_id: String, let_through: bool) {
        if let Some(toolset) = self.running.get(&call_id).and_then(|r| r.toolset.as_ref()) {
            let _ = toolset.cast(ToolsetMsg::Journaled { call_id, let_through });
        }
    }

    /// Asks the call's toolset to cancel it; the toolset answers the caller.
    pub(crate) fn cancel(&self, call_id: String, reply: RpcReplyPort<Result<(), CancelError>>) {
        match self.running.get(&call_id).and_then(|r| r.toolset.as_ref()) {
            Some(toolset) => {
                let cancel = ToolsetMsg::Cancel { call_id, reply: Some(reply), drain: false };
                let _ = toolset.cast(cancel);
            }
            None => {
                let _ = reply.send(Err(CancelError::NotFound(call_id)));
            }
        }
    }

    /// Tells the Toolset of every call `which` selects that a drain began: it cancels the
    /// cancellable ones (even where the speech disallows interruptions), rejects with
    /// `rejected_because` every one that waits for approval, or would once its before-call
    /// hook lets it go (cancellable or not: nobody would be left to approve it), and leaves the
    /// others to finish.
    pub(crate) fn drain(&self, which: impl Fn(&Running) -> bool, rejected_because: &str) {
        for running in self.iter().filter(|r| which(r)) {
            let Some(toolset) = &running.toolset else { continue };
            let _ = toolset.cast(ToolsetMsg::Reject {
                call_id: running.call.call_id.clone(),
                reason: rejected_because.to_string(),
                reply: None,
                drain: true,
            });
        }
    }

    /// Aborts every call `which` selects (a drain ran out of time).
    pub(crate) fn abort(&self, which: impl Fn(&Running) -> bool) {
        for running in self.iter().filter(|r| which(r)) {
            let Some(toolset) = &running.toolset else { continue };
            let call_id = running.call.call_id.clone();
            let _ = toolset.cast(ToolsetMsg::Abort { call_id });
        }
    }

    /// The calls running now, in call-id order.
    pub(crate) fn list(&self) -> Vec<RunningToolCall> {
        self.iter()
            .map(|r| RunningToolCall {
                call_id: r.call.call_id.clone(),
                name: r.call.name.clone(),
                arguments: r.call.arguments.clone(),
                cancellable: r.cancellable,
                awaiting_approval: r.awaiting_approval,
            })
            .collect()
    }

    /// `context` for an LLM request, with a placeholder pair for every running call it does
    /// not mention (§16): never persisted.
    pub(crate) fn with_placeholders(&self, context: &Arc<ChatContext>) -> Arc<ChatContext> {
        // Few calls run at a time: scanning the context (from the end, where they are) per
        // running call is cheaper than indexing every call id of the conversation per request.
        let mentions = |call_id: &str| {
            context.iter().rev().any(|item| match item {
                ChatItem::FunctionCall(c) => c.call_id == call_id,
                ChatItem::FunctionCallOutput(o) => o.call_id == call_id,
                _ => false,
            })
        };
        let missing: Vec<&FunctionCall> =
            self.iter().map(|r| &*r.call).filter(|c| !mentions(&c.call_id)).collect();
        if missing.is_empty() {
            return Arc::clone(context);
        }
        let mut with_placeholders = ChatContext::clone(context);
        for call in missing {
            let mut copy = FunctionCall::clone(call);
            copy.extra.insert(PLACEHOLDER.into(), serde_json::Value::Bool(true));
            let output = FunctionCallOutput {
                id: format!("{}/placeholder", call.id),
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                output: STILL_RUNNING.into(),
                is_error: false,
                reply_required: true,
                created_at: call.created_at,
            };
            with_placeholders.insert(ChatItem::FunctionCall(copy));
            with_placeholders.insert(ChatItem::FunctionCallOutput(output));
        }
        Arc::new(with_placeholders)
    }
}
