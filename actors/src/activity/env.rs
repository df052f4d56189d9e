//! What every speech of one Activity shares, and how a speech ends.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use ractor::ActorRef;

use super::lending::Attention;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, Report, SessionLink, ToolsetMsg};

/// What every speech of one Activity shares.
pub(crate) struct SpeechEnv {
    pub session: SessionLink,
    pub activity: ActorRef<ActivityMsg>,
    pub agent_id: Arc<str>,
    pub instructions: Arc<str>,
    pub catalog: Arc<ToolCatalog>,
    /// Every toolset actor this agent's calls may go to, by toolset id: behind a lock, as a
    /// toolset that failed is replaced by a new one while speeches run (written only then).
    pub toolsets: RwLock<BTreeMap<String, ActorRef<ToolsetMsg>>>,
    /// The Activity waits for a lent floor or a speech's end (see `lending.rs`).
    pub attention: Attention,
}

impl SpeechEnv {
    /// The toolset actor with this id, as it runs now.
    pub(crate) fn toolset(&self, id: &str) -> Option<ActorRef<ToolsetMsg>> {
        self.toolsets.read().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }

    /// Every toolset actor, by id (a copy, for the rare paths that visit them all).
    pub(crate) fn toolsets(&self) -> BTreeMap<String, ActorRef<ToolsetMsg>> {
        self.toolsets.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Toolset `id` runs as `toolset` from now on (the one before failed).
    pub(crate) fn replace_toolset(&self, id: &str, toolset: ActorRef<ToolsetMsg>) {
        let mut toolsets = self.toolsets.write().unwrap_or_else(PoisonError::into_inner);
        toolsets.insert(id.to_owned(), toolset);
    }

    /// Tells the host, once per user turn, that the turn has made all its tool calls
    /// (docs/decisions.md#edges-tool-deadlines).
    pub(super) fn announce_tool_budget(&self) {
        if let Some(limit) = self.session.clock.announce_tool_budget() {
            tracing::warn!(agent = %self.agent_id, limit, "the turn has made its tool calls");
            self.session.emit(colloquy_model::EventKind::ToolBudgetExhausted { limit });
        }
    }

    /// After a speech lent its floor or ended: tells the Activity only if it waits for
    /// something (`lending.rs`); otherwise it notices at its next message.
    pub(super) fn wake_activity_if_waiting(&self) {
        if self.attention.get() {
            let _ = self.activity.cast(ActivityMsg::Wake);
        }
    }
}

/// How a speech ended.
pub(crate) struct SpeechEnd {
    pub interrupted: bool,
    /// Reports of the speech's last step not sent yet (its `speaking` state, if nothing
    /// suspended since, and its message): they go to the Session in one message with the
    /// speech's end.
    pub tail: Vec<Report>,
}

impl SpeechEnd {
    pub(super) fn new(interrupted: bool) -> Self {
        SpeechEnd { interrupted, tail: Vec::new() }
    }
}
