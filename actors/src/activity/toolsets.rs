//! The toolsets an Activity's calls go to, and the agent's own toolset, started at its first
//! call rather than with the Activity (docs/decisions.md#deferred-toolset).
//!
//! Speeches read the map; the Activity writes it when a toolset fails and is replaced, and a
//! speech when it starts a deferred one. What a toolset started later must be told (the
//! testing API's mocks, a drain's expiry) sits under the same lock as the map, and every cast
//! that tells it is made under that lock: a toolset added while the Activity sets mocks or
//! expires the toolsets is either visited by it or told by the one adding it, in the lock's
//! order, never left with older mocks or unexpired.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};

use colloquy_model::FunctionTool;
use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use crate::messages::ToolsetMsg;
use crate::toolset::{ToolsetActor, ToolsetArgs};

/// The testing API's mocks, shared by every toolset of the agent.
pub(crate) type Mocks = Arc<BTreeMap<String, FunctionTool>>;

pub(crate) struct Toolsets {
    running: RwLock<Running>,
    /// How the Activity spawns its own toolsets (not those handed over): the agent's implicit
    /// one at its first call, and one that failed again.
    specs: Vec<ToolsetArgs>,
    /// True while some toolset in `specs` has not been spawned yet: the hot path's one check.
    deferred: AtomicBool,
    /// Held while a deferred toolset is spawned, so that two speeches start one.
    spawning: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Running {
    actors: BTreeMap<String, ActorRef<ToolsetMsg>>,
    mocks: Option<Mocks>,
    /// A drain's timeout passed: every toolset but those kept refuses new calls.
    expired: bool,
}

impl Toolsets {
    pub(crate) fn new(
        actors: BTreeMap<String, ActorRef<ToolsetMsg>>,
        specs: Vec<ToolsetArgs>,
    ) -> Self {
        let deferred = specs.iter().any(|s| !actors.contains_key(&s.id));
        let running = Running { actors, ..Running::default() };
        Self {
            running: RwLock::new(running),
            specs,
            deferred: deferred.into(),
            spawning: tokio::sync::Mutex::new(()),
        }
    }

    fn write(&self) -> RwLockWriteGuard<'_, Running> {
        self.running.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The toolset actor with this id, as it runs now.
    pub(crate) fn get(&self, id: &str) -> Option<ActorRef<ToolsetMsg>> {
        self.running.read().unwrap_or_else(PoisonError::into_inner).actors.get(id).cloned()
    }

    /// Every toolset actor, by id (a copy, for the rare paths that visit them all).
    pub(crate) fn all(&self) -> BTreeMap<String, ActorRef<ToolsetMsg>> {
        self.running.read().unwrap_or_else(PoisonError::into_inner).actors.clone()
    }

    /// How the Activity spawns toolset `id` (one of its own).
    pub(crate) fn spec(&self, id: &str) -> Option<&ToolsetArgs> {
        self.specs.iter().find(|s| s.id == id)
    }

    /// The Activity's own toolsets not started yet.
    pub(crate) fn unstarted(&self) -> Vec<&ToolsetArgs> {
        if !self.deferred.load(Ordering::Acquire) {
            return Vec::new();
        }
        let running = self.running.read().unwrap_or_else(PoisonError::into_inner);
        self.specs.iter().filter(|s| !running.actors.contains_key(&s.id)).collect()
    }

    /// Whether some of the Activity's own toolsets has not started yet.
    pub(crate) fn any_deferred(&self) -> bool {
        self.deferred.load(Ordering::Acquire)
    }

    /// Toolset `id` runs as `toolset` from now on (the one before failed), with the mocks set.
    pub(crate) fn replace(&self, id: &str, toolset: ActorRef<ToolsetMsg>) {
        let mut running = self.write();
        if let Some(mocks) = &running.mocks {
            let _ = toolset.cast(ToolsetMsg::SetMocks(Arc::clone(mocks)));
        }
        running.actors.insert(id.to_owned(), toolset);
    }

    /// The testing API's mocks, for every toolset now and every one started later.
    pub(crate) fn set_mocks(&self, mocks: Mocks) {
        let mut running = self.write();
        for toolset in running.actors.values() {
            let _ = toolset.cast(ToolsetMsg::SetMocks(Arc::clone(&mocks)));
        }
        running.mocks = Some(mocks);
    }

    /// A drain's timeout passed: every toolset but those in `keep` refuses new calls and ends
    /// its running ones, and so does one started later.
    pub(crate) fn expire(&self, keep: &[String]) {
        let mut running = self.write();
        running.expired = true;
        for (_, toolset) in running.actors.iter().filter(|(id, _)| !keep.contains(id)) {
            let _ = toolset.cast(ToolsetMsg::Expire);
        }
    }

    /// Spawns toolset `id`, one of the Activity's own not started yet, under `supervisor` (the
    /// Activity); `Ok(None)` if it is no such toolset.
    pub(crate) async fn start(
        &self,
        id: &str,
        supervisor: ActorCell,
    ) -> Result<Option<ActorRef<ToolsetMsg>>, SpawnErr> {
        if let Some(toolset) = self.get(id) {
            return Ok(Some(toolset));
        }
        let Some(spec) = self.spec(id) else { return Ok(None) };
        let _spawning = self.spawning.lock().await;
        // Another speech may have started it while this one waited for the lock.
        if let Some(toolset) = self.get(id) {
            return Ok(Some(toolset));
        }
        let spawn = Actor::spawn_linked(None, ToolsetActor, spec.clone(), supervisor);
        let (toolset, _) = Box::pin(spawn).await?;
        {
            let mut running = self.write();
            if let Some(mocks) = &running.mocks {
                let _ = toolset.cast(ToolsetMsg::SetMocks(Arc::clone(mocks)));
            }
            if running.expired {
                let _ = toolset.cast(ToolsetMsg::Expire);
            }
            running.actors.insert(id.to_owned(), toolset.clone());
            let all = self.specs.iter().all(|s| running.actors.contains_key(&s.id));
            self.deferred.store(!all, Ordering::Release);
        }
        // ractor ran its `pre_start` in this task and queued the actor's own task behind it:
        // let that run first, so the step's calls reach their toolsets in the order they are
        // sent, as when this one started with the Activity.
        tokio::task::yield_now().await;
        Ok(Some(toolset))
    }
}
