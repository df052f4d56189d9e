//! The running-call index: every call a toolset registered and has not ended yet, by call id;
//! and the drain of calls when a handoff or a close bounds how long they may still run
//! (decision 7).
//!
//! Invariant: a call is here from its `CallRegistered` to its `tool_call_ended` event (the
//! fan-out hands every event here before it leaves), so the index answers "what runs now" for
//! the host, for cancels, for the idle and away decisions, and for the placeholder pairs an
//! LLM request needs (§16).
//!
//! Reads: `link`, `close`, `handoff` (which calls it drains), `current` (its Activity, the
//! session's toolsets). Writes: `calls`. Emits `tool_call_started`; restarts the away timer
//! (presence) and releases idle waiters (idle) when a call ends; at the drain timeout, tells
//! the Activity and the toolsets to expire.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{ChatContext, ChatItem, EventKind, FunctionCall, FunctionCallOutput};
use ractor::{ActorRef, RpcReplyPort};

use super::state::SessionState;
use crate::messages::{ActivityMsg, RunningToolCall, TimerMsg, ToolsetMsg};
use crate::support::task::OwnedTask;
use crate::types::error::{ApprovalError, CancelError};

/// Marks a placeholder copy of a running call in an LLM request (§16).
const PLACEHOLDER: &str = "__colloquy_running_call_placeholder";

/// The output a running call shows in requests made while it runs (§16).
use colloquy_model::text::STILL_RUNNING;

/// A running call, as the Session knows it.
pub(super) struct Running {
    call: FunctionCall,
    toolset: ActorRef<ToolsetMsg>,
    cancellable: bool,
    /// Run by the current agent's toolsets (drained at handoff).
    agent_scoped: bool,
    /// Waiting for the host's approval (from its `x_tool_approval_requested` event to its
    /// approval or end).
    awaiting_approval: bool,
}

impl Running {
    /// The toolset running it.
    pub(super) fn toolset(&self) -> &ActorRef<ToolsetMsg> {
        &self.toolset
    }

    /// Run by the current agent's toolsets (drained at handoff).
    pub(super) fn agent_scoped(&self) -> bool {
        self.agent_scoped
    }
}

#[derive(Default)]
pub(super) struct RunningCalls {
    /// Boxed: a map's first node holds room for eleven entries, and a running call is large.
    running: BTreeMap<String, Box<Running>>,
    /// The drain timer of a handoff or close in progress.
    drain_timer: Option<OwnedTask>,
}

impl RunningCalls {
    fn insert(&mut self, running: Running) {
        self.running.insert(running.call.call_id.clone(), Box::new(running));
    }

    fn remove(&mut self, call_id: &str) {
        self.running.remove(call_id);
    }

    /// The drain it bounded is over (a handoff completed).
    pub(super) fn stop_drain_timer(&mut self) {
        self.drain_timer = None;
    }

    /// Records whether `call_id` waits for approval (its toolset's events say so).
    fn set_awaiting(&mut self, call_id: &str, awaiting: bool) {
        if let Some(running) = self.running.get_mut(call_id) {
            running.awaiting_approval = awaiting;
        }
    }

    /// Asks the call's toolset to approve (`reason` `None`) or reject a waiting call; the
    /// toolset answers the caller.
    pub(super) fn answer(
        &self,
        call_id: String,
        reason: Option<String>,
        reply: RpcReplyPort<Result<(), ApprovalError>>,
    ) {
        let Some(running) = self.running.get(&call_id) else {
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

    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Running> {
        self.running.values().map(|r| &**r)
    }

    /// Asks the call's toolset to cancel it; the toolset answers the caller.
    pub(super) fn cancel(&self, call_id: String, reply: RpcReplyPort<Result<(), CancelError>>) {
        match self.running.get(&call_id) {
            Some(running) => {
                let cancel = ToolsetMsg::Cancel { call_id, reply: Some(reply), drain: false };
                let _ = running.toolset.cast(cancel);
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
    pub(super) fn drain(&self, which: impl Fn(&Running) -> bool, rejected_because: &str) {
        for running in self.iter().filter(|r| which(r)) {
            let _ = running.toolset.cast(ToolsetMsg::Reject {
                call_id: running.call.call_id.clone(),
                reason: rejected_because.to_string(),
                reply: None,
                drain: true,
            });
        }
    }

    /// Aborts every call `which` selects (a drain ran out of time).
    fn abort(&self, which: impl Fn(&Running) -> bool) {
        for running in self.iter().filter(|r| which(r)) {
            let call_id = running.call.call_id.clone();
            let _ = running.toolset.cast(ToolsetMsg::Abort { call_id });
        }
    }

    /// The calls running now, in call-id order.
    pub(super) fn list(&self) -> Vec<RunningToolCall> {
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
    pub(super) fn with_placeholders(&self, context: &Arc<ChatContext>) -> Arc<ChatContext> {
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

impl SessionState {
    /// What a call's event going out says about the index: whether it waits for approval,
    /// and its end (it leaves the index as its `tool_call_ended` goes out, whoever emits it).
    pub(super) fn note_call_event(&mut self, kind: &EventKind) {
        match kind {
            EventKind::ToolApprovalRequested { call_id, .. } => {
                self.calls.set_awaiting(call_id, true);
            }
            EventKind::ToolCallApproved { call_id } => self.calls.set_awaiting(call_id, false),
            EventKind::ToolCallEnded { call_id, .. } => {
                self.calls.remove(call_id);
                // The last tool to land restarts the away window in full (§10.4).
                self.update_away_timer(true);
                self.release_idle_waiters();
            }
            _ => {}
        }
    }

    /// A toolset registered a call.
    pub(super) fn call_registered(
        &mut self,
        call: FunctionCall,
        toolset: ActorRef<ToolsetMsg>,
        cancellable: bool,
        agent_scoped: bool,
    ) {
        let (call_id, name) = (call.call_id.clone(), call.name.clone());
        let awaiting_approval = false; // until its toolset's request event
        self.calls.insert(Running { call, toolset, cancellable, agent_scoped, awaiting_approval });
        self.update_away_timer(false);
        self.emit_now(EventKind::ToolCallStarted { call_id, name });
    }

    /// Starts the drain timer, if the session has one (decision 7).
    pub(super) fn start_drain_timer(&mut self) {
        let Some(timeout) = self.link.options.drain_timeout else { return };
        let session = self.link.actor.clone();
        self.calls.drain_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(TimerMsg::DrainTimeout.into());
        }));
    }

    /// The drain ran out of time: abort the calls it waits for (all of them at close, the
    /// old agent's at a handoff); each ends `error` "drain timeout", and the toolsets it
    /// drains start no new call (a speech still winding down may yet dispatch one).
    pub(super) fn drain_timeout(&mut self) {
        self.calls.drain_timer = None;
        let closing = self.close.is_closing();
        let draining = self.handoff.as_ref().filter(|h| h.is_drained());
        self.calls.abort(|running| closing || draining.is_some_and(|h| h.drains(running)));
        let _ = self.current.activity().cast(ActivityMsg::DrainExpired);
        if closing {
            for toolset in self.current.factory().session_toolsets().values() {
                let _ = toolset.cast(ToolsetMsg::Expire);
            }
        }
    }
}
