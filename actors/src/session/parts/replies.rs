//! The deferred-reply bookkeeping (§9, decision 17): the pairs that wait for
//! a reply, the handshake with the ReplyCoalescer, and the speeches that deliver replies.
//!
//! Invariants: an update id is unreplied from its eager insert until a reply speech takes it
//! (or the session closes); the coalescer is invited (`SessionIdle`) at most once per offer;
//! a reply speech reports `tool_reply_updated` once when scheduled and once when done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use colloquy_core::{EventKind, ReplyStatus};

use crate::protocol::{CoalescerMsg, CoalescerSlot, PendingReply};

/// A speech delivering a deferred reply.
struct ReplySpeech {
    update_ids: Vec<String>,
    /// It committed something (else it counts as skipped).
    said: bool,
    /// Another agent than the one that received the pairs delivers them.
    handoff: bool,
}

#[derive(Default)]
pub(crate) struct Replies {
    /// Update ids of inserted pairs still waiting for their deferred reply to be admitted.
    unreplied: BTreeSet<String>,
    /// The coalescer was told the floor is free (`SessionIdle`) and has not offered since.
    invited: bool,
    /// Reply speeches in flight, by speech id.
    speaking: BTreeMap<String, ReplySpeech>,
}

impl Replies {
    /// Some pair waits for its reply.
    pub fn pending(&self) -> bool {
        !self.unreplied.is_empty()
    }

    /// A speech committed items: a reply speech that did has said something.
    pub fn said(&mut self, speech_id: &str) {
        if let Some(speech) = self.speaking.get_mut(speech_id) {
            speech.said = true;
        }
    }

    /// A speech ended: the `tool_reply_updated` event that closes a reply speech.
    pub fn speech_done(&mut self, speech_id: &str, interrupted: bool) -> Option<EventKind> {
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
    pub fn await_reply(&mut self, update_id: String) {
        self.unreplied.insert(update_id);
    }

    /// Invites the coalescer (in `slot`, once spawned) to offer what it holds, unless it was
    /// invited already.
    pub fn invite(&mut self, slot: &CoalescerSlot) {
        if self.invited {
            return;
        }
        if let Some(coalescer) = slot.get() {
            self.invited = coalescer.cast(CoalescerMsg::SessionIdle).is_ok();
        }
    }

    /// The coalescer offered: the next invitation is a new one.
    pub fn offered(&mut self) {
        self.invited = false;
    }

    /// The offered pairs still unreplied, now taken by a reply (in offer order).
    pub fn take<'a>(&mut self, batch: &'a [Arc<PendingReply>]) -> Vec<&'a Arc<PendingReply>> {
        batch.iter().filter(|p| self.unreplied.remove(&p.update_id)).collect()
    }

    /// Speech `speech_id` delivers the reply to `update_ids`.
    pub fn speaking_started(&mut self, speech_id: String, update_ids: Vec<String>, handoff: bool) {
        self.speaking.insert(speech_id, ReplySpeech { update_ids, said: false, handoff });
    }

    /// The reply speeches in flight (an Activity that failed took them with it).
    pub fn speaking(&self) -> Vec<String> {
        self.speaking.keys().cloned().collect()
    }

    /// Pending replies are dropped at close (§9.3).
    pub fn drop_pending(&mut self) {
        self.unreplied.clear();
    }
}
