//! What the Session does when one of its children ends unasked, and the names it gives them
//! in lifecycle records.
//!
//! Invariant: the conversation survives its Activity: a new one starts for the same agent
//! over the same context, and nothing that waited on the lost one waits for ever.
//!
//! Decides `SpeechesLost` (and the lost reply speeches' `SpeechDone`), `OldAgentDrained` (a
//! handoff goes ahead); installs the new Activity. Emits a `session` error; sets the agent
//! listening; fails a run, finishes a close or a handoff waiting on the lost Activity,
//! releases idle waiters.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{AgentState, ErrorSource, EventKind};
use ractor::ActorRef;

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{ActivityMsg, SessionMsg};
use crate::types::error::SessionError;
use crate::types::lifecycle::ActorKind;

impl SessionState {
    /// The current Activity ended without being asked to (it failed, or something stopped
    /// it): its speeches are gone. Deferred replies it was speaking count as interrupted, a
    /// `run` watching it fails, and a new Activity starts for the same agent over the same
    /// context, so the conversation goes on. (Its agent-scoped calls end `error` on their own:
    /// their Toolset's drop guard reports them when ractor kills it with its parent.)
    pub(super) async fn activity_lost(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        why: Option<String>,
    ) {
        for speech_id in self.tools.replies.speaking() {
            self.speech_done(speech_id, true);
        }
        self.apply(Fact::SpeechesLost);
        self.inputs_unanswered();
        let why = why.unwrap_or_else(|| "stopped".into());
        self.finish_run(Some(SessionError::RunFailed(format!("the activity failed: {why}"))));
        self.set_agent_state(AgentState::Listening);
        if self.host.close.is_closing() {
            self.release_idle_waiters();
            self.finish_close(myself).await;
            return;
        }
        if self.agent.handoff.is_some() {
            // The old agent is gone anyway: the handoff goes ahead.
            self.apply(Fact::OldAgentDrained);
            self.complete_handoff_if_drained(myself).await;
            self.release_idle_waiters();
            return;
        }
        self.restart_activity(myself, &why).await;
        self.release_idle_waiters();
        self.floor_changed();
    }

    /// A session-scoped toolset failed (its calls ended with it): it starts again, and the
    /// current Activity sends its calls there, so its tools keep working. Not while the
    /// session closes.
    pub(super) async fn session_toolset_lost(
        &mut self,
        cell: &ractor::ActorCell,
        myself: &ActorRef<SessionMsg>,
    ) {
        if self.host.close.is_closing() {
            return;
        }
        let session_toolsets = self.agent.current.factory().session_toolsets();
        let Some(id) = session_toolsets.iter().find(|(_, t)| t.get_id() == cell.get_id()) else {
            return;
        };
        let id = id.0.clone();
        let factory = self.agent.current.factory_mut();
        let message = match factory.restart(&id, myself.get_cell()).await {
            Some(Ok(toolset)) => {
                let replace = ActivityMsg::ReplaceToolset { id: id.clone(), toolset };
                let _ = self.agent.current.activity().cast(replace);
                format!("toolset `{id}` started again after it failed")
            }
            Some(Err(e)) => format!("toolset `{id}` failed and could not start again: {e}"),
            None => return,
        };
        tracing::warn!(session = %self.link.id, "{message}");
        self.emit_now(EventKind::error(ErrorSource::Session, message));
    }

    /// A new Activity for the current agent, reported as a `session` error event.
    async fn restart_activity(&mut self, myself: &ActorRef<SessionMsg>, why: &str) {
        let current = &self.agent.current;
        let (agent, catalog) = (current.agent().clone(), Arc::clone(current.catalog()));
        match current.factory().spawn(agent, catalog, BTreeMap::new(), myself.get_cell()).await {
            Ok(activity) => {
                self.agent.current.set_activity(activity);
                let _ = self.mock_tools_refresh();
                let id = self.agent.current.id();
                let message = format!("agent `{id}` restarted: its activity failed: {why}");
                tracing::warn!(session = %self.link.id, "{message}");
                self.emit_now(EventKind::error(ErrorSource::Session, message));
            }
            Err(e) => {
                let message = format!("cannot restart agent `{}`: {e}", self.agent.current.id());
                self.emit_now(EventKind::error(ErrorSource::Session, message));
            }
        }
    }

    /// The stable inspection id and kind of a child of the Session, by its actor id.
    pub(super) fn child_name(&self, cell: &ractor::ActorCell) -> Option<(ActorKind, String)> {
        let id = cell.get_id();
        let current = &self.agent.current;
        if current.activity().get_id() == id {
            return Some((ActorKind::Activity, format!("activity:{}", current.id())));
        }
        if self.link.coalescer.get().is_some_and(|c| c.get_id() == id) {
            return Some((ActorKind::Coalescer, "coalescer".into()));
        }
        let kept = self.agent.handoff.iter().flat_map(|h| h.kept().iter());
        current
            .factory()
            .session_toolsets()
            .iter()
            .chain(kept)
            .find(|(_, toolset)| toolset.get_id() == id)
            .map(|(name, _)| (ActorKind::Toolset, format!("toolset:{name}")))
    }

    /// Test hook: makes the actor with inspection id `target` panic.
    #[cfg(feature = "test-hooks")]
    pub(super) fn inject_failure(&self, target: &str) {
        use crate::messages::{ActivityMsg, ToolsetMsg};
        if target == "session" {
            panic!("injected failure");
        }
        let activity = self.agent.current.activity();
        if let Some(call_id) = target.strip_prefix("tool_call:") {
            let toolset = self.tools.calls.get(call_id).and_then(|r| r.toolset());
            if let Some(toolset) = toolset {
                let _ = toolset.cast(ToolsetMsg::InjectCallFailure(call_id.to_string()));
            }
        } else if target.starts_with("activity:") {
            let _ = activity.cast(ActivityMsg::InjectFailure);
        } else if let Some(id) = target.strip_prefix("toolset:") {
            match self.agent.current.factory().session_toolsets().get(id) {
                Some(toolset) => {
                    let _ = toolset.cast(ToolsetMsg::InjectFailure);
                }
                None => {
                    let _ = activity.cast(ActivityMsg::InjectToolsetFailure(id.to_string()));
                }
            }
        }
    }
}
