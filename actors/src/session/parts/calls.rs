//! The running-call index: every call a toolset registered and has not ended yet, by call id.
//!
//! Invariant: a call is here from its `CallRegistered` to its `tool_call_ended` event, so the
//! index answers "what runs now" for the host, for cancels, for the idle and away decisions,
//! and for the placeholder pairs an LLM request needs (§16).

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{ChatContext, ChatItem, FunctionCall, FunctionCallOutput};
use ractor::{ActorRef, RpcReplyPort};

use crate::api::error::{ApprovalError, CancelError};
use crate::protocol::{RunningToolCall, ToolsetMsg};

/// Marks a placeholder copy of a running call in an LLM request (§16).
const PLACEHOLDER: &str = "__colloquy_running_call_placeholder";

/// The output a running call shows in requests made while it runs (§16).
const STILL_RUNNING: &str = "The tool call is still in progress.";

/// A running call, as the Session knows it.
pub(crate) struct Running {
    pub call: FunctionCall,
    pub toolset: ActorRef<ToolsetMsg>,
    pub cancellable: bool,
    /// Run by the current agent's toolsets (drained at handoff).
    pub agent_scoped: bool,
    /// Waiting for the host's approval (from its `x_tool_approval_requested` event to its
    /// approval or end).
    pub awaiting_approval: bool,
}

/// Boxed: a map's first node holds room for eleven entries, and a running call is large.
#[derive(Default)]
pub(crate) struct RunningCalls(BTreeMap<String, Box<Running>>);

impl RunningCalls {
    pub fn insert(&mut self, running: Running) {
        self.0.insert(running.call.call_id.clone(), Box::new(running));
    }

    pub fn remove(&mut self, call_id: &str) {
        self.0.remove(call_id);
    }

    /// Records whether `call_id` waits for approval (its toolset's events say so).
    pub fn set_awaiting(&mut self, call_id: &str, awaiting: bool) {
        if let Some(running) = self.0.get_mut(call_id) {
            running.awaiting_approval = awaiting;
        }
    }

    /// Asks the call's toolset to approve (`reason` `None`) or reject a waiting call; the
    /// toolset answers the caller.
    pub fn answer(
        &self,
        call_id: String,
        reason: Option<String>,
        reply: RpcReplyPort<Result<(), ApprovalError>>,
    ) {
        let Some(running) = self.0.get(&call_id) else {
            let _ = reply.send(Err(ApprovalError::NotFound(call_id)));
            return;
        };
        let reply = Some(reply);
        let message = match reason {
            None => ToolsetMsg::Approve { call_id, reply },
            Some(reason) => ToolsetMsg::Reject { call_id, reason, reply, drain: false },
        };
        let _ = running.toolset.cast(message);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Running> {
        self.0.values().map(|r| &**r)
    }

    /// Asks the call's toolset to cancel it; the toolset answers the caller.
    pub fn cancel(&self, call_id: String, reply: RpcReplyPort<Result<(), CancelError>>) {
        match self.0.get(&call_id) {
            Some(running) => {
                let cancel = ToolsetMsg::Cancel { call_id, reply: Some(reply), drain: false };
                let _ = running.toolset.cast(cancel);
            }
            None => {
                let _ = reply.send(Err(CancelError::NotFound(call_id)));
            }
        }
    }

    /// Cancels, as a drain does (even where the speech disallows interruptions), every
    /// cancellable call `which` selects, and rejects with `rejected_because` every one of them
    /// that waits for approval (cancellable or not: nobody would be left to approve it).
    pub fn drain(&self, which: impl Fn(&Running) -> bool, rejected_because: &str) {
        for running in self.iter().filter(|r| (r.cancellable || r.awaiting_approval) && which(r)) {
            let call_id = running.call.call_id.clone();
            let message = match running.awaiting_approval {
                true => ToolsetMsg::Reject {
                    call_id,
                    reason: rejected_because.to_string(),
                    reply: None,
                    drain: true,
                },
                false => ToolsetMsg::Cancel { call_id, reply: None, drain: true },
            };
            let _ = running.toolset.cast(message);
        }
    }

    /// Aborts every call `which` selects (a drain ran out of time).
    pub fn abort(&self, which: impl Fn(&Running) -> bool) {
        for running in self.iter().filter(|r| which(r)) {
            let call_id = running.call.call_id.clone();
            let _ = running.toolset.cast(ToolsetMsg::Abort { call_id });
        }
    }

    /// The calls running now, in call-id order.
    pub fn list(&self) -> Vec<RunningToolCall> {
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
    pub fn with_placeholders(&self, context: &Arc<ChatContext>) -> Arc<ChatContext> {
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
            self.iter().map(|r| &r.call).filter(|c| !mentions(&c.call_id)).collect();
        if missing.is_empty() {
            return Arc::clone(context);
        }
        let mut with_placeholders = ChatContext::clone(context);
        for call in missing {
            let mut copy = call.clone();
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
