//! The agent: the current one — who it is, its tools and templates, the Activity that speaks
//! for it and the factory that starts Activities — and a handoff in progress (handoff.rs).
//!
//! Invariant: all of the current agent changes together, when an agent enters (at the start
//! and when a handoff completes), so a speech never mixes one agent's tools with another's
//! templates.
//!
//! Applies: `AgentEntered`, and (handoff.rs) `HandoffBegan`, `WorkQueued`, `OldAgentDrained`,
//! `HandoffEnded`. Handles: the agent's code, its catalog, its Activity, the factory.

use std::sync::Arc;

use colloquy_model::{Agent, ChatItem, ResolvedTemplates, Templates};
use ractor::ActorRef;

use super::activity_factory::ActivityFactory;
use super::fact::Fact;
use super::handoff::PendingHandoff;
use crate::catalog::ToolCatalog;
use crate::messages::ActivityMsg;
use crate::types::options::SessionOptions;

/// Who speaks for the session: the current agent, and the next one while a handoff is under
/// way.
pub(crate) struct AgentSlot {
    pub(crate) current: CurrentAgent,
    /// Boxed: rare, and this state is part of every Session's task.
    pub(crate) handoff: Option<Box<PendingHandoff>>,
}

impl AgentSlot {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::AgentEntered { item } => self.current.apply(item),
            Fact::HandoffBegan { .. } => self.handoff = Some(Box::default()),
            Fact::HandoffEnded => self.handoff = None,
            _ => {
                if let Some(handoff) = &mut self.handoff {
                    handoff.apply(fact);
                }
            }
        }
    }
}

pub(crate) struct CurrentAgent {
    /// Shared with every fact and commit that names it.
    id: Arc<str>,
    /// Kept to restart its Activity after a failure.
    agent: Agent,
    catalog: Arc<ToolCatalog>,
    templates: ResolvedTemplates,
    allow_interruptions: bool,
    activity: ActorRef<ActivityMsg>,
    /// The agent the restored history ended with, until the first agent has entered.
    previous: Option<String>,
    /// Whether its greeting (`on_enter_reply`) runs as the session starts: not on a resume.
    greets: bool,
    /// Starts Activities (the first, one per handoff, and replacements).
    factory: ActivityFactory,
}

impl CurrentAgent {
    /// `agent`, speaking through `activity`, with its overrides of the session's options;
    /// `previous` is the agent the restored history ended with.
    pub(crate) fn new(
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        activity: ActorRef<ActivityMsg>,
        previous: Option<String>,
        greets: bool,
        factory: ActivityFactory,
        options: &SessionOptions,
    ) -> Self {
        let templates =
            Templates::resolve(&[agent.template_overrides(), options.templates.as_ref()]);
        let allow_interruptions =
            agent.interruptions_override().unwrap_or(options.allow_interruptions);
        Self {
            id: Arc::from(agent.id()),
            agent,
            catalog,
            templates,
            allow_interruptions,
            activity,
            previous,
            greets,
            factory,
        }
    }

    /// The current agent's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The current agent's id, shared.
    pub(crate) fn shared_id(&self) -> &Arc<str> {
        &self.id
    }

    pub(crate) fn agent(&self) -> &Agent {
        &self.agent
    }

    pub(crate) fn catalog(&self) -> &Arc<ToolCatalog> {
        &self.catalog
    }

    /// Its templates, resolved over the session's.
    pub(crate) fn templates(&self) -> &ResolvedTemplates {
        &self.templates
    }

    /// Whether its speeches may be interrupted.
    pub(crate) fn allow_interruptions(&self) -> bool {
        self.allow_interruptions
    }

    /// The Activity speaking for it.
    pub(crate) fn activity(&self) -> &ActorRef<ActivityMsg> {
        &self.activity
    }

    pub(crate) fn factory(&self) -> &ActivityFactory {
        &self.factory
    }

    pub(crate) fn factory_mut(&mut self) -> &mut ActivityFactory {
        &mut self.factory
    }

    /// The agent the restored history ended with, until the first agent has entered.
    pub(crate) fn previous(&self) -> Option<&str> {
        self.previous.as_deref()
    }

    /// Whether its greeting runs as the session starts (not on a resume).
    pub(crate) fn greets(&self) -> bool {
        self.greets
    }

    /// An agent entered (`item` is its marker): it is the current one.
    fn apply(&mut self, item: &ChatItem) {
        if let ChatItem::AgentHandoff(entered) = item {
            self.id = Arc::from(entered.new_agent.as_str());
            self.previous = None;
        }
    }

    /// `agent`'s code and tools, as it enters (its Activity is set once spawned).
    pub(crate) fn install(
        &mut self,
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        options: &SessionOptions,
    ) {
        self.templates =
            Templates::resolve(&[agent.template_overrides(), options.templates.as_ref()]);
        self.allow_interruptions =
            agent.interruptions_override().unwrap_or(options.allow_interruptions);
        self.catalog = catalog;
        self.agent = agent;
    }

    /// Its new Activity (after a handoff, or a replacement after a failure).
    pub(crate) fn set_activity(&mut self, activity: ActorRef<ActivityMsg>) {
        self.activity = activity;
    }
}
