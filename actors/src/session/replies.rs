//! Deferred replies (§9, decisions 4, 15 and 17), as the Session runs them: forwarding pairs
//! to the ReplyCoalescer, inviting its offer when the floor is free, admitting an offer as one
//! reply speech. The state is `parts/replies.rs`'s.
//!
//! Decides `ReplyAwaited`, `CoalescerInvited`, `CoalescerOffered`, `RepliesTaken`,
//! `PairMoved` (a pair moves to the agent that replies) and `ReplySpeechStarted`; emits
//! `tool_reply_updated` (scheduled); starts the reply speech.

use std::sync::Arc;

use colloquy_llm::{RequestKind, ToolChoice};
use colloquy_model::templates::call_ids_json;
use colloquy_model::{ErrorSource, EventKind, ReplyStatus, SpeechSource};
use ractor::{ActorCell, ActorRef};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{CoalescerMsg, PendingReply, SpeechContent};

impl SessionState {
    /// Forwards a toolset's pair to the coalescer, spawning it first if need be.
    pub(super) async fn enqueue_reply(&mut self, supervisor: ActorCell, pending: PendingReply) {
        if let Err(e) = crate::coalescer::forward(&self.link, supervisor, pending).await {
            // Only a session already stopping fails to spawn a child.
            tracing::warn!(session = %self.link.id, "reply coalescer did not start: {e}");
        }
        self.invite_coalescer();
    }

    /// Tells the coalescer the floor is free (`SessionIdle`) when a deferred reply could start
    /// now, unless it was told already: it offers what it holds once, when told (decision 17).
    /// Pairs that land while the session is busy wait for the floor and go out together.
    pub(super) fn invite_coalescer(&mut self) {
        if self.tools.replies.pending()
            && !self.tools.replies.invited()
            && !self.host.close.is_closing()
            && !self.floor.is_held()
            && self.floor_free()
            && let Some(coalescer) = self.link.coalescer.get()
            && coalescer.cast(CoalescerMsg::SessionIdle).is_ok()
        {
            self.apply(Fact::CoalescerInvited);
        }
    }

    /// A pair was inserted and waits for a deferred reply.
    pub(super) fn await_reply(&mut self, update_id: String) {
        if self.host.close.is_closing() {
            return; // replies pending at close are dropped (§9.3)
        }
        self.apply(Fact::ReplyAwaited { update_id: &update_id });
        self.invite_coalescer();
    }

    /// The ReplyCoalescer offers its pending pairs (it was invited). Admitted only if the
    /// floor is still free, inside this handler, so a user turn that arrived first always
    /// wins (decision 17); the answer goes back to the coalescer.
    pub(super) fn offer_reply(
        &mut self,
        batch: &[Arc<PendingReply>],
        coalescer: &ActorRef<CoalescerMsg>,
    ) {
        self.apply(Fact::CoalescerOffered);
        let answer = match self.admit_reply(batch) {
            true => CoalescerMsg::Admitted,
            false => CoalescerMsg::Busy,
        };
        let _ = coalescer.cast(answer);
        // Pairs the coalescer got after it offered, if nothing took the floor meanwhile.
        self.invite_coalescer();
    }

    /// Starts the reply speech for the offered pairs still unreplied; false when the floor
    /// was taken meanwhile (the offer is turned down).
    fn admit_reply(&mut self, batch: &[Arc<PendingReply>]) -> bool {
        if self.host.close.is_closing() {
            return true; // pending replies are dropped at close (§9.3)
        }
        if !self.floor_free() || self.floor.is_held() {
            return false;
        }
        let batch = self.tools.replies.unreplied(batch);
        let Some(last) = batch.last() else { return true };
        let update_ids: Vec<String> = batch.iter().map(|p| p.update_id.clone()).collect();
        self.apply(Fact::RepliesTaken { update_ids: &update_ids });
        let instructions = match self.reply_instructions(last, &update_ids) {
            Ok(text) => text,
            Err(message) => {
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return true;
            }
        };
        // Decision 15: only updates → `none`; at least one final → unset.
        let tool_choice = (!batch.iter().any(|p| p.is_final)).then_some(ToolChoice::None);
        let current = self.agent.current.id().to_string();
        let handoff = batch.iter().any(|p| *p.agent != *current);
        for pending in batch.iter().filter(|p| *p.agent != *current) {
            let (from, update_id) = (&*pending.agent, &*pending.update_id);
            self.apply(Fact::PairMoved { from, to: &current, update_id });
        }
        let content = SpeechContent::Reply {
            kind: RequestKind::DeferredReply,
            extra_instructions: Some(instructions),
            tool_choice,
        };
        let speech_id = self.floor.upcoming_speech_id();
        if self.create_speech(SpeechSource::DeferredReply, content).is_err() {
            return true;
        }
        let (id, ids) = (&*speech_id, &*update_ids);
        self.apply(Fact::ReplySpeechStarted { speech_id: id, update_ids: ids, handoff });
        self.emit_now(EventKind::ToolReplyUpdated {
            update_ids,
            status: ReplyStatus::Scheduled,
            speech_id,
            handoff,
        });
        true
    }

    /// The reply's instructions: the at-tail template when the newest pending output is still
    /// the agent's last item, the maybe-covered one otherwise (§9.2 step 5).
    fn reply_instructions(
        &self,
        last: &PendingReply,
        update_ids: &[String],
    ) -> Result<String, String> {
        let current = &self.agent.current;
        let templates = current.templates();
        let template = if self.conversation.is_last(current.id(), &last.output_item_id) {
            &templates.reply_at_tail
        } else {
            &templates.reply_maybe_covered
        };
        let call_ids = call_ids_json(update_ids);
        template.render_with(&[("call_ids", &call_ids)]).map_err(|e| e.to_string())
    }
}
