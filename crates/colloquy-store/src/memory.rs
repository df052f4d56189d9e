//! A store in memory: for tests, and for sessions whose resume is within one process (a
//! scenario's `crash` step on the paused clock).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lease::{Acquire, Lease, LeaseHolder, StoredLease};
use crate::record::Entry;
use crate::store::{SessionStore, SessionSummary, StoreError};

/// Keeps journals in memory: durable as long as the process (or the value) lives.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

/// The journals and their leases, under one lock: an append checks its lease as it writes.
#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, (Vec<Entry>, u64)>,
    leases: HashMap<String, StoredLease>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SessionStore for MemoryStore {
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError> {
        let mut inner = self.lock();
        StoredLease::check(inner.leases.get(&lease.session), lease)?;
        let session = lease.session.as_str();
        let (stored, updated) = inner.sessions.entry(session.to_string()).or_default();
        let mut last = stored.last().map_or(0, |e| e.seq);
        for entry in entries {
            if entry.seq <= last {
                return Err(StoreError::Conflict { session: session.to_string(), seq: entry.seq });
            }
            last = entry.seq;
        }
        stored.extend_from_slice(entries);
        *updated = now_ms();
        Ok(())
    }

    fn acquire(
        &self,
        session: &str,
        holder: &LeaseHolder,
        ttl: Duration,
        mode: Acquire,
    ) -> Result<Lease, StoreError> {
        let mut inner = self.lock();
        let now = now_ms();
        let epoch = StoredLease::grant(inner.leases.get(session), session, mode, now)?;
        let expires = now.saturating_add(ttl.as_millis() as u64);
        let stored = StoredLease::new(epoch, Some(holder.clone()), expires);
        inner.leases.insert(session.to_string(), stored);
        Ok(Lease::new(session, holder.clone(), epoch, ttl))
    }

    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.leases.get_mut(&lease.session);
        StoredLease::check(stored.as_deref(), lease)?;
        if let Some(stored) = stored {
            stored.expires_ms = now_ms().saturating_add(lease.ttl.as_millis() as u64);
        }
        Ok(())
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(stored) = inner.leases.get_mut(&lease.session)
            && stored.epoch == lease.epoch
        {
            (stored.holder, stored.expires_ms) = (None, 0);
            // A lease of a session never written (a resume refused) leaves nothing behind.
            if !inner.sessions.contains_key(&lease.session) {
                inner.leases.remove(&lease.session);
            }
        }
        Ok(())
    }

    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let inner = self.lock();
        let (entries, _) = inner
            .sessions
            .get(session)
            .ok_or_else(|| StoreError::UnknownSession(session.into()))?;
        Ok(entries.clone())
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let inner = self.lock();
        let mut list: Vec<SessionSummary> = inner
            .sessions
            .iter()
            .map(|(id, (entries, updated))| {
                let mut summary = SessionSummary::of(id, entries, *updated);
                summary.held_by = inner.leases.get(id).and_then(|l| l.holder_at(now_ms()));
                summary
            })
            .collect();
        list.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(list)
    }

    fn delete(&self, session: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        inner.leases.remove(session);
        Ok(inner.sessions.remove(session).is_some())
    }
}

/// Milliseconds since the Unix epoch (0 before it: a clock set that far back is the host's).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
