//! What supervises a tool's calls besides its body (decisions 45, 58, 59 and 60): deadlines and
//! heartbeats (`CallLimits`), retries (`RetryPolicy`), concurrency caps (`ConcurrencyLimit`),
//! remembered results and approval. Plain data; the Toolset actor enforces them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::resumed::OnInterrupted;

/// Whether a call needs the host's approval, over its validated arguments.
pub(crate) type ApprovalCheck = dyn Fn(&Value) -> bool + Send + Sync;

/// How long a call may run, enforced by the runtime on the session clock, and what becomes of
/// it when a restart cuts it off. A field left `None` falls back to the enclosing toolset's,
/// then to the session's default (`SessionOptions::tool_deadline`, `tool_heartbeat`,
/// `on_interrupted`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallLimits {
    /// The call ends `timed_out` this long after it started, whatever it reports meanwhile.
    pub deadline: Option<Duration>,
    /// The call ends `timed_out` when this long passes without an update from its body.
    pub heartbeat: Option<Duration>,
    /// What a resumed session does with the call if its process ended while it ran.
    pub on_interrupted: Option<OnInterrupted>,
}

impl CallLimits {
    /// These limits, each unset one taken from `defaults`.
    pub fn or(self, defaults: CallLimits) -> CallLimits {
        CallLimits {
            deadline: self.deadline.or(defaults.deadline),
            heartbeat: self.heartbeat.or(defaults.heartbeat),
            on_interrupted: self.on_interrupted.or(defaults.on_interrupted),
        }
    }

    /// True when neither limit is set.
    pub fn is_unbounded(&self) -> bool {
        self.deadline.is_none() && self.heartbeat.is_none()
    }
}

/// How a tool marked safe to retry is re-run (docs/decisions.md#retries-and-hook): after an attempt
/// that returns an error (a [`ToolError`](crate::ToolError); a panic is never retried) or that runs past
/// [`attempt_timeout`](Self::attempt_timeout), the runtime waits `backoff × factorⁿ⁻¹`
/// (at most [`max_backoff`](Self::max_backoff), no jitter) and runs the body again, up to
/// `attempts` runs in all. The model sees one call and its last attempt's outcome; a deadline
/// on the tool bounds the whole call, every attempt and backoff included.
///
/// ```
/// # use colloquy_model::RetryPolicy;
/// # use std::time::Duration;
/// let policy = RetryPolicy::new(4, Duration::from_millis(200)).max_backoff(Duration::from_millis(500));
/// assert_eq!(policy.delay(1), Duration::from_millis(200)); // before the 2nd attempt
/// assert_eq!(policy.delay(2), Duration::from_millis(400));
/// assert_eq!(policy.delay(3), Duration::from_millis(500)); // capped
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Runs in all, the first included (at least 1).
    pub attempts: u32,
    /// The wait before the second attempt.
    pub backoff: Duration,
    /// How much each wait grows over the previous one (default 2).
    pub factor: u32,
    /// The longest wait (default 30 s).
    pub max_backoff: Duration,
    /// How long one attempt may run before it is dropped and retried (default `None`).
    pub attempt_timeout: Option<Duration>,
}

impl RetryPolicy {
    /// Up to `attempts` runs, waiting `backoff`, then twice as long each time, at most 30 s.
    pub fn new(attempts: u32, backoff: Duration) -> Self {
        RetryPolicy {
            attempts: attempts.max(1),
            backoff,
            factor: 2,
            max_backoff: Duration::from_secs(30),
            attempt_timeout: None,
        }
    }

    /// Each wait is `factor` times the previous one (1: a constant backoff).
    pub fn factor(mut self, factor: u32) -> Self {
        self.factor = factor.max(1);
        self
    }

    /// The longest wait between two attempts.
    pub fn max_backoff(mut self, cap: Duration) -> Self {
        self.max_backoff = cap;
        self
    }

    /// An attempt running this long is dropped (its future is not polled again) and, if
    /// attempts remain, retried; the last one ends the call with the timeout as its error.
    pub fn attempt_timeout(mut self, limit: Duration) -> Self {
        self.attempt_timeout = Some(limit);
        self
    }

    /// The wait after the `failed`-th attempt (1-based): `backoff × factor^(failed−1)`, capped.
    pub fn delay(&self, failed: u32) -> Duration {
        let growth = self.factor.checked_pow(failed.saturating_sub(1)).unwrap_or(u32::MAX);
        self.backoff.checked_mul(growth).unwrap_or(Duration::MAX).min(self.max_backoff)
    }
}

/// A cap on how many calls of a group run at once in one toolset actor: a tool's own
/// (`tool:NAME`) or a toolset's (`toolset:ID`), shared by the calls of all its tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConcurrencyLimit {
    /// Which calls share the cap: `tool:NAME` or `toolset:ID`.
    pub group: Arc<str>,
    /// At most this many run at once (at least 1).
    pub max: usize,
}

/// What decides whether a call runs now: concurrency caps and the remembered-result window.
#[derive(Clone, Debug, Default)]
pub(crate) struct Admission {
    /// The tool's own cap.
    pub(crate) max_concurrent: Option<usize>,
    /// Its toolsets' caps, innermost first.
    pub(crate) shared: Vec<ConcurrencyLimit>,
    /// How long a finished result answers the same call again.
    pub(crate) remember_for: Option<Duration>,
    /// A remembered result tells the model it was remembered.
    pub(crate) note_remembered: bool,
}

/// What supervises a tool's calls besides its body.
#[derive(Clone, Default)]
pub(crate) struct Controls {
    /// Set on the tool itself.
    pub(crate) limits: CallLimits,
    /// Its toolsets' (the innermost that sets each), kept apart so a toolset can change them.
    pub(crate) inherited: CallLimits,
    /// Set for tools marked safe to retry.
    pub(crate) retry: Option<RetryPolicy>,
    /// Set when calls may need the host's approval before their body runs.
    pub(crate) approval: Option<Arc<ApprovalCheck>>,
    /// Concurrency limits and remembered results.
    pub(crate) admission: Admission,
}
