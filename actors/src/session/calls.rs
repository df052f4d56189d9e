//! Running calls, as the Session follows them: a toolset registers each, the calls' events
//! say when one waits for approval and when it ends, and a handoff or a close bounds how long
//! they may still run (decision 7). The index is `parts/calls.rs`'s.
//!
//! Decides `CallStarted`, `ApprovalAsked`, `CallApproved`, `CallEnded`; emits
//! `tool_call_started`; restarts the away timer and releases idle waiters when a call ends;
//! at the drain timeout, tells the Activity and the toolsets to expire.

use std::sync::Arc;

use colloquy_model::{EventKind, FunctionCall, SessionEvent};
use ractor::ActorRef;

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ActivityMsg, ToolsetMsg};

impl SessionState {
    /// What a call's event going out says about the index: whether it waits for approval,
    /// and its end (it leaves the index as its `tool_call_ended` goes out, whoever emits it).
    pub(super) fn note_call_event(&mut self, kind: &EventKind) {
        match kind {
            EventKind::ToolApprovalRequested { call_id, .. } => {
                self.apply(Fact::ApprovalAsked { call_id });
            }
            EventKind::ToolCallApproved { call_id } => {
                self.apply(Fact::CallApproved { call_id });
            }
            EventKind::ToolCallEnded { call_id, .. } => {
                self.apply(Fact::CallEnded { call_id });
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
        call: Arc<FunctionCall>,
        toolset: ActorRef<ToolsetMsg>,
        cancellable: bool,
        agent_scoped: bool,
        resumed: bool,
    ) {
        self.apply(Fact::CallStarted { call: &call, cancellable, agent_scoped, resumed });
        // A store that failed can never write this call's start; a close that began before a
        // resumed call registered drains it as it would have (it never ran).
        let closing = resumed && self.host.close.is_closing();
        if (self.link.durable && self.host.journal.is_none()) || closing {
            // The store failed: this call's start can never be on disk, so it never runs.
            let _ = toolset.cast(ToolsetMsg::Reject {
                call_id: call.call_id.clone(),
                reason: "the session's store failed".into(),
                reply: None,
                drain: true,
            });
        }
        self.tools.calls.route(&call.call_id, toolset);
        self.update_away_timer(false);
        let (call_id, name) = (call.call_id.clone(), call.name.clone());
        let at_ms = self.link.clock.elapsed_ms();
        let started = SessionEvent { at_ms, kind: EventKind::ToolCallStarted { call_id, name } };
        // A host hears of a call once a crash can no longer take its start back
        // (docs/durability.md#starts-seen): its body waits for the same write.
        match self.host.journal.as_ref().and_then(|journal| journal.pending()) {
            Some(record) => self.host.held_starts.push((record, started)),
            None => self.emit(started),
        }
    }

    /// The held `tool_call_started` of calls whose start is on disk through record `through`,
    /// in the order the calls started.
    pub(super) fn release_starts(&mut self, through: u64) {
        if self.host.held_starts.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.host.held_starts);
        let (ready, waiting): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(record, _)| *record <= through);
        self.host.held_starts = waiting;
        for (_, started) in ready {
            self.emit(started);
        }
    }

    /// Before an event of call `call_id` goes out: its held start, if any, goes first (a call
    /// that ends, or asks for approval, before its start is on disk).
    pub(super) fn release_start_of(&mut self, call_id: &str) {
        let held = &mut self.host.held_starts;
        let of_call = |(_, e): &(u64, SessionEvent)| match &e.kind {
            EventKind::ToolCallStarted { call_id: id, .. } => id == call_id,
            _ => false,
        };
        if let Some(index) = held.iter().position(of_call) {
            let (_, started) = held.remove(index);
            self.emit(started);
        }
    }

    /// A call that waited is let through: its body starts once that is on disk; with the
    /// store gone it never can, so it ends as one that was never let through.
    pub(super) fn call_let_through(&mut self, call_id: &str) {
        self.apply(Fact::CallLetThrough { call_id });
        if self.host.journal.is_none()
            && let Some(toolset) = self.tools.calls.get(call_id).and_then(|r| r.toolset())
        {
            let _ = toolset.cast(ToolsetMsg::Reject {
                call_id: call_id.to_string(),
                reason: "the session's store failed".into(),
                reply: None,
                drain: true,
            });
        }
    }

    /// Starts the drain timer, if the session has one (decision 7).
    pub(super) fn start_drain_timer(&mut self) {
        let Some(timeout) = self.link.options.drain_timeout else { return };
        self.tools.calls.start_drain_timer(timeout, self.link.actor.clone());
    }

    /// The drain ran out of time: abort the calls it waits for (all of them at close, the
    /// old agent's at a handoff); each ends `error` "drain timeout", and the toolsets it
    /// drains start no new call (a speech still winding down may yet dispatch one).
    pub(super) fn drain_timeout(&mut self) {
        self.tools.calls.stop_drain_timer();
        self.apply(Fact::RerunsAbandoned);
        let closing = self.host.close.is_closing();
        let draining = self.agent.handoff.as_ref().filter(|h| h.is_drained());
        self.tools.calls.abort(|running| closing || draining.is_some_and(|h| h.drains(running)));
        let current = &self.agent.current;
        let _ = current.activity().cast(ActivityMsg::DrainExpired);
        if closing {
            for toolset in current.factory().session_toolsets().values() {
                let _ = toolset.cast(ToolsetMsg::Expire);
            }
        }
    }
}
