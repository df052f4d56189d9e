//! A session resumed from its store (docs/durability.md): the calls that were running when its
//! process ended are settled, and a store that fails ends the session.
//!
//! Decides `Committed` (each call in doubt gets its output) and `Resumed`; emits
//! `x_session_resumed`, and `x_store_error` before closing with `store_failed`.

use std::sync::Arc;

use colloquy_model::text::INTERRUPTED_BY_RESTART;
use colloquy_model::{
    ChatItem, CloseReason, EventKind, FunctionCall, FunctionCallOutput, InDoubtOutcome, ResumedCall,
};
use colloquy_store::{CallInDoubt, OwedReply};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ChildMsg, PendingReply};
use crate::support::pair::Pair;

impl SessionState {
    /// Settles the calls in doubt by the default policy (`fail`): each gets an error output
    /// that says it may or may not have completed, and nothing runs again. Deferred replies
    /// the model was owed go to the coalescer again, so each is delivered once.
    pub(super) fn resumed(&mut self, in_doubt: Vec<CallInDoubt>, owed: Vec<OwedReply>) {
        let mut outputs = Vec::with_capacity(in_doubt.len());
        let mut resumed = Vec::with_capacity(in_doubt.len());
        for CallInDoubt { call, .. } in in_doubt {
            outputs.extend(self.interrupted(&call));
            resumed.push(ResumedCall::new(call.call_id, call.name, InDoubtOutcome::Failed));
        }
        if !outputs.is_empty() {
            let agent = Arc::clone(self.agent.current.shared_id());
            self.commit(agent, None, outputs);
        }
        self.apply(Fact::Resumed { in_doubt: &resumed });
        self.emit_now(EventKind::SessionResumed { in_doubt: resumed });
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

    /// The items that tell the model `call` was interrupted, as a provider reads them: its
    /// output after its call item (committed now if a blocking step never got to commit it),
    /// or, when it was answered already (provisionally, or by its first update), a
    /// `<id>_final` pair.
    fn interrupted(&self, call: &FunctionCall) -> Vec<ChatItem> {
        let text = INTERRUPTED_BY_RESTART.replace("{name}", &call.name);
        let context = self.conversation.context(self.agent.current.id());
        let mentions = |output: bool| {
            context.is_some_and(|c| {
                c.iter().any(|item| match item {
                    ChatItem::FunctionCall(c) => !output && c.call_id == call.call_id,
                    ChatItem::FunctionCallOutput(o) => output && o.call_id == call.call_id,
                    _ => false,
                })
            })
        };
        let clock = &self.link.clock;
        if mentions(true) {
            let id = format!("{}_final", call.call_id);
            return Pair::new(clock, call, &id, text, true, false).items().to_vec();
        }
        let output = ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: clock.item_id(),
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: text,
            is_error: true,
            reply_required: false,
            created_at: clock.now(),
        });
        match mentions(false) {
            true => vec![output],
            false => vec![ChatItem::FunctionCall(call.clone()), output],
        }
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
        for call_id in journal.stored(through) {
            self.tools.calls.journaled(call_id);
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
