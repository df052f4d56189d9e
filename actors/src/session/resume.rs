//! A session resumed from its store (docs/durability.md): the calls that were running when its
//! process ended are settled, and a store that fails ends the session.
//!
//! Decides `Committed` (each call in doubt gets its output, or is told it runs again) and
//! `Resumed`; emits `x_session_resumed`, and `x_store_error` before closing with
//! `store_failed`.

use std::sync::Arc;

use colloquy_model::text::{
    INTERRUPTED_ASK, INTERRUPTED_BY_RESTART, INTERRUPTED_NOT_STARTED, INTERRUPTED_RERUN,
};
use colloquy_model::{
    ChatItem, CloseReason, EventKind, FunctionCall, FunctionCallOutput, InDoubtOutcome,
    OnInterrupted, ResumedCall,
};
use colloquy_store::{CallInDoubt, OwedReply};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ActivityMsg, ChildMsg, PendingReply, RerunCall, mark_non_blocking};
use crate::support::pair::Pair;

impl SessionState {
    /// Settles each call in doubt by its tool's `on_interrupted` policy
    /// (docs/durability.md#on-interrupted): `fail` ends it with an error that says it may or
    /// may not have completed; `rerun` and `ask` tell the model it runs again and hand it to
    /// the Activity, which runs it (after the host's approval, for `ask`) with the same call
    /// id, so its result comes as a deferred reply; a call that had not started goes on as it
    /// would have (docs/durability.md#waiting). Deferred replies the model was owed go to the
    /// coalescer again, so each is delivered once.
    pub(super) fn resumed(&mut self, in_doubt: Vec<CallInDoubt>, owed: Vec<OwedReply>) {
        let mut items = Vec::with_capacity(in_doubt.len());
        let mut resumed = Vec::with_capacity(in_doubt.len());
        let mut reruns = Vec::new();
        for CallInDoubt { call, started, .. } in in_doubt {
            let outcome = self.outcome_of(&call, started);
            let settled = self.interrupted(&call, outcome);
            items.extend(settled.items);
            resumed.push(ResumedCall::new(&call.call_id, &call.name, outcome));
            if outcome != InDoubtOutcome::Failed {
                // An `ask` call that waited for its approval when the process died again is
                // asked again, not let through.
                let ask = outcome == InDoubtOutcome::Asked
                    || (outcome == InDoubtOutcome::NotStarted
                        && self.policy_of(&call) == OnInterrupted::Ask);
                reruns.push(RerunCall { call, ask, updates: settled.updates });
            }
        }
        if !items.is_empty() {
            let agent = Arc::clone(self.agent.current.shared_id());
            self.commit(agent, None, items);
        }
        self.apply(Fact::Resumed { in_doubt: &resumed });
        self.emit_now(EventKind::SessionResumed { in_doubt: resumed });
        // A call that runs again stays in doubt in the journal until it ends (the `resumed`
        // record ends only the failed ones): a crash before its run finds it again.
        if !reruns.is_empty() {
            let call_ids: Vec<String> = reruns.iter().map(|r| r.call.call_id.clone()).collect();
            self.apply(Fact::RerunsAsked { call_ids: &call_ids });
            let _ = self.agent.current.activity().cast(ActivityMsg::Rerun(reruns));
        }
        for reply in owed {
            let is_final = reply.update_id.ends_with("_final");
            self.await_reply(reply.update_id.clone());
            let pending = PendingReply {
                update_id: reply.update_id,
                agent: Arc::from(reply.agent),
                output_item_id: reply.output_item_id,
                is_final,
            };
            // As a toolset's pair would come: the coalescer starts, and offers once idle.
            let _ = self.link.actor.cast(ChildMsg::Enqueue(pending).into());
        }
    }

    /// What becomes of `call`: one whose body had not `started` goes on as it would have;
    /// else its tool's policy (else its toolsets', else the session's). A tool the agent no
    /// longer has cannot run again, so its call fails.
    fn outcome_of(&self, call: &FunctionCall, started: bool) -> InDoubtOutcome {
        if self.agent.current.catalog().get(&call.name).is_none() {
            return InDoubtOutcome::Failed;
        }
        if !started {
            return InDoubtOutcome::NotStarted;
        }
        match self.policy_of(call) {
            OnInterrupted::Rerun => InDoubtOutcome::Rerun,
            OnInterrupted::Ask => InDoubtOutcome::Asked,
            _ => InDoubtOutcome::Failed,
        }
    }

    /// `call`'s tool's `on_interrupted` (else its toolsets', else the session's).
    fn policy_of(&self, call: &FunctionCall) -> OnInterrupted {
        let tool = self.agent.current.catalog().get(&call.name);
        let own = tool.and_then(|tool| tool.limits().on_interrupted);
        own.unwrap_or(self.link.options.on_interrupted)
    }

