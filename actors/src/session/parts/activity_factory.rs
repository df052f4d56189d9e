//! Starting Activities: the first agent's, one per handoff, and a replacement after a failure.
//! The factory also spawns the session-scoped async toolsets, once, when the session starts:
//! they are children of the Session from birth, so no agent (or agent failure) can take them
//! down, and every Activity it starts is handed them.
//!
//! Invariant: an Activity only ever starts through [`ActivityFactory::spawn`], with the
//! session's link and its session-scoped toolsets, so every agent reaches the same toolsets.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{Agent, FunctionTool, Templates, Toolset};
use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use crate::activity::{ActivityActor, ActivityArgs};
use crate::catalog::{Scope, ToolCatalog};
use crate::messages::{ActivityMsg, SessionLink, ToolsetMsg};
use crate::toolset::{ToolsetActor, ToolsetArgs};

/// Everything needed to start an Activity for an agent, kept by the Session for handoffs.
pub(crate) struct ActivityFactory {
    link: SessionLink,
    /// The session-scoped async toolsets, by id (children of the Session).
    session_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
    /// How each was spawned: one that fails is spawned again so.
    session_specs: BTreeMap<String, ToolsetArgs>,
    /// Tools and toolsets placed on the session (for the catalogs of later agents).
    session_tools: Vec<FunctionTool>,
    session_toolset_decls: Vec<Toolset>,
}

impl ActivityFactory {
    /// A factory for the session of `link`; spawns the session-scoped async toolsets that
    /// `catalog` (the first agent's) lists under `supervisor`, reporting to `agent_id`.
    pub(crate) async fn new(
        link: SessionLink,
        catalog: &Arc<ToolCatalog>,
        session_tools: Vec<FunctionTool>,
        session_toolset_decls: Vec<Toolset>,
        agent_id: &str,
        supervisor: ActorCell,
    ) -> Result<Self, SpawnErr> {
        let (mut session_toolsets, mut session_specs) = (BTreeMap::new(), BTreeMap::new());
        for set in catalog.async_toolsets(Scope::Session) {
            let templates =
                Templates::resolve(&[set.templates.as_ref(), link.options.templates.as_ref()]);
            let toolset_args = ToolsetArgs {
                id: set.id.clone(),
                agent_id: agent_id.into(),
                catalog: Arc::clone(catalog),
                session: link.clone(),
                templates,
                scope: Scope::Session,
            };
            session_specs.insert(set.id.clone(), toolset_args.clone());
            let (toolset, _) =
                Actor::spawn_linked(None, ToolsetActor, toolset_args, supervisor.clone()).await?;
            session_toolsets.insert(set.id.clone(), toolset);
        }
        Ok(Self { link, session_toolsets, session_specs, session_tools, session_toolset_decls })
    }

    /// Spawns session-scoped toolset `id` again under `supervisor`, after it failed; the new
    /// actor, which later Activities get too. `None` for a toolset it did not spawn.
    pub(crate) async fn restart(
        &mut self,
        id: &str,
        supervisor: ActorCell,
    ) -> Option<Result<ActorRef<ToolsetMsg>, SpawnErr>> {
        let spec = self.session_specs.get(id)?.clone();
        let spawned = Box::pin(Actor::spawn_linked(None, ToolsetActor, spec, supervisor)).await;
        Some(spawned.map(|(toolset, _)| {
            self.session_toolsets.insert(id.to_owned(), toolset.clone());
            toolset
        }))
    }

    /// The session-scoped async toolsets, by id.
    pub(crate) fn session_toolsets(&self) -> &BTreeMap<String, ActorRef<ToolsetMsg>> {
        &self.session_toolsets
    }

    /// The tools `agent` would see.
    pub(crate) fn catalog(&self, agent: &Agent) -> Result<Arc<ToolCatalog>, String> {
        ToolCatalog::build(&self.session_tools, &self.session_toolset_decls, agent).map(Arc::new)
    }

    /// Starts an Activity for `agent` under `supervisor`; `adopted_toolsets` are agent-scoped
    /// toolsets handed over by the previous agent, with their calls running.
    pub(crate) async fn spawn(
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
