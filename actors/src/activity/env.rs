//! What every speech of one Activity shares, and how a speech ends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use colloquy_model::{ErrorSource, EventKind, FunctionTool};
use ractor::{Actor, ActorRef};

use super::lending::Attention;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, Report, SessionLink, ToolsetMsg};
use crate::toolset::{ToolsetActor, ToolsetArgs};

/// The testing API's mocks, shared by every toolset of the agent.
pub(crate) type Mocks = Arc<BTreeMap<String, FunctionTool>>;

/// What every speech of one Activity shares.
pub(crate) struct SpeechEnv {
    pub session: SessionLink,
    pub activity: ActorRef<ActivityMsg>,
    pub agent_id: Arc<str>,
    pub instructions: Arc<str>,
    pub catalog: Arc<ToolCatalog>,
    /// Every toolset actor this agent's calls may go to, by toolset id: behind a lock, as a
    /// toolset that failed is replaced by a new one while speeches run (written only then).
    pub toolsets: RwLock<BTreeMap<String, ActorRef<ToolsetMsg>>>,
    /// How the Activity spawns its own toolsets (not those handed over): the agent's implicit
    /// one at its first call (docs/decisions.md#deferred-toolset), and one that failed again.
    pub specs: Vec<ToolsetArgs>,
    /// The testing API's mocks last set, for a toolset spawned after them.
    pub mocks: RwLock<Option<Mocks>>,
    /// True while some toolset in `specs` has not been spawned yet.
    pub deferred: AtomicBool,
    /// Held while a deferred toolset is spawned; true once the Activity stops, which spawns
    /// no more (a toolset linked to it then would outlive it).
    pub spawning: tokio::sync::Mutex<bool>,
    /// The Activity waits for a lent floor or a speech's end (see `lending.rs`).
    pub attention: Attention,
}

impl SpeechEnv {
    /// The toolset actor with this id, as it runs now.
    pub(crate) fn toolset(&self, id: &str) -> Option<ActorRef<ToolsetMsg>> {
        self.toolsets.read().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }

    /// Every toolset actor, by id (a copy, for the rare paths that visit them all).
    pub(crate) fn toolsets(&self) -> BTreeMap<String, ActorRef<ToolsetMsg>> {
        self.toolsets.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The testing API's mocks last set, if any.
    pub(crate) fn mocks(&self) -> Option<Mocks> {
        self.mocks.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Toolset `id` runs as `toolset` from now on (the one before failed).
    pub(crate) fn replace_toolset(&self, id: &str, toolset: ActorRef<ToolsetMsg>) {
        let mut toolsets = self.toolsets.write().unwrap_or_else(PoisonError::into_inner);
        toolsets.insert(id.to_owned(), toolset);
    }

    /// The toolset with this id, spawned now if the Activity deferred it to its first call.
    pub(crate) async fn started_toolset(&self, id: &str) -> Option<ActorRef<ToolsetMsg>> {
        if let Some(toolset) = self.toolset(id) {
            return Some(toolset);
        }
        let spec = self.specs.iter().find(|s| s.id == id)?;
        let stopped = self.spawning.lock().await;
        // Another speech may have spawned it while this one waited for the lock.
        if *stopped || self.toolset(id).is_some() {
            return self.toolset(id);
        }
        let spawn = Actor::spawn_linked(None, ToolsetActor, spec.clone(), self.activity.get_cell());
        match Box::pin(spawn).await {
            Ok((toolset, _)) => {
                // In the map before the mocks are read: a `SetMocks` the Activity handles
                // meanwhile either finds it there or is read here.
                self.replace_toolset(id, toolset.clone());
                if let Some(mocks) = self.mocks() {
                    let _ = toolset.cast(ToolsetMsg::SetMocks(mocks));
                }
                let all = {
                    let toolsets = self.toolsets.read().unwrap_or_else(PoisonError::into_inner);
                    self.specs.iter().all(|s| toolsets.contains_key(&s.id))
                };
                self.deferred.store(!all, Ordering::Release);
                // ractor ran its `pre_start` in this task and queued its own behind it: let it
                // start, so the step's calls reach their toolsets in the order they are sent,
                // as when this one started with the Activity.
                tokio::task::yield_now().await;
                Some(toolset)
            }
            Err(e) => {
                let message = format!("could not start toolset {id}: {e}");
                tracing::error!(agent = %self.agent_id, "{message}");
                self.session.emit(EventKind::error(ErrorSource::Tool, message));
                None
            }
        }
    }

    /// Spawns the deferred toolsets the calls named go to, before they are dispatched.
    pub(super) async fn start_toolsets_for<'a>(&self, names: impl Iterator<Item = &'a str>) {
        if !self.deferred.load(Ordering::Acquire) {
            return;
        }
        for name in names {
            if let Some((_, id)) = self.catalog.resolve(name) {
                self.started_toolset(&id).await;
            }
        }
    }

    /// Spawns every deferred toolset (an inspection shows the whole tree).
    pub(super) async fn start_all_toolsets(&self) {
        if self.deferred.load(Ordering::Acquire) {
            for spec in &self.specs {
                self.started_toolset(&spec.id).await;
            }
        }
    }

    /// Tells the host, once per user turn, that the turn has made all its tool calls
    /// (docs/decisions.md#edges-tool-deadlines).
    pub(super) fn announce_tool_budget(&self) {
        if let Some(limit) = self.session.clock.announce_tool_budget() {
            tracing::warn!(agent = %self.agent_id, limit, "the turn has made its tool calls");
            self.session.emit(colloquy_model::EventKind::ToolBudgetExhausted { limit });
        }
    }

    /// After a speech lent its floor or ended: tells the Activity only if it waits for
    /// something (`lending.rs`); otherwise it notices at its next message.
    pub(super) fn wake_activity_if_waiting(&self) {
        if self.attention.get() {
            let _ = self.activity.cast(ActivityMsg::Wake);
        }
    }
}

/// How a speech ended.
pub(crate) struct SpeechEnd {
    pub interrupted: bool,
    /// Reports of the speech's last step not sent yet (its `speaking` state, if nothing
    /// suspended since, and its message): they go to the Session in one message with the
    /// speech's end.
    pub tail: Vec<Report>,
}

impl SpeechEnd {
    pub(super) fn new(interrupted: bool) -> Self {
        SpeechEnd { interrupted, tail: Vec::new() }
    }
}
