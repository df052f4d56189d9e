//! A handoff in progress (its steps: `handoff.rs` in the session folder): the agent it goes
//! to, whether the old Activity has drained, and the work queued for the new agent.
//!
//! Invariant: work that arrives during a handoff is queued in arrival order and replayed, in
//! that order, to the new agent.
//!
//! Applies: `WorkQueued`, `OldAgentDrained` (`HandoffBegan` and `HandoffEnded` make and drop
//! it, agent.rs). Handles: the next agent's code and catalog, the toolsets it keeps.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::Agent;
use ractor::ActorRef;

use super::calls::Running;
use super::fact::{Fact, QueuedWork};
use crate::catalog::ToolCatalog;
use crate::messages::ToolsetMsg;

/// A handoff in progress.
#[derive(Default)]
pub(crate) struct PendingHandoff {
    /// The old Activity has no speech left.
    drained: bool,
    queued: Vec<QueuedWork>,
    /// The next agent's code and catalog, installed with `HandoffBegan`.
    next: Option<(Arc<Agent>, Arc<ToolCatalog>)>,
    /// Async toolsets both agents list, handed over by the old Activity: they move to the new
    /// agent with their calls running.
    kept: BTreeMap<String, ActorRef<ToolsetMsg>>,
}

impl PendingHandoff {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::WorkQueued(work) => self.queued.push(work.clone()),
            Fact::OldAgentDrained => self.drained = true,
            _ => {}
        }
    }

    /// The next agent's code and catalog (after `HandoffBegan`).
    pub(crate) fn install(&mut self, agent: Arc<Agent>, catalog: Arc<ToolCatalog>) {
        self.next = Some((agent, catalog));
    }

    /// The next agent's code and catalog.
    pub(crate) fn next(&self) -> Option<&(Arc<Agent>, Arc<ToolCatalog>)> {
        self.next.as_ref()
    }

    /// The work queued for the new agent, in arrival order.
    pub(crate) fn queued(&self) -> &[QueuedWork] {
        &self.queued
    }

    /// The toolsets the old Activity hands over (the Session supervises them meanwhile).
    pub(crate) fn keep(&mut self, kept: BTreeMap<String, ActorRef<ToolsetMsg>>) {
        self.kept = kept;
    }

    /// The toolsets the old Activity handed over.
    pub(crate) fn kept(&self) -> &BTreeMap<String, ActorRef<ToolsetMsg>> {
        &self.kept
    }

    /// The old Activity has no speech left.
    pub(crate) fn is_drained(&self) -> bool {
        self.drained
    }

    /// Whether this handoff drains `running`: the old agent's call, unless its toolset moves
    /// to the new agent.
    pub(crate) fn drains(&self, running: &Running) -> bool {
        let toolset = running.toolset().map(|t| t.get_id());
        running.agent_scoped() && !self.kept.values().any(|t| Some(t.get_id()) == toolset)
    }
}
