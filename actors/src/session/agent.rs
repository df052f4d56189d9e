//! The current agent: who it is, its tools and templates, the Activity that speaks for it and
//! the factory that starts Activities; and the first agent's entry.
//!
//! Invariant: all of it changes together, when an agent enters (at the start and when a
//! handoff completes), so a speech never mixes one agent's tools with another's templates.
//!
//! Reads: `link`. Writes: `current`, `conversation` (the first `agent_handoff` marker). Emits
//! `agent_handoff` and its item; sets the agent state (presence) and starts the greeting
//! (floor).

use std::sync::Arc;

use colloquy_llm::RequestKind;
use colloquy_model::chat::AgentHandoff;
use colloquy_model::{Agent, ChatItem, EventKind, ResolvedTemplates, SpeechSource, Templates};
use ractor::ActorRef;

use super::activity_factory::ActivityFactory;
use super::state::SessionState;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, SpeechContent};
use crate::types::options::SessionOptions;

pub(super) struct CurrentAgent {
    id: String,
    /// Kept to restart its Activity after a failure.
    agent: Agent,
    catalog: Arc<ToolCatalog>,
    templates: ResolvedTemplates,
    allow_interruptions: bool,
    activity: ActorRef<ActivityMsg>,
    /// The agent the restored history ended with, until the first agent has entered.
    previous: Option<String>,
    /// Starts Activities (the first, one per handoff, and replacements).
    factory: ActivityFactory,
}

impl CurrentAgent {
    /// `agent`, speaking through `activity`, with its overrides of the session's options;
    /// `previous` is the agent the restored history ended with.
    pub(super) fn new(
        agent: Agent,
        catalog: Arc<ToolCatalog>,
        activity: ActorRef<ActivityMsg>,
        previous: Option<String>,
        factory: ActivityFactory,
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
            previous,
            factory,
        }
    }

    /// The current agent's id.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    pub(super) fn agent(&self) -> &Agent {
        &self.agent
    }

    pub(super) fn catalog(&self) -> &Arc<ToolCatalog> {
        &self.catalog
    }

    /// Its templates, resolved over the session's.
    pub(super) fn templates(&self) -> &ResolvedTemplates {
        &self.templates
    }

    /// Whether its speeches may be interrupted.
    pub(super) fn allow_interruptions(&self) -> bool {
        self.allow_interruptions
    }

    /// The Activity speaking for it.
    pub(super) fn activity(&self) -> &ActorRef<ActivityMsg> {
        &self.activity
    }

    pub(super) fn factory(&self) -> &ActivityFactory {
        &self.factory
    }

    /// `agent` takes over (its Activity is set once spawned); returns the old agent's id.
    pub(super) fn enter(
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

    /// Its new Activity (after a handoff, or a replacement after a failure).
    pub(super) fn set_activity(&mut self, activity: ActorRef<ActivityMsg>) {
        self.activity = activity;
    }
}

impl SessionState {
    /// Records the first agent's entry and moves to listening.
    pub(super) fn start(&mut self) {
        let previous_agent = self.current.previous.take();
        let item = ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: previous_agent.clone(),
            new_agent: self.current.id.clone(),
            created_at: self.link.clock.now(),
        });
        let item = self.conversation.mark_handoff(item);
        self.emit_now(EventKind::AgentHandoff {
            old_agent: previous_agent,
            new_agent: self.current.id.clone(),
        });
        self.emit_now(EventKind::ConversationItemAdded { item });
        self.set_agent_state(colloquy_model::AgentState::Listening);
        if let Some(instructions) = self.current.agent.on_enter_instructions() {
            self.start_on_enter(instructions.to_string());
        }
    }

    /// The entering agent's greeting (`Agent::on_enter_reply`).
    pub(super) fn start_on_enter(&mut self, instructions: String) {
        let content = SpeechContent::Reply {
            kind: RequestKind::OnEnter,
            extra_instructions: Some(instructions),
            tool_choice: None,
        };
        let _ = self.create_speech(SpeechSource::OnEnter, content);
    }
}
