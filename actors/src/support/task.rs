//! A tokio task owned by an actor's state: aborted when the state is dropped, including when
//! ractor kills the actor (docs/ractor-notes.md §2.3, probe 9).

use tokio::task::JoinHandle;

/// Aborts its task on drop.
#[derive(Debug)]
pub(crate) struct OwnedTask(JoinHandle<()>);

impl OwnedTask {
    /// Spawns `future` on the current runtime.
    pub(crate) fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(future))
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The text of a panic payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}
