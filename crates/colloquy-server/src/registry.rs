//! The server's sessions by id: the live ones, the starts under way (they count against
//! [`Limits::max_sessions`](crate::Limits::max_sessions)), and the resumes under way, one per
//! id however many clients attach at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use colloquy_protocol::ServerError;
use futures_util::future::{BoxFuture, Shared};

use crate::live::Live;

/// A resume under way: every client attaching to its session awaits the same one.
pub(crate) type Resuming = Shared<BoxFuture<'static, Result<Arc<Live>, ServerError>>>;

/// The live sessions by id, and the starts under way (they count against the limit).
#[derive(Default)]
pub(crate) struct Registry {
    inner: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    live: BTreeMap<String, Arc<Live>>,
    starting: usize,
    resuming: BTreeMap<String, Resuming>,
    shutting_down: bool,
}

/// Where a client attaching to a session that is not live finds it.
pub(crate) enum Found {
    /// Live now.
    Live(Arc<Live>),
    /// Being resumed: await it.
    Resuming(Resuming),
}

/// Why a session cannot start now.
pub(crate) enum Refused {
    Full,
    ShuttingDown,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a place for a session about to start; released when the guard drops.
    pub(crate) fn reserve(self: &Arc<Self>, max: usize) -> Result<Reservation, Refused> {
        let mut sessions = self.lock();
        if sessions.shutting_down {
            return Err(Refused::ShuttingDown);
        }
        if sessions.live.len() + sessions.starting >= max {
            return Err(Refused::Full);
        }
        sessions.starting += 1;
        Ok(Reservation(Arc::clone(self)))
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Live>> {
        self.lock().live.get(id).cloned()
    }

    pub(crate) fn list(&self) -> Vec<Arc<Live>> {
        self.lock().live.values().cloned().collect()
    }

    /// Session `id` live, or its resume under way, or the one `resume` begins (called under
    /// the registry's lock, so two clients never begin two).
    pub(crate) fn get_or_resume(&self, id: &str, resume: impl FnOnce() -> Resuming) -> Found {
        let mut sessions = self.lock();
        if let Some(live) = sessions.live.get(id) {
            return Found::Live(Arc::clone(live));
        }
        let resuming = sessions.resuming.entry(id.to_owned()).or_insert_with(resume);
        Found::Resuming(resuming.clone())
    }

    /// The resume of `id` has ended: the session is live (registered first) or failed.
    pub(crate) fn resumed(&self, id: &str) {
        self.lock().resuming.remove(id);
    }

    pub(crate) fn remove(&self, id: &str) {
        self.lock().live.remove(id);
    }

    /// Takes no new session from now on; the live ones.
    pub(crate) fn shut(&self) -> Vec<Arc<Live>> {
        let mut sessions = self.lock();
        sessions.shutting_down = true;
        sessions.live.values().cloned().collect()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}

/// A place held for a starting session.
pub(crate) struct Reservation(Arc<Registry>);

impl Reservation {
    /// The session started: it takes the reserved place, unless the server began shutting
    /// down meanwhile (`Err`: the caller closes it, since the shutdown did not see it).
    pub(crate) fn fill(self, live: Arc<Live>) -> Result<(), Arc<Live>> {
        let mut sessions = self.0.lock();
        if sessions.shutting_down {
            return Err(live);
        }
        sessions.live.insert(live.id.clone(), live);
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut sessions = self.0.lock();
        sessions.starting = sessions.starting.saturating_sub(1);
    }
}