    /// The items that tell the model what became of `call`, as a provider reads them: its
    /// output after its call item (committed now if a blocking step never got to commit it),
    /// or, when it was answered already (provisionally, or by its first update) or its item is
    /// in another agent's context (a session-scoped call across a handoff), a `<id>_final`
    /// pair for a failed call, and nothing for one that runs again (its result comes as that
    /// pair). Also how many of its updates the history holds, so that a call run again
    /// numbers its own after them.
    fn interrupted(&self, call: &FunctionCall, outcome: InDoubtOutcome) -> Settled {
        let text = match outcome {
            InDoubtOutcome::Rerun => INTERRUPTED_RERUN,
            InDoubtOutcome::Asked => INTERRUPTED_ASK,
            InDoubtOutcome::NotStarted => INTERRUPTED_NOT_STARTED,
            _ => INTERRUPTED_BY_RESTART,
        };
        let text = text.replace("{name}", &call.name);
        let failed = outcome == InDoubtOutcome::Failed;
        // The whole history: after a handoff the call's items are in another agent's context.
        let (mut in_history, mut answered, mut updates) = (false, false, 0);
        for item in self.conversation.history_items() {
            match item {
                ChatItem::FunctionCall(c) if c.call_id == call.call_id => in_history = true,
                ChatItem::FunctionCallOutput(o) if o.call_id == call.call_id => answered = true,
                ChatItem::FunctionCallOutput(o) => {
                    let n = o.call_id.strip_prefix(call.call_id.as_str());
                    let n = n.and_then(|rest| rest.strip_prefix("_update_"));
                    if let Some(n) = n.and_then(|n| n.parse::<u32>().ok()) {
                        updates = updates.max(n);
                    }
                }
                _ => {}
            }
        }
        let context = self.conversation.context(self.agent.current.id());
        let here = context.is_some_and(|c| {
            c.iter().any(|i| matches!(i, ChatItem::FunctionCall(c) if c.call_id == call.call_id))
        });
        // Its item in another agent's context: the current one reads a self-contained pair.
        let answered = answered || (in_history && !here);
        let clock = &self.link.clock;
        if answered {
            let items = match failed {
                true => {
                    let id = format!("{}_final", call.call_id);
                    Pair::new(clock, call, &id, text, true, false).items().to_vec()
                }
                false => Vec::new(),
            };
            return Settled { items, updates: updates + 1 };
        }
        let output = ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: clock.item_id(),
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: text,
            is_error: failed,
            reply_required: false,
            created_at: clock.now(),
        });
        let mut items = Vec::with_capacity(2);
        if !here {
            let mut call = call.clone();
            if !failed {
                // Answered for now: its result comes later, as a background call's does.
                mark_non_blocking(&mut call.extra);
            }
            items.push(ChatItem::FunctionCall(call));
        }
        items.push(output);
        Settled { items, updates: 1 }
    }

    /// The store could not keep the journal (or another process took it over): the session
    /// says so and closes with `reason`, rather than go on as if what it does were durable.
    pub(super) fn store_failed(&mut self, why: String, reason: CloseReason) {
        if self.host.close.is_closing() {
            return;
        }
        tracing::error!(session = %self.link.id, "the session's store failed: {why}");
        // Nothing more reaches it; calls whose start is not on disk are rejected by the close's
        // drain, and calls registered later at once (`call_registered`).
        self.host.journal = None;
        self.emit_now(EventKind::StoreError { message: why });
        self.close(reason.name().into(), None);
    }

    /// The journal is on disk through record `through`: the calls it started may run their
    /// bodies (docs/durability.md#write-ahead).
    pub(super) fn journal_stored(&mut self, through: u64) {
        let Some(journal) = &mut self.host.journal else { return };
        let ready = journal.stored(through);
        // The host hears of these calls before their bodies run (their updates come after).
        self.release_starts(through);
        for (call_id, let_through) in ready {
            self.tools.calls.journaled(call_id, let_through);
        }
    }

    /// Hands the mailbox turn's records to the store's writer; a writer that cannot take
    /// them fails the session.
    pub(super) fn flush_journal(&mut self) {
        let Some(journal) = &mut self.host.journal else { return };
        if let Err(why) = journal.flush() {
            self.host.journal = None; // nothing more reaches the store
            self.store_failed(why, CloseReason::StoreFailed);
        }
    }
}

/// What a resume commits for a call in doubt, and the updates its context already numbers.
struct Settled {
    items: Vec<ChatItem>,
    updates: u32,
}
