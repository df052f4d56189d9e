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
//! The handoff's state is `parts/handoff.rs`'s. Decides `WorkQueued`, `HandoffBegan`,
//! `OldAgentDrained`, `HandoffEnded` and `AgentEntered`; emits `agent_handoff` and its item;
//! starts the drain timer; replays the queued work.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::chat::AgentHandoff;
use colloquy_model::{Agent, ChatItem, ErrorSource, EventKind, EventType, text};
use ractor::ActorRef;

use super::parts::fact::{Fact, QueuedWork};
use super::state::SessionState;
use crate::catalog::Scope;
use crate::messages::{ActivityMsg, SessionMsg, ToolsetMsg};
use crate::types::error::SessionError;

impl SessionState {
    /// What the user said, to act on now (`Some`); refused once the session is closing; or,
    /// during a handoff, queued for the new agent (decision 22) as a turn, or as a queued
    /// input when `input` (`None`).
    pub(super) fn user_text_now(
        &mut self,
        text: String,
        input: bool,
    ) -> Result<Option<String>, SessionError> {
        if self.host.close.is_closing() {
            return Err(SessionError::Closed);
        }
        if self.agent.handoff.is_none() {
            return Ok(Some(text));
        }
        let work = if input { QueuedWork::UserInput(text) } else { QueuedWork::UserTurn(text) };
        self.apply(Fact::WorkQueued(&work));
        Ok(None)
    }

    /// Starts a handoff to `agent` (a tool returned it, or the host asked).
    pub(super) fn request_handoff(&mut self, agent: Arc<Agent>) {
        if self.host.close.is_closing() {
            return;
        }
        if self.agent.handoff.is_some() {
            let message =
                format!("a handoff is already in progress; `{}` was not entered", agent.id());
            self.emit_now(EventKind::error(ErrorSource::Session, message));
            return;
        }
        let catalog = match self.agent.current.factory().catalog(&agent) {
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
            .agent
            .current
            .catalog()
            .async_toolsets(Scope::Agent)
            .map(|a| a.id.clone())
            .filter(|id| next.contains(id))
            .collect();
        self.apply(Fact::HandoffBegan { agent: agent.id() });
        if let Some(handoff) = &mut self.agent.handoff {
            handoff.install(agent, catalog);
        }
        self.floor.presence.stop_away_timer();
        let _ = self.agent.current.activity().cast(ActivityMsg::Drain { keep });
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
        let Some(handoff) = &mut self.agent.handoff else { return };
        handoff.keep(kept);
        self.apply(Fact::OldAgentDrained);
        if let Some(handoff) = &self.agent.handoff {
            self.tools.calls.drain(|running| handoff.drains(running), text::APPROVAL_HANDOFF);
        }
        self.complete_handoff_if_drained(myself).await;
    }

    /// Completes the handoff once the old agent's calls have all ended.
    pub(super) async fn complete_handoff_if_drained(&mut self, myself: &ActorRef<SessionMsg>) {
        let calls = &self.tools.calls;
        let ready = self
            .agent
            .handoff
            .as_ref()
            .is_some_and(|h| h.is_drained() && !calls.iter().any(|r| h.drains(r)));
        if ready {
            Box::pin(self.complete_handoff(myself)).await;
        }
    }

    /// The second half of [`complete_handoff_if_drained`](Self::complete_handoff_if_drained):
    /// the old Activity stops, the new agent enters and gets the work queued meanwhile.
    async fn complete_handoff(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(handoff) = &self.agent.handoff else { return };
        let Some((agent, catalog)) = handoff.next().cloned() else { return };
        let (queued, kept) = (handoff.queued().to_vec(), handoff.kept().clone());
        self.apply(Fact::HandoffEnded);
        self.tools.calls.stop_drain_timer();
        let old = self.agent.current.activity();
        if let Err(e) = old.stop_and_wait(Some("handoff".into()), None).await {
            tracing::warn!(session = %self.link.id, "old activity did not stop cleanly: {e}");
        }
        let agent = Agent::clone(&agent);
        let old_agent = self.agent.current.id().to_string();
        self.agent.current.install(agent.clone(), Arc::clone(&catalog), &self.link.options);
        self.record_handoff(old_agent, agent.id().to_string());
        let on_enter = agent.on_enter_instructions().map(str::to_string);
        let factory = self.agent.current.factory();
        match factory.spawn(agent, catalog, kept.clone(), myself.get_cell()).await {
            Ok(activity) => self.agent.current.set_activity(activity),
            Err(e) => {
                let message = format!("cannot start agent `{}`: {e}", self.agent.current.id());
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        }
        // Session-scoped and handed-over toolsets now report to the new agent (decision 16).
        let current = &self.agent.current;
        let agent_id: Arc<str> = current.id().into();
        for toolset in current.factory().session_toolsets().values().chain(kept.values()) {
            let _ = toolset.cast(ToolsetMsg::SetOwner { agent_id: Arc::clone(&agent_id) });
        }
        let _ = self.mock_tools_refresh();
        if let Some(instructions) = on_enter {
            self.start_on_enter(instructions);
        }
        for queued in queued {
            self.host.commands.replay_next();
            let _ = match queued {
                QueuedWork::UserTurn(text) => self.user_turn(text),
                QueuedWork::UserInput(text) => self.queue_input(text),
                QueuedWork::Speech(source, content) => self.create_speech(source, content),
            };
            self.host.commands.end();
        }
        self.floor_changed();
    }

    /// Commits the `agent_handoff` item from `old_agent` to `new_agent` (who is current from
    /// then on) and emits its events.
    fn record_handoff(&mut self, old_agent: String, new_agent: String) {
        let item = Arc::new(ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: Some(old_agent.clone()),
            new_agent: new_agent.clone(),
            created_at: self.link.clock.now(),
        }));
        self.apply(Fact::AgentEntered { item: &item });
        self.emit_now(EventKind::AgentHandoff { old_agent: Some(old_agent), new_agent });
        if self.host.events.wants(EventType::ConversationItemAdded) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
    }
}
