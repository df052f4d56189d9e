//! Deferred replies (§9, decisions 4, 15 and 17): the pairs that wait for a reply, the
//! handshake with the ReplyCoalescer (forwarding pairs, inviting its offer when the floor is
//! free, admitting an offer as one reply speech), and the speeches that deliver replies.
//!
//! Invariants: an update id is unreplied from its eager insert until a reply speech takes it
//! (or the session closes); the coalescer is invited (`SessionIdle`) at most once per offer;
//! a reply speech reports `tool_reply_updated` once when scheduled and once when done.
//!
//! Reads: `link`, `current` (its id and templates), `floor`, `close`. Writes: `replies`,
//! `conversation` (a pair moves to the agent that replies), `testing` (the run waits for
//! replies). Emits `tool_reply_updated`; starts the reply speech (floor).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use colloquy_llm::{RequestKind, ToolChoice};
use colloquy_model::templates::call_ids_json;
use colloquy_model::{ErrorSource, EventKind, ReplyStatus, SpeechSource};
use ractor::{ActorCell, ActorRef};

use super::state::SessionState;
use crate::messages::{CoalescerMsg, CoalescerSlot, PendingReply, SpeechContent};

/// A speech delivering a deferred reply.
struct ReplySpeech {
    update_ids: Vec<String>,
    /// It committed something (else it counts as skipped).
    said: bool,
    /// Another agent than the one that received the pairs delivers them.
    handoff: bool,
}

#[derive(Default)]
pub(super) struct Replies {
    /// Update ids of inserted pairs still waiting for their deferred reply to be admitted.
    unreplied: BTreeSet<String>,
    /// The coalescer was told the floor is free (`SessionIdle`) and has not offered since.
    invited: bool,
    /// Reply speeches in flight, by speech id.
    speaking: BTreeMap<String, ReplySpeech>,
}

impl Replies {
    /// Some pair waits for its reply.
    pub(super) fn pending(&self) -> bool {
        !self.unreplied.is_empty()
    }

    /// A speech committed items: a reply speech that did has said something.
    pub(super) fn said(&mut self, speech_id: &str) {
        if let Some(speech) = self.speaking.get_mut(speech_id) {
            speech.said = true;
        }
    }

    /// A speech ended: the `tool_reply_updated` event that closes a reply speech.
    pub(super) fn speech_done(&mut self, speech_id: &str, interrupted: bool) -> Option<EventKind> {
        let (speech_id, speech) = self.speaking.remove_entry(speech_id)?;
        let status = match (interrupted, speech.said) {
            (true, _) => ReplyStatus::Interrupted,
            (false, true) => ReplyStatus::Completed,
            (false, false) => ReplyStatus::Skipped,
        };
        let ReplySpeech { update_ids, handoff, .. } = speech;
        Some(EventKind::ToolReplyUpdated { update_ids, status, speech_id, handoff })
    }

    /// A pair was inserted and waits for a deferred reply.
    pub(super) fn await_reply(&mut self, update_id: String) {
        self.unreplied.insert(update_id);
    }

    /// Invites the coalescer (in `slot`, once spawned) to offer what it holds, unless it was
    /// invited already.
    fn invite(&mut self, slot: &CoalescerSlot) {
        if self.invited {
            return;
        }
        if let Some(coalescer) = slot.get() {
            self.invited = coalescer.cast(CoalescerMsg::SessionIdle).is_ok();
        }
    }

    /// The coalescer offered: the next invitation is a new one.
    fn offered(&mut self) {
        self.invited = false;
    }

    /// The offered pairs still unreplied, now taken by a reply (in offer order).
    pub(super) fn take<'a>(
        &mut self,
        batch: &'a [Arc<PendingReply>],
    ) -> Vec<&'a Arc<PendingReply>> {
        batch.iter().filter(|p| self.unreplied.remove(&p.update_id)).collect()
    }

    /// Speech `speech_id` delivers the reply to `update_ids`.
    fn speaking_started(&mut self, speech_id: String, update_ids: Vec<String>, handoff: bool) {
        self.speaking.insert(speech_id, ReplySpeech { update_ids, said: false, handoff });
    }

    /// The reply speeches in flight (an Activity that failed took them with it).
    pub(super) fn speaking(&self) -> Vec<String> {
        self.speaking.keys().cloned().collect()
    }

    /// Pending replies are dropped at close (§9.3).
    pub(super) fn drop_pending(&mut self) {
        self.unreplied.clear();
    }
}

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
        if self.replies.pending()
            && !self.close.is_closing()
            && !self.floor.is_held()
            && self.floor_free()
        {
            self.replies.invite(&self.link.coalescer);
        }
    }

    /// A pair was inserted and waits for a deferred reply.
    pub(super) fn await_reply(&mut self, update_id: String) {
        if self.close.is_closing() {
            return; // replies pending at close are dropped (§9.3)
        }
        self.testing.awaits_reply(&update_id);
        self.replies.await_reply(update_id);
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
        let handoff = batch.iter().any(|p| *p.agent != *self.current.id());
        for pending in batch.iter().filter(|p| *p.agent != *self.current.id()) {
            self.conversation.move_pair(&pending.agent, self.current.id(), &pending.update_id);
        }
        let content = SpeechContent::Reply {
            kind: RequestKind::DeferredReply,
            extra_instructions: Some(instructions),
            tool_choice,
        };
        self.testing.replied(&update_ids);
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
        let templates = self.current.templates();
        let template = if self.conversation.is_last(self.current.id(), &last.output_item_id) {
            &templates.reply_at_tail
        } else {
            &templates.reply_maybe_covered
        };
        let call_ids = call_ids_json(update_ids);
        template.render_with(&[("call_ids", &call_ids)]).map_err(|e| e.to_string())
    }
}
