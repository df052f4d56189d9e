//! Deferred replies (§9, decisions 4, 15 and 17): the pairs that wait for a reply, the
//! handshake with the ReplyCoalescer (forwarding pairs, inviting its offer when the floor is
//! free, admitting an offer as one reply speech), and the speeches that deliver replies.
//!
//! Invariants: an update id is unreplied from its eager insert until a reply speech takes it
//! (or the session closes); the coalescer is invited (`SessionIdle`) at most once per offer;
//! a reply speech reports `tool_reply_updated` once when scheduled and once when done.
//!
//! Applies: `Committed` (a reply speech said something), `ReplyAwaited`, `CoalescerInvited`,
//! `CoalescerOffered`, `RepliesTaken`, `ReplySpeechStarted`, `SpeechDone`, `RepliesDropped`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use colloquy_model::{EventKind, ReplyStatus};

use super::fact::Fact;
use crate::messages::PendingReply;

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
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::Committed { speech_id: Some(speech_id), .. } => {
                if let Some(speech) = self.speaking.get_mut(speech_id) {
                    speech.said = true;
                }
            }
            Fact::ReplyAwaited { update_id } => {
                self.unreplied.insert(update_id.to_string());
            }
            Fact::CoalescerInvited => self.invited = true,
            Fact::CoalescerOffered => self.invited = false,
            Fact::RepliesTaken { update_ids } => {
                for id in update_ids {
                    self.unreplied.remove(id);
                }
            }
            Fact::ReplySpeechStarted { speech_id, update_ids, handoff } => {
                let speech = ReplySpeech { update_ids: update_ids.to_vec(), said: false, handoff };
                self.speaking.insert(speech_id.to_string(), speech);
            }
            Fact::SpeechDone { speech_id, .. } => {
                self.speaking.remove(speech_id);
            }
            Fact::RepliesDropped => self.unreplied.clear(),
            _ => {}
        }
    }

    /// Some pair waits for its reply.
    pub(crate) fn pending(&self) -> bool {
        !self.unreplied.is_empty()
    }

    /// The coalescer was told the floor is free and has not offered since.
    pub(crate) fn invited(&self) -> bool {
        self.invited
    }

    /// The `tool_reply_updated` event that closes reply speech `speech_id`, when it ends.
    pub(crate) fn ending(&self, speech_id: &str, interrupted: bool) -> Option<EventKind> {
        let speech = self.speaking.get(speech_id)?;
        let status = match (interrupted, speech.said) {
            (true, _) => ReplyStatus::Interrupted,
            (false, true) => ReplyStatus::Completed,
            (false, false) => ReplyStatus::Skipped,
        };
        Some(EventKind::ToolReplyUpdated {
            update_ids: speech.update_ids.clone(),
            status,
            speech_id: speech_id.to_string(),
            handoff: speech.handoff,
        })
    }

    /// The offered pairs still unreplied, each once, in offer order: what a reply takes.
    pub(crate) fn unreplied<'a>(
        &self,
        batch: &'a [Arc<PendingReply>],
    ) -> Vec<&'a Arc<PendingReply>> {
        let mut seen = BTreeSet::new();
        batch
            .iter()
            .filter(|p| self.unreplied.contains(&p.update_id) && seen.insert(&p.update_id))
            .collect()
    }

    /// The reply speeches in flight (an Activity that failed took them with it).
    pub(crate) fn speaking(&self) -> Vec<String> {
        self.speaking.keys().cloned().collect()
    }
}
