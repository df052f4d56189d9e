//! Agent handoff (§11.3, decisions 4, 7, 12, 16 and 22), as the Session runs it:
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

use colloquy_core::chat::AgentHandoff;
use colloquy_core::{Agent, ChatItem, ErrorSource, EventKind, EventType, text};
use ractor::ActorRef;

use super::parts::handoff::{PendingHandoff, Queued};
use super::state::SessionState;
use crate::protocol::{ActivityMsg, SessionMsg, TimerMsg, ToolsetMsg};
use crate::support::catalog::Scope;
use crate::support::task::OwnedTask;

impl SessionState {
    /// Starts a handoff to `agent` (a tool returned it, or the host asked).
    pub fn request_handoff(&mut self, agent: Arc<Agent>) {
        if self.close.is_closing() {
            return;
        }
        if self.handoff.is_some() {
            let message =
                format!("a handoff is already in progress; `{}` was not entered", agent.id());
            self.emit_now(EventKind::error(ErrorSource::Session, message));
            return;
        }
        let catalog = match self.factory.catalog(&agent) {
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
        let keep: Vec<String> = (self.current.catalog)
            .async_toolsets(Scope::Agent)
            .map(|a| a.id.clone())
            .filter(|id| next.contains(id))
            .collect();
        self.handoff = Some(PendingHandoff::new(agent, catalog));
        self.presence.stop_away_timer();
        let _ = self.current.activity.cast(ActivityMsg::Drain { keep });
        // The bound counts from now: a blocking call keeps its speech (and so the Activity's
        // wind-down) open, and must end by it too (decision 7).
        self.start_drain_timer();
    }

    /// The old Activity has no speech left: drain its calls (decision 7).
    pub async fn activity_drained(
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

    /// Starts the drain timer, if the session has one (decision 7).
    pub(super) fn start_drain_timer(&mut self) {
        let Some(timeout) = self.link.options.drain_timeout else { return };
        let session = self.link.actor.clone();
        self.drain_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(TimerMsg::DrainTimeout.into());
        }));
    }

    /// The drain ran out of time: abort the calls it waits for (all of them at close, the
    /// old agent's at a handoff); each ends `error` "drain timeout", and the toolsets it
    /// drains start no new call (a speech still winding down may yet dispatch one).
    pub fn drain_timeout(&mut self) {
        self.drain_timer = None;
        let closing = self.close.is_closing();
        let draining = self.handoff.as_ref().filter(|h| h.drained);
        self.calls.abort(|running| closing || draining.is_some_and(|h| h.drains(running)));
        let _ = self.current.activity.cast(ActivityMsg::DrainExpired);
        if closing {
            for toolset in self.factory.session_toolsets.values() {
                let _ = toolset.cast(ToolsetMsg::Expire);
            }
        }
    }

    /// Completes the handoff once the old agent's calls have all ended.
    pub async fn complete_handoff_if_drained(&mut self, myself: &ActorRef<SessionMsg>) {
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
        self.drain_timer = None;
        if let Err(e) = self.current.activity.stop_and_wait(Some("handoff".into()), None).await {
            tracing::warn!(session = %self.link.id, "old activity did not stop cleanly: {e}");
        }
        let agent = Agent::clone(&handoff.agent);
        let old_agent =
            self.current.enter(agent.clone(), Arc::clone(&handoff.catalog), &self.link.options);
        self.record_handoff(old_agent);
        let on_enter = agent.on_enter_instructions().map(str::to_string);
        let kept = handoff.kept.clone();
        match self.factory.spawn(agent, handoff.catalog, kept.clone(), myself.get_cell()).await {
            Ok(activity) => self.current.activity = activity,
            Err(e) => {
                let message = format!("cannot start agent `{}`: {e}", self.current.id);
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        }
        // Session-scoped and handed-over toolsets now report to the new agent (decision 16).
        let agent_id: Arc<str> = self.current.id.as_str().into();
        for toolset in self.factory.session_toolsets.values().chain(kept.values()) {
            let _ = toolset.cast(ToolsetMsg::SetOwner { agent_id: Arc::clone(&agent_id) });
        }
        let _ = self.mock_tools_refresh();
        if let Some(instructions) = on_enter {
            self.start_on_enter(instructions);
        }
        for queued in handoff.queued {
            let _ = match queued {
                Queued::UserTurn(text) => self.user_turn(text),
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
            new_agent: self.current.id.clone(),
            created_at: self.link.clock.now(),
        });
        if let Some(run) = &mut self.run {
            run.items.push(item.clone());
        }
        let item = self.conversation.mark_handoff(item);
        self.emit_now(EventKind::AgentHandoff {
            old_agent: Some(old_agent),
            new_agent: self.current.id.clone(),
        });
        if self.events.wants(EventType::ConversationItemAdded) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
        self.conversation.open(&self.current.id);
    }
}
