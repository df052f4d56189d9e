//! Messages each kind of actor handled, process-wide, for the load harness's
//! `messages_per_call` (docs/benchmarks.md#where-the-time-goes). Built only with the
//! `count-messages` feature: without it [`handled`] compiles to nothing, so a user's build pays
//! no atomic add per message.

use crate::types::lifecycle::ActorKind;

#[cfg(feature = "count-messages")]
mod counts {
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::types::lifecycle::ActorKind;

    /// The kinds counted, in the order of [`super::MessageCounts`]'s fields.
    pub(super) const KINDS: [ActorKind; 5] = [
        ActorKind::Session,
        ActorKind::Coalescer,
        ActorKind::Activity,
        ActorKind::Toolset,
        ActorKind::ToolCall,
    ];

    static HANDLED: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

    pub(super) fn add(kind: ActorKind) {
        if let Some(i) = KINDS.iter().position(|k| *k == kind) {
            HANDLED[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn read() -> [u64; 5] {
        std::array::from_fn(|i| HANDLED[i].load(Ordering::Relaxed))
    }
}

/// An actor of `kind` is handling a message (a supervision event included).
#[inline(always)]
pub(crate) fn handled(kind: ActorKind) {
    #[cfg(feature = "count-messages")]
    counts::add(kind);
    #[cfg(not(feature = "count-messages"))]
    let _ = kind;
}

/// Messages handled so far in this process, by kind of actor: counted only in a build with the
/// `count-messages` feature ([`MessageCounts::counted`]); all zero otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// By Sessions.
    pub session: u64,
    /// By ReplyCoalescers.
    pub coalescer: u64,
    /// By Activities.
    pub activity: u64,
    /// By Toolsets.
    pub toolset: u64,
    /// By ToolCalls.
    pub tool_call: u64,
}

impl MessageCounts {
    /// Whether this build counts (the `count-messages` feature).
    pub const fn counted() -> bool {
        cfg!(feature = "count-messages")
    }

    /// The counts now.
    pub fn now() -> Self {
        #[cfg(feature = "count-messages")]
        let [session, coalescer, activity, toolset, tool_call] = counts::read();
        #[cfg(not(feature = "count-messages"))]
        let [session, coalescer, activity, toolset, tool_call] = [0; 5];
        Self { session, coalescer, activity, toolset, tool_call }
    }

    /// Every kind's.
    pub fn total(&self) -> u64 {
        self.session + self.coalescer + self.activity + self.toolset + self.tool_call
    }

    /// What was handled since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            session: self.session - earlier.session,
            coalescer: self.coalescer - earlier.coalescer,
            activity: self.activity - earlier.activity,
            toolset: self.toolset - earlier.toolset,
            tool_call: self.tool_call - earlier.tool_call,
        }
    }
}

#[cfg(all(test, feature = "count-messages"))]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind() {
        let before = MessageCounts::now();
        handled(ActorKind::Toolset);
        handled(ActorKind::Toolset);
        handled(ActorKind::Session);
        let since = MessageCounts::now().since(&before);
        assert!(since.toolset >= 2 && since.session >= 1, "{since:?}");
    }
}
