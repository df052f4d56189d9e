//! Filler speech while a tool works (§2 `with_filler`): whenever the session has been quiet
//! for a while — no agent or user state change, no update from the call — the filler speaks.
//!
//! The filler watches the session's own event stream (a lossless subscription), so it needs no
//! hook into the actors: it restarts its dwell on every agent or user state change and every
//! update of its call; it never speaks while the agent or the user is speaking; it stops when
//! its guard is dropped or the dispatching speech is interrupted.

use std::sync::Arc;
use std::time::Duration;

use colloquy_model::{AgentState, EventKind, UserState};
use tokio::time::Instant;

use crate::messages::handle::SessionHandle;
use crate::support::task::OwnedTask;

type Source = dyn Fn(u32) -> Option<String> + Send + Sync;

/// How long a filler waits when it is due while someone speaks: until a state change.
const PARKED: Duration = Duration::from_secs(24 * 3600);

/// What a filler says and when.
///
/// ```
/// use colloquy_actors::Filler;
/// use std::time::Duration;
/// let once = Filler::text("Just a moment.").delay(Duration::from_millis(500));
/// let steps = Filler::steps(|step| Some(format!("Still working ({})…", step + 1)))
///     .delay(Duration::from_secs(2))
///     .interval(Duration::from_secs(5))
///     .max_steps(3);
/// ```
#[derive(Clone)]
pub struct Filler {
    source: Arc<Source>,
    delay: Duration,
    interval: Option<Duration>,
    max_steps: Option<u32>,
}

impl Filler {
    /// A fixed text.
    pub fn text(text: impl Into<String>) -> Self {
        let text: String = text.into();
        Self::steps(move |_| Some(text.clone()))
    }

    /// A text per step (0, 1, …); `None` says nothing that time.
    pub fn steps(source: impl Fn(u32) -> Option<String> + Send + Sync + 'static) -> Self {
        Self { source: Arc::new(source), delay: Duration::ZERO, interval: None, max_steps: None }
    }

    /// How long the session must stay quiet before the filler speaks (default 0).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Speak again after this much more quiet (default: only once).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// At most this many fillers.
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = Some(steps);
        self
    }
}

/// Keeps a filler running; dropping it ends the filler scope.
#[must_use = "the filler stops when this guard is dropped"]
pub struct FillerGuard {
    _task: Option<OwnedTask>,
}

impl Filler {
    /// Starts this filler for the call of `ctx`; it runs until the guard is dropped.
    pub(crate) fn start(
        self,
        session: SessionHandle,
        call_id: String,
        speech_id: String,
    ) -> FillerGuard {
        // Subscribe now, before the guard is returned, so no state change is missed.
        let events = session.subscribe();
        let task = OwnedTask::spawn(run(session, events, self, call_id, speech_id));
        FillerGuard { _task: Some(task) }
    }

    /// A guard that does nothing (no session to speak in).
    pub(crate) fn inert() -> FillerGuard {
        FillerGuard { _task: None }
    }
}

async fn run(
    session: SessionHandle,
    mut events: crate::messages::handle::EventStream,
    filler: Filler,
    call_id: String,
    speech_id: String,
) {
    let Ok((mut agent, mut user)) = session.states().await else { return };
    let mut step = 0u32;
    let mut deadline = Instant::now() + filler.delay;
    loop {
        if filler.max_steps.is_some_and(|max| step >= max) {
            return;
        }
        tokio::select! {
            biased;
            event = events.recv() => {
                let Some(event) = event else { return };
                match event.kind {
                    // Any state change restarts the dwell (the reference restarts on changes to
                    // speaking or thinking; restarting on the others too also ends a wait
                    // parked while someone spoke).
                    EventKind::AgentState { state } => {
                        agent = state;
                        deadline = Instant::now() + filler.delay;
                    }
                    EventKind::UserState { state } => {
                        user = state;
                        deadline = Instant::now() + filler.delay;
                    }
                    EventKind::ToolCallUpdated { call_id: ref id, .. } if *id == call_id => {
                        deadline = Instant::now() + filler.delay;
                    }
                    EventKind::SpeechDone { speech_id: ref id, interrupted: true } if *id == speech_id => {
                        return;
                    }
                    EventKind::SessionClosed { .. } => return,
                    _ => {}
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                if agent == AgentState::Speaking || user == UserState::Speaking {
                    // Not quiet: park until the next state change restarts the dwell.
                    deadline = Instant::now() + PARKED;
                    continue;
                }
                if let Some(text) = (filler.source)(step)
                    && session.say(text).await.is_err()
                {
                    return;
                }
                step += 1;
                match filler.interval {
                    Some(interval) => deadline = Instant::now() + interval,
                    None => return,
                }
            }
        }
    }
}
