//! The handoff in progress, and the factory that starts an agent's Activity.
//!
//! Invariant: work that arrives during a handoff is queued in arrival order and replayed, in
//! that order, to the new agent.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{Agent, FunctionTool, SpeechSource, Toolset};
use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use super::calls::Running;
use crate::activity::{ActivityActor, ActivityArgs};
use crate::protocol::{ActivityMsg, SessionLink, SpeechContent, ToolsetMsg};
use crate::support::catalog::ToolCatalog;

/// Everything needed to start an Activity for an agent, kept by the Session for handoffs.
pub(crate) struct ActivityFactory {
    pub link: SessionLink,
    pub session_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
    pub session_tools: Vec<FunctionTool>,
    pub session_toolset_decls: Vec<Toolset>,
}

impl ActivityFactory {
    /// The tools `agent` would see.
    pub fn catalog(&self, agent: &Agent) -> Result<Arc<ToolCatalog>, String> {
        ToolCatalog::build(&self.session_tools, &self.session_toolset_decls, agent).map(Arc::new)
    }

    /// Starts an Activity for `agent` under `supervisor`.
    pub async fn spawn(
        &self,
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        adopted_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
        supervisor: ActorCell,
    ) -> Result<ActorRef<ActivityMsg>, SpawnErr> {
        let args = ActivityArgs {
            agent,
            catalog,
            session: self.link.clone(),
            session_toolsets: self.session_toolsets.clone(),
            adopted_toolsets,
        };
        // Boxed: kept out of the Session's handler future (see the Toolset's spawn).
        Box::pin(Actor::spawn_linked(None, ActivityActor, args, supervisor)).await.map(|(a, _)| a)
    }
}

/// Work that arrives while a handoff is in progress, for the new agent.
pub(crate) enum Queued {
    /// A user turn (its message is committed when replayed, to the new agent).
    UserTurn(String),
    /// Any other speech.
    Speech(SpeechSource, SpeechContent),
}

/// A handoff in progress.
pub(crate) struct PendingHandoff {
    pub agent: Arc<Agent>,
    pub catalog: Arc<ToolCatalog>,
    /// The old Activity has no speech left.
    pub drained: bool,
    /// Async toolsets both agents list, handed over by the old Activity: they move to the new
    /// agent with their calls running.
    pub kept: BTreeMap<String, ActorRef<ToolsetMsg>>,
    pub queued: Vec<Queued>,
}

impl PendingHandoff {
    pub fn new(agent: Arc<Agent>, catalog: Arc<ToolCatalog>) -> Self {
        Self { agent, catalog, drained: false, kept: BTreeMap::new(), queued: Vec::new() }
    }

    /// Decision 22: turns arriving during a handoff go to the new agent.
    pub fn queue_turn(&mut self, text: String) {
        self.queued.push(Queued::UserTurn(text));
    }

    pub fn queue_speech(&mut self, source: SpeechSource, content: SpeechContent) {
        self.queued.push(Queued::Speech(source, content));
    }

    /// The old Activity is gone (it drained, or it failed): the handoff goes ahead.
    pub fn set_drained(&mut self) {
        self.drained = true;
    }

    /// Whether this handoff drains `running`: the old agent's call, unless its toolset moves
    /// to the new agent.
    pub fn drains(&self, running: &Running) -> bool {
        let toolset = running.toolset.get_id();
        running.agent_scoped && !self.kept.values().any(|t| t.get_id() == toolset)
    }
}
