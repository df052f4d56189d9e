//! Deferred replies, as the Session runs them (§9, decisions 4, 15 and 17):
//! forwarding pairs to the ReplyCoalescer, inviting its offer when the floor is free, and
//! admitting an offer as one reply speech.

use std::sync::Arc;

use colloquy_core::templates::call_ids_json;
use colloquy_core::{ErrorSource, EventKind, ReplyStatus, SpeechSource};
use colloquy_llm::{RequestKind, ToolChoice};
use ractor::{ActorCell, ActorRef};

use super::state::SessionState;
use crate::protocol::{CoalescerMsg, PendingReply, SpeechContent};

impl SessionState {
    /// Forwards a toolset's pair to the coalescer, spawning it first if need be.
    pub async fn enqueue_reply(&mut self, supervisor: ActorCell, pending: PendingReply) {
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
        if self.replies.pending()
            && !self.close.is_closing()
            && !self.floor.is_held()
            && self.floor_free()
        {
            self.replies.invite(&self.link.coalescer);
        }
    }

    /// A pair was inserted and waits for a deferred reply.
    pub fn await_reply(&mut self, update_id: String) {
        if self.close.is_closing() {
            return; // replies pending at close are dropped (§9.3)
        }
        if let Some(run) = &mut self.run {
            run.pending_updates.insert(update_id.clone());
        }
        self.replies.await_reply(update_id);
        self.invite_coalescer();
    }

    /// The ReplyCoalescer offers its pending pairs (it was invited). Admitted only if the
    /// floor is still free, inside this handler, so a user turn that arrived first always
    /// wins (decision 17); the answer goes back to the coalescer.
    pub fn offer_reply(&mut self, batch: &[Arc<PendingReply>], coalescer: &ActorRef<CoalescerMsg>) {
        self.replies.offered();
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
        if self.close.is_closing() {
            return true; // pending replies are dropped at close (§9.3)
        }
        if !self.floor_free() || self.floor.is_held() {
            return false;
        }
        let batch = self.replies.take(batch);
        let Some(last) = batch.last() else { return true };
        let update_ids: Vec<String> = batch.iter().map(|p| p.update_id.clone()).collect();
        let instructions = match self.reply_instructions(last, &update_ids) {
            Ok(text) => text,
            Err(message) => {
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return true;
            }
        };
        // Decision 15: only updates → `none`; at least one final → unset.
        let tool_choice = (!batch.iter().any(|p| p.is_final)).then_some(ToolChoice::None);
        let handoff = batch.iter().any(|p| *p.agent != *self.current.id);
        for pending in batch.iter().filter(|p| *p.agent != *self.current.id) {
            self.conversation.move_pair(&pending.agent, &self.current.id, &pending.update_id);
        }
        let content = SpeechContent::Reply {
            kind: RequestKind::DeferredReply,
            extra_instructions: Some(instructions),
            tool_choice,
        };
        if let Some(run) = &mut self.run {
            for id in &update_ids {
                run.pending_updates.remove(id);
            }
        }
        let speech_id = self.floor.upcoming_speech_id();
        if self.create_speech(SpeechSource::DeferredReply, content).is_err() {
            return true;
        }
        self.replies.speaking_started(speech_id.clone(), update_ids.clone(), handoff);
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
        let templates = &self.current.templates;
        let template = if self.conversation.is_last(&self.current.id, &last.output_item_id) {
            &templates.reply_at_tail
        } else {
            &templates.reply_maybe_covered
        };
        let call_ids = call_ids_json(update_ids);
        template.render_with(&[("call_ids", &call_ids)]).map_err(|e| e.to_string())
    }
}
