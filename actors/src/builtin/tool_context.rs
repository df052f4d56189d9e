//! What a tool can do with its session: reach it, keep it company with filler speech, or hold
//! the floor for interactive work (§2). Core's `RunContext` is plain data; these
//! runtime abilities come from this extension trait, in the prelude.

use std::future::Future;

use colloquy_model::RunContext;

use crate::builtin::filler::{Filler, FillerGuard};
use crate::messages::handle::SessionHandle;
use crate::types::error::SessionError;

/// Runtime abilities of a tool's `RunContext`.
///
/// ```
/// use colloquy_actors::RunContextExt;
/// use colloquy_model::{FunctionTool, RunContext, ToolError, tool::NoArgs};
/// let announce = FunctionTool::new("announce", "Announces.", |ctx: RunContext, _a: NoArgs| async move {
///     if let Some(session) = ctx.session() {
///         session.say("One moment, please.").await.map_err(ToolError::internal)?;
///     }
///     Ok::<_, ToolError>("announced")
/// });
/// ```
pub trait RunContextExt {
    /// The session this call runs in (`None` in a standalone context).
    fn session(&self) -> Option<SessionHandle>;

    /// Speaks `filler` whenever the session stays quiet while this call works, until the guard
    /// is dropped or the dispatching speech is interrupted (C-65).
    fn with_filler(&self, filler: Filler) -> FillerGuard;

    /// Holds the floor for interactive work: waits for deferred replies already pending and
    /// for the session to be idle, then keeps deferred replies and other holds out until the
    /// guard is dropped. The holder's own `say` / `generate_reply` still speak, and a `run`
    /// that is active when the hold starts stays open until it ends (C-68).
    fn foreground(&self) -> impl Future<Output = Result<Foreground, SessionError>> + Send;
}

impl RunContextExt for RunContext {
    fn session(&self) -> Option<SessionHandle> {
        let any = self.session_any()?;
        any.downcast_ref::<SessionHandle>().cloned()
    }

    fn with_filler(&self, filler: Filler) -> FillerGuard {
        match self.session() {
            Some(session) => {
                filler.start(session, self.call_id().to_string(), self.speech_id().to_string())
            }
            None => Filler::inert(),
        }
    }

    fn foreground(&self) -> impl Future<Output = Result<Foreground, SessionError>> + Send {
        let session = self.session();
        async move {
            let session = session.ok_or(SessionError::Closed)?;
            let hold = session.hold_floor().await?;
            Ok(Foreground { session, hold })
        }
    }
}

/// A held floor; dropping it lets deferred replies and other holds in again.
#[must_use = "the floor is released when this guard is dropped"]
pub struct Foreground {
    session: SessionHandle,
    hold: u64,
}

impl Foreground {
    /// The session (to `say` or `generate_reply` while holding the floor).
    pub fn session(&self) -> &SessionHandle {
        &self.session
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        self.session.release_floor(self.hold);
    }
}
