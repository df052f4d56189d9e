//! Who may write a session's journal (docs/durability.md#leases): one holder at a time, by
//! a lease that expires unless renewed, fenced by an epoch that each acquire increments — a
//! holder whose lease was taken over can no longer append.
//!
//! The rules an acquire follows are here, as a pure function over what a store keeps
//! ([`StoredLease::grant`]), so every store decides the same way.

use std::fmt;
use std::time::Duration;

use crate::store::StoreError;

/// How long a lease lasts without a renewal unless a session is told otherwise: a session's
/// writer renews it every third of that, and a holder that stops (a crash on another host)
/// leaves the session to the next process after that long at most.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// Who holds a lease: a process, by host name and pid (what an error shows, and what lets a
/// process on the same host take over at once from one that no longer runs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseHolder {
    /// The host's name.
    pub host: String,
    /// The process id on that host.
    pub pid: u32,
}

impl LeaseHolder {
    /// Process `pid` on host `host`.
    pub fn new(host: impl Into<String>, pid: u32) -> Self {
        Self { host: host.into(), pid }
    }

    /// This process, on this host.
    pub fn this_process() -> Self {
        Self::new(host_name(), std::process::id())
    }

    /// Whether this holder is known to have stopped: a process of this host that no longer
    /// runs. A holder on another host (or on a system where this cannot be told) is not known
    /// to have stopped: its lease is left to expire.
    pub fn is_gone(&self) -> bool {
        self.host == host_name() && !process_runs(self.pid)
    }
}

impl fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "process {} on `{}`", self.pid, self.host)
    }
}

/// The right to write one session's journal, as [`SessionStore::acquire`] grants it.
///
/// [`SessionStore::acquire`]: crate::SessionStore::acquire
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The session.
    pub session: String,
    /// Who holds it.
    pub holder: LeaseHolder,
    /// The fencing token: one more than the lease before it. An append or a renewal with an
    /// older epoch is refused ([`StoreError::LeaseLost`]).
    pub epoch: u64,
    /// How long it lasts after each renewal.
    pub ttl: Duration,
}

impl Lease {
    /// Lease number `epoch` on session `session`, held by `holder` for `ttl` at a time.
    pub fn new(session: impl Into<String>, holder: LeaseHolder, epoch: u64, ttl: Duration) -> Self {
        Self { session: session.into(), holder, epoch, ttl }
    }
}

/// Whether an acquire may take a lease that another holder has and that has not expired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// Only if its holder is known to have stopped ([`LeaseHolder::is_gone`]).
    #[default]
    IfFree,
    /// In any case: the host knows the old holder is gone (it may not write any more).
    TakeOver,
}

/// A session's lease as a store keeps it; its epoch stays when it is released, so that a new
/// lease is always numbered after every old one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredLease {
    /// The epoch of the last lease granted.
    pub epoch: u64,
    /// Its holder; `None` once released.
    pub holder: Option<LeaseHolder>,
    /// When it expires (milliseconds since the Unix epoch).
    pub expires_ms: u64,
}

impl StoredLease {
    /// The lease `epoch`, held by `holder` until `expires_ms`.
    pub fn new(epoch: u64, holder: Option<LeaseHolder>, expires_ms: u64) -> Self {
        Self { epoch, holder, expires_ms }
    }

    /// The epoch of the lease an acquire of session `session` gets at `now_ms`, given what is
    /// stored (`None`: never leased): refused with [`StoreError::Leased`] while a live holder
    /// has it, unless `mode` takes it over.
    pub fn grant(
        stored: Option<&Self>,
        session: &str,
        mode: Acquire,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        let Some(stored) = stored else { return Ok(1) };
        if let Some(holder) = &stored.holder
            && stored.expires_ms > now_ms
            && mode == Acquire::IfFree
            && !holder.is_gone()
        {
            return Err(StoreError::Leased {
                session: session.to_string(),
                holder: holder.clone(),
                expires_in: Duration::from_millis(stored.expires_ms - now_ms),
            });
        }
        Ok(stored.epoch + 1)
    }

    /// Its holder at `now_ms`, if it has one whose lease has not expired.
    pub fn holder_at(&self, now_ms: u64) -> Option<LeaseHolder> {
        self.holder.clone().filter(|_| self.expires_ms > now_ms)
    }

    /// Whether `lease` is this one, still held: `Err(LeaseLost)` naming who has it otherwise.
    pub fn check(stored: Option<&Self>, lease: &Lease) -> Result<(), StoreError> {
        match stored {
            Some(s) if s.epoch == lease.epoch && s.holder.is_some() => Ok(()),
            _ => Err(StoreError::LeaseLost {
                session: lease.session.clone(),
                holder: stored.and_then(|s| s.holder.clone()),
            }),
        }
    }
}

/// This host's name (`localhost` if it has none it can tell).
fn host_name() -> String {
    #[cfg(unix)]
    if let Ok(name) = nix::unistd::gethostname()
        && let Some(name) = name.to_str()
        && !name.is_empty()
    {
        return name.to_owned();
    }
    "localhost".to_owned()
}

/// Whether process `pid` of this host runs: a signal 0 reaches it (or reaches a process that
/// is not ours to signal, which runs too). Elsewhere than Unix it cannot be told, so it runs.
fn process_runs(pid: u32) -> bool {
    #[cfg(unix)]
    {
        use nix::errno::Errno;
        let Ok(pid) = i32::try_from(pid) else { return true };
        !matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(Errno::ESRCH))
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}
