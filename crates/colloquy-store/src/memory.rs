//! A store in memory: for tests, and for sessions whose resume is within one process (a
//! scenario's `crash` step on the paused clock).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::record::Entry;
use crate::store::{SessionStore, SessionSummary, StoreError};

/// Keeps journals in memory: durable as long as the process (or the value) lives.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, (Vec<Entry>, u64)>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SessionStore for MemoryStore {
    fn append(&self, session: &str, entries: &[Entry]) -> Result<(), StoreError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let (stored, updated) = sessions.entry(session.to_string()).or_default();
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

    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let (entries, _) =
            sessions.get(session).ok_or_else(|| StoreError::UnknownSession(session.into()))?;
        Ok(entries.clone())
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<SessionSummary> = sessions
            .iter()
            .map(|(id, (entries, updated))| SessionSummary::of(id, entries, *updated))
            .collect();
        list.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(list)
    }

    fn delete(&self, session: &str) -> Result<bool, StoreError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(sessions.remove(session).is_some())
    }
}

/// Milliseconds since the Unix epoch (0 before it: a clock set that far back is the host's).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
