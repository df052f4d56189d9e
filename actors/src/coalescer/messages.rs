//! The ReplyCoalescer's messages.

/// A pair waiting for a deferred reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingReply {
    /// The pair's call id (`<id>_update_<n>` or `<id>_final`).
    pub update_id: String,
    /// The agent whose context received the eager insert.
    pub agent: String,
    /// The id of the pair's output item (for the at-tail test).
    pub output_item_id: String,
    /// True for a final result (decision 15: a reply with one asks with `tool_choice` unset).
    pub is_final: bool,
}

/// Everything a ReplyCoalescer handles.
pub(crate) enum CoalescerMsg {
    /// A pair was eagerly inserted and wants a reply.
    Enqueue(PendingReply),
    /// The session's floor just became free: try to deliver what is pending.
    SessionIdle,
    /// The Session admitted a reply for the offered pairs (or dropped them at close).
    Admitted,
    /// The Session was busy; it sends `SessionIdle` once it is not.
    Busy,
    /// Describe what is pending (`SessionHandle::inspect`).
    Inspect(ractor::RpcReplyPort<crate::inspect::CoalescerSnapshot>),
}
