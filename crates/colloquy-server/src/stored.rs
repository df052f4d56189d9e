//! Sessions kept in a store (`ServerBuilder::store`): listing them beside the live ones, and
//! resuming one that is not live when a client attaches to it — once, however many clients
//! attach at once (docs/decisions.md#serve-store).

use std::sync::Arc;

use colloquy_protocol::{ErrorCode, ServerError, SessionList};
use futures_util::FutureExt;

use crate::live::Live;
use crate::registry::{Found, Resuming};
use crate::routes::{Shared, register, reserve, unknown_session};

/// `GET /v1/sessions`: the live sessions and, with a store, the stored ones, each marked live
/// or not.
pub(crate) async fn list(shared: &Shared) -> Result<SessionList, ServerError> {
    let live = shared.registry.list();
    let mut stored = shared.backend.stored().await?;
    for session in stored.iter_mut().flatten() {
        session.live = live.iter().any(|live| live.id == session.session_id);
    }
    Ok(SessionList { sessions: live.iter().map(|live| live.info()).collect(), stored })
}

/// Session `id` live in this server, resumed from the store first if it is kept there, not
/// live and not closed. Every caller for one id awaits the same resume.
pub(crate) async fn live_or_resumed(
    shared: &Arc<Shared>,
    id: &str,
) -> Result<Arc<Live>, ServerError> {
    if let Some(live) = shared.registry.get(id) {
        return Ok(live);
    }
    if shared.numbers.is_none() {
        return Err(unknown_session(id));
    }
    let found = shared.registry.get_or_resume(id, || begin(shared, id.to_owned()));
    match found {
        Found::Live(live) => Ok(live),
        Found::Resuming(resuming) => resuming.await,
    }
}

/// Resumes `id` in a task of its own, so that a client that leaves does not cut it short
/// (a session resumed and never registered would run on, unseen).
fn begin(shared: &Arc<Shared>, id: String) -> Resuming {
    let task = {
        let shared = Arc::clone(shared);
        shared.tasks.clone().spawn(async move {
            // Dropped after the session is registered, or if the resume fails or panics.
            let _done = Done(Arc::clone(&shared), id.clone());
            resume(&shared, &id).await
        })
    };
    let joined = task.map(|joined| {
        joined.unwrap_or_else(|e| {
            Err(ServerError::new(ErrorCode::StartFailed, format!("the resume failed: {e}")))
        })
    });
    joined.boxed().shared()
}

/// Takes a place, resumes `id` where the backend keeps it and registers it (before the
/// registry forgets the resume: no second one begins in between).
async fn resume(shared: &Shared, id: &str) -> Result<Arc<Live>, ServerError> {
    let reservation = reserve(shared)?;
    let Some(started) = shared.backend.resume(id.to_owned()).await? else {
        return Err(unknown_session(id));
    };
    tracing::info!(session = id, "resumed from the store");
    register(shared, reservation, started, true).await
}

/// Forgets the resume of a session once it has ended, however it ended, so a later attach
/// finds the session live or tries again.
struct Done(Arc<Shared>, String);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.registry.resumed(&self.1);
    }
}
