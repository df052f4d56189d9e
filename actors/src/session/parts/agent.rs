//! The current agent: who it is, its tools and templates, and the Activity that speaks for it.
//!
//! Invariant: all of it changes together, when an agent enters (at the start and when a
//! handoff completes), so a speech never mixes one agent's tools with another's templates.

use std::sync::Arc;

use colloquy_core::{Agent, ResolvedTemplates, Templates};
use ractor::ActorRef;

use crate::api::options::SessionOptions;
use crate::protocol::ActivityMsg;
use crate::support::catalog::ToolCatalog;

pub(crate) struct CurrentAgent {
    pub id: String,
    /// Kept to restart its Activity after a failure.
    pub agent: Agent,
    pub catalog: Arc<ToolCatalog>,
    pub templates: ResolvedTemplates,
    pub allow_interruptions: bool,
    pub activity: ActorRef<ActivityMsg>,
}

impl CurrentAgent {
    /// `agent`, speaking through `activity`, with its overrides of the session's options.
    pub fn new(
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        activity: ActorRef<ActivityMsg>,
        options: &SessionOptions,
    ) -> Self {
        let templates =
            Templates::resolve(&[agent.template_overrides(), options.templates.as_ref()]);
        let allow_interruptions =
            agent.interruptions_override().unwrap_or(options.allow_interruptions);
        Self {
            id: agent.id().to_string(),
            agent,
            catalog,
            templates,
            allow_interruptions,
            activity,
        }
    }

    /// `agent` takes over (its Activity is set once spawned); returns the old agent's id.
    pub fn enter(
        &mut self,
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        options: &SessionOptions,
    ) -> String {
        self.templates =
            Templates::resolve(&[agent.template_overrides(), options.templates.as_ref()]);
        self.allow_interruptions =
            agent.interruptions_override().unwrap_or(options.allow_interruptions);
        self.catalog = catalog;
        let old = std::mem::replace(&mut self.id, agent.id().to_string());
        self.agent = agent;
        old
    }
}
