//! Agent handoff (TOOL-SEMANTICS §11.3, decisions 4, 7, 12, 16 and 22), as the Session runs it:
//!
//! 1. The Session stops starting work on the old Activity: user turns and speeches that arrive
//!    meanwhile are queued for the new agent.
//! 2. The old Activity drains: its speeches finish (blocking tools run to completion).
//! 3. Agent-scoped calls are drained: cancellable ones cancelled, the others awaited.
//! 4. The old Activity stops (its toolsets with it), the `agent_handoff` item is committed and
//!    its event emitted, the new Activity starts; session-scoped toolsets are told their new
//!    target agent; the new agent's `on_enter` reply is queued.
//! 5. Queued turns, then pending deferred replies, go to the new agent.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{Agent, FunctionTool, Templates, Toolset};
use colloquy_llm::Llm;
use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use crate::activity::{ActivityActor, ActivityArgs};
use crate::catalog::ToolCatalog;
use crate::protocol::{ActivityMsg, CoalescerSlot, SessionLink, SpeechContent, ToolsetMsg};
use crate::speech_sink::SpeechSink;

/// Everything needed to start an Activity for an agent, kept by the Session for handoffs.
pub(crate) struct ActivityFactory {
    pub link: SessionLink,
    pub llm: Arc<dyn Llm>,
    pub sink: Option<Arc<dyn SpeechSink>>,
    pub coalescer: CoalescerSlot,
    pub session_templates: Option<Templates>,
    pub session_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
    pub session_tools: Vec<FunctionTool>,
    pub session_toolset_decls: Vec<Toolset>,
    pub cancel_grace: std::time::Duration,
    pub max_tool_steps: u32,
    pub llm_timeout: Option<std::time::Duration>,
    pub playout_timeout: Option<std::time::Duration>,
    pub userdata: Option<Arc<dyn std::any::Any + Send + Sync>>,
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
            llm: Arc::clone(&self.llm),
            sink: self.sink.clone(),
            coalescer: self.coalescer.clone(),
            session_templates: self.session_templates.clone(),
            cancel_grace: self.cancel_grace,
            session_toolsets: self.session_toolsets.clone(),
            adopted_toolsets,
            max_tool_steps: self.max_tool_steps,
            llm_timeout: self.llm_timeout,
            playout_timeout: self.playout_timeout,
            userdata: self.userdata.clone(),
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
    Speech(colloquy_core::SpeechSource, SpeechContent),
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
