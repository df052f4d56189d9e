//! Agent handoff (§11.3, decisions 4, 7, 12, 16 and 22), as the Session runs it:
//!
//! 1. The Session stops starting work on the old Activity: user turns and speeches that arrive
//!    meanwhile are queued for the new agent.
//! 2. The old Activity drains: its speeches, queued ones included, finish (blocking tools run
//!    to completion).
//! 3. Agent-scoped calls are drained: cancellable ones cancelled, the others awaited.
//! 4. The old Activity stops (its toolsets with it), the `agent_handoff` item is committed and
//!    its event emitted, the new Activity starts; session-scoped toolsets are told their new
//!    target agent; the new agent's `on_enter` reply is queued.
//! 5. Queued turns, then pending deferred replies, go to the new agent.
//!
//! Invariant: work that arrives during a handoff is queued in arrival order and replayed, in
//! that order, to the new agent.
//!
//! Reads: `link`, `close`, `events` (who listens). Writes: `handoff`, `current` (the new agent
//! and its Activity), `conversation` (the `agent_handoff` marker), `calls` (the old agent's
//! are drained; the drain timer stops), `presence` (the away timer stops), `testing` (the run
//! lists the marker). Emits `agent_handoff` and its item; starts the drain timer (calls);
//! replays the queued work (floor).

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::chat::AgentHandoff;
use colloquy_model::{Agent, ChatItem, ErrorSource, EventKind, EventType, SpeechSource, text};
use ractor::ActorRef;

use super::calls::Running;
use super::state::SessionState;
use crate::catalog::{Scope, ToolCatalog};
use crate::messages::{ActivityMsg, SessionMsg, SpeechContent, ToolsetMsg};
use crate::types::error::SessionError;

/// Work that arrives while a handoff is in progress, for the new agent.
enum Queued {
    /// A user turn (its message is committed when replayed, to the new agent).
    UserTurn(String),
    /// A queued user input (its message is committed when its reply begins).
    UserInput(String),
    /// Any other speech.
    Speech(SpeechSource, SpeechContent),
}

/// A handoff in progress.
pub(super) struct PendingHandoff {
    agent: Arc<Agent>,
    catalog: Arc<ToolCatalog>,
    /// The old Activity has no speech left.
    drained: bool,
    /// Async toolsets both agents list, handed over by the old Activity: they move to the new
    /// agent with their calls running.
    kept: BTreeMap<String, ActorRef<ToolsetMsg>>,
    queued: Vec<Queued>,
}

impl PendingHandoff {
    fn new(agent: Arc<Agent>, catalog: Arc<ToolCatalog>) -> Self {
        Self { agent, catalog, drained: false, kept: BTreeMap::new(), queued: Vec::new() }
    }

    pub(super) fn queue_speech(&mut self, source: SpeechSource, content: SpeechContent) {
        self.queued.push(Queued::Speech(source, content));
    }

    /// The toolsets the old Activity handed over (the Session supervises them meanwhile).
    pub(super) fn kept(&self) -> &BTreeMap<String, ActorRef<ToolsetMsg>> {
        &self.kept
    }

    /// The old Activity has no speech left.
    pub(super) fn is_drained(&self) -> bool {
        self.drained
    }

    /// The old Activity is gone (it drained, or it failed): the handoff goes ahead.
    pub(super) fn set_drained(&mut self) {
        self.drained = true;
    }

    /// Whether this handoff drains `running`: the old agent's call, unless its toolset moves
    /// to the new agent.
    pub(super) fn drains(&self, running: &Running) -> bool {
        let toolset = running.toolset().get_id();
        running.agent_scoped() && !self.kept.values().any(|t| t.get_id() == toolset)
    }
}

impl SessionState {
    /// What the user said, to act on now (`Some`); refused once the session is closing; or,
    /// during a handoff, queued for the new agent (decision 22) as a turn, or as a queued
    /// input when `input` (`None`).
    pub(super) fn user_text_now(
        &mut self,
        text: String,
        input: bool,
    ) -> Result<Option<String>, SessionError> {
        if self.close.is_closing() {
            return Err(SessionError::Closed);
        }
        let Some(handoff) = &mut self.handoff else { return Ok(Some(text)) };
        handoff.queued.push(if input { Queued::UserInput(text) } else { Queued::UserTurn(text) });
        Ok(None)
    }

