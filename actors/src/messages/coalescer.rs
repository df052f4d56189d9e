//! The ReplyCoalescer's messages, and the slot that finds it.

use std::sync::{Arc, OnceLock};

use ractor::ActorRef;

/// A pair waiting for a deferred reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingReply {
    /// The pair's call id (`<id>_update_<n>` or `<id>_final`).
    pub update_id: String,
    /// The agent whose context received the eager insert.
    pub agent: std::sync::Arc<str>,
    /// The id of the pair's output item (for the at-tail test).
    pub output_item_id: String,
    /// True for a final result (decision 15: a reply with one asks with `tool_choice` unset).
    pub is_final: bool,
}

/// Everything a ReplyCoalescer handles.
pub(crate) enum CoalescerMsg {
    /// A pair was eagerly inserted and wants a reply.
    Enqueue(PendingReply),
    /// The session's floor is free and it has unreplied pairs: offer what is pending (now, or
    /// as soon as a pair arrives).
    SessionIdle,
    /// The Session admitted a reply for the offered pairs (or dropped them at close).
    Admitted,
    /// The floor was taken before the offer arrived; the Session sends `SessionIdle` again
    /// once it is free.
    Busy,
    /// Describe what is pending (`SessionHandle::inspect`).
    Inspect(ractor::RpcReplyPort<crate::types::snapshot::CoalescerSnapshot>),
}

/// Where the session's coalescer is, once spawned. Shared by the Session and its toolsets; only
/// the Session spawns it (so there is never a second one), and only inside its own handler.
#[derive(Clone, Default)]
pub(crate) struct CoalescerSlot(Arc<OnceLock<ActorRef<CoalescerMsg>>>);

impl CoalescerSlot {
    /// The coalescer, if it was spawned.
    pub(crate) fn get(&self) -> Option<&ActorRef<CoalescerMsg>> {
        self.0.get()
    }

    /// Publishes the spawned coalescer (the Session does, after forwarding its first pair).
    pub(crate) fn set(&self, coalescer: ActorRef<CoalescerMsg>) {
        let _ = self.0.set(coalescer);
    }
}
