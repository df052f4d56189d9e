//! What every speech of one Activity shares, and how a speech ends.

use std::sync::Arc;

use colloquy_model::{ErrorSource, EventKind};
use ractor::{ActorRef, ActorStatus};

use super::lending::Attention;
use super::toolsets::Toolsets;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, Report, SessionLink, ToolsetMsg};

/// What every speech of one Activity shares.
pub(crate) struct SpeechEnv {
    pub session: SessionLink,
    pub activity: ActorRef<ActivityMsg>,
    pub agent_id: Arc<str>,
    pub instructions: Arc<str>,
    pub catalog: Arc<ToolCatalog>,
    /// Every toolset actor this agent's calls may go to, by toolset id (a toolset that failed
    /// is replaced while speeches run), and the agent's own toolset until its first call.
    pub toolsets: Toolsets,
    /// The Activity waits for a lent floor or a speech's end (see `lending.rs`).
    pub attention: Attention,
}

impl SpeechEnv {
    /// The toolset with this id, started now if the Activity deferred it to its first call
    /// (docs/decisions.md#deferred-toolset).
    pub(crate) async fn started_toolset(&self, id: &str) -> Option<ActorRef<ToolsetMsg>> {
        match self.toolsets.start(id, self.activity.get_cell()).await {
            Ok(toolset) => toolset,
            // A toolset cannot join an Activity that is stopping: its calls end with it.
            Err(_)
                if matches!(
                    self.activity.get_status(),
                    ActorStatus::Stopping | ActorStatus::Stopped
                ) =>
            {
                None
            }
            Err(e) => {
                let message = format!("could not start toolset {id}: {e}");
                tracing::error!(agent = %self.agent_id, "{message}");
                self.session.emit(EventKind::error(ErrorSource::Tool, message));
                None
            }
        }
    }

    /// Starts the deferred toolsets the calls named go to, before they are dispatched.
    pub(super) async fn start_toolsets_for<'a>(&self, names: impl Iterator<Item = &'a str>) {
        if !self.toolsets.any_deferred() {
            return;
        }
        for name in names {
            if let Some((_, id)) = self.catalog.resolve(name) {
                self.started_toolset(&id).await;
            }
        }
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