    /// Starts a handoff to `agent` (a tool returned it, or the host asked).
    pub(super) fn request_handoff(&mut self, agent: Arc<Agent>) {
        if self.close.is_closing() {
            return;
        }
        if self.handoff.is_some() {
            let message =
                format!("a handoff is already in progress; `{}` was not entered", agent.id());
            self.emit_now(EventKind::error(ErrorSource::Session, message));
            return;
        }
        let catalog = match self.current.factory().catalog(&agent) {
            Ok(catalog) => catalog,
            Err(e) => {
                let message = format!("cannot hand off to `{}`: {e}", agent.id());
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        };
        // Decision 16: an agent-scoped async toolset the next agent also lists moves with its
        // running calls instead of being drained.
        let next: Vec<String> =
            catalog.async_toolsets(Scope::Agent).map(|a| a.id.clone()).collect();
        let keep: Vec<String> = self
            .current
            .catalog()
            .async_toolsets(Scope::Agent)
            .map(|a| a.id.clone())
            .filter(|id| next.contains(id))
            .collect();
        self.handoff = Some(PendingHandoff::new(agent, catalog));
        self.presence.stop_away_timer();
        let _ = self.current.activity().cast(ActivityMsg::Drain { keep });
        // The bound counts from now: a blocking call keeps its speech (and so the Activity's
        // wind-down) open, and must end by it too (decision 7).
        self.start_drain_timer();
    }

    /// The old Activity has no speech left: drain its calls (decision 7).
    pub(super) async fn activity_drained(
        &mut self,
        kept: BTreeMap<String, ActorRef<ToolsetMsg>>,
        myself: &ActorRef<SessionMsg>,
    ) {
        let Some(handoff) = &mut self.handoff else { return };
        handoff.drained = true;
        handoff.kept = kept;
        self.calls.drain(|running| handoff.drains(running), text::APPROVAL_HANDOFF);
        self.complete_handoff_if_drained(myself).await;
    }

    /// Completes the handoff once the old agent's calls have all ended.
    pub(super) async fn complete_handoff_if_drained(&mut self, myself: &ActorRef<SessionMsg>) {
        let ready = self
            .handoff
            .as_ref()
            .is_some_and(|h| h.drained && !self.calls.iter().any(|r| h.drains(r)));
        if ready {
            Box::pin(self.complete_handoff(myself)).await;
        }
    }

    /// The second half of [`complete_handoff_if_drained`](Self::complete_handoff_if_drained):
    /// the old Activity stops, the new agent enters and gets the work queued meanwhile.
    async fn complete_handoff(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(handoff) = self.handoff.take() else { return };
        self.calls.stop_drain_timer();
        if let Err(e) = self.current.activity().stop_and_wait(Some("handoff".into()), None).await {
            tracing::warn!(session = %self.link.id, "old activity did not stop cleanly: {e}");
        }
        let agent = Agent::clone(&handoff.agent);
        let old_agent =
            self.current.enter(agent.clone(), Arc::clone(&handoff.catalog), &self.link.options);
        self.record_handoff(old_agent);
        let on_enter = agent.on_enter_instructions().map(str::to_string);
        let kept = handoff.kept.clone();
        let factory = self.current.factory();
        match factory.spawn(agent, handoff.catalog, kept.clone(), myself.get_cell()).await {
            Ok(activity) => self.current.set_activity(activity),
            Err(e) => {
                let message = format!("cannot start agent `{}`: {e}", self.current.id());
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        }
        // Session-scoped and handed-over toolsets now report to the new agent (decision 16).
        let agent_id: Arc<str> = self.current.id().into();
        for toolset in self.current.factory().session_toolsets().values().chain(kept.values()) {
            let _ = toolset.cast(ToolsetMsg::SetOwner { agent_id: Arc::clone(&agent_id) });
        }
        let _ = self.mock_tools_refresh();
        if let Some(instructions) = on_enter {
            self.start_on_enter(instructions);
        }
        for queued in handoff.queued {
            let _ = match queued {
                Queued::UserTurn(text) => self.user_turn(text),
                Queued::UserInput(text) => self.queue_input(text),
                Queued::Speech(source, content) => self.create_speech(source, content),
            };
        }
        self.floor_changed();
    }

    /// Commits the `agent_handoff` item from `old_agent` to the current one and emits its
    /// events.
    fn record_handoff(&mut self, old_agent: String) {
        let item = ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: Some(old_agent.clone()),
            new_agent: self.current.id().to_string(),
            created_at: self.link.clock.now(),
        });
        self.testing.record_handoff(&item);
        let item = self.conversation.mark_handoff(item);
        self.emit_now(EventKind::AgentHandoff {
            old_agent: Some(old_agent),
            new_agent: self.current.id().to_string(),
        });
        if self.events.wants(EventType::ConversationItemAdded) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
        self.conversation.open(self.current.id());
    }
}
