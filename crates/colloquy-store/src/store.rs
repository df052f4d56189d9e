//! Where journals are kept: the [`SessionStore`] trait a host implements for its own database,
//! what it lists, and how it fails.

use std::fmt;
use std::time::Duration;

use crate::journal::Journal;
use crate::lease::{Acquire, Lease, LeaseHolder};
use crate::record::{Entry, Record};

/// Keeps the journals of sessions, by session id.
///
/// The session writes from a thread of its own (never from its actor's task), so the methods
/// block: a store over PostgreSQL or Redis calls its client's blocking API, or blocks on its
/// async one. `append` returns once its entries are durable — what the store calls durable is
/// the session's guarantee (docs/durability.md).
///
/// A session is written by the holder of its lease only (docs/durability.md#leases): `append`
/// checks the lease's epoch in the same transaction as it writes, so a process whose lease was
/// taken over can no longer write. [`StoredLease`](crate::StoredLease) holds the rules
/// `acquire` follows.
pub trait SessionStore: Send + Sync + 'static {
    /// Appends `entries`, numbered on from the session's last, to the journal of `lease`'s
    /// session (the first append creates it). Refused with [`StoreError::LeaseLost`] unless
    /// `lease` is the session's current one, and with [`StoreError::Conflict`] for an entry
    /// whose number is taken: two writers never interleave one journal.
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError>;

    /// Takes the lease of session `session` (a new one or a stored one) for `holder`, for
    /// `ttl`, numbered one after the last. While a holder that is not known to have stopped
    /// has it unexpired, refused with [`StoreError::Leased`] (naming that holder), unless
    /// `mode` takes it over; nothing stored changes then.
    fn acquire(
        &self,
        session: &str,
        holder: &LeaseHolder,
        ttl: Duration,
        mode: Acquire,
    ) -> Result<Lease, StoreError>;

    /// Extends `lease` by its ttl from now; [`StoreError::LeaseLost`] if it is no longer the
    /// session's (an expired lease that nobody took is renewed).
    fn renew(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Makes several writes of different sessions at once: the outcome of each, in order, as
    /// [`append`](Self::append), [`renew`](Self::renew) and [`release`](Self::release) would
    /// answer it. The runtime hands
    /// a store everything its sessions have ready in one call (docs/durability.md#group-commit);
    /// a store that can make them durable together — one transaction, one sync — overrides
    /// this, and its sessions share each other's syncs. By default, one after the other.
    fn write_many(&self, writes: &[Write<'_>]) -> Vec<Result<(), StoreError>> {
        writes
            .iter()
            .map(|write| match write {
                Write::Append { lease, entries } => self.append(lease, entries),
                Write::Renew(lease) => self.renew(lease),
                Write::Release(lease) => self.release(lease),
            })
            .collect()
    }

    /// Gives `lease` up, so the next acquire gets it at once (its epoch stays counted while
    /// the session has a journal; a lease of a session never written leaves nothing stored).
    /// Releasing a lease that is no longer held does nothing.
    fn release(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Every entry of session `session`, in order ([`StoreError::UnknownSession`] if none).
    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError>;

    /// The stored sessions, most recently active first.
    fn list(&self) -> Result<Vec<SessionSummary>, StoreError>;

    /// Deletes session `session`'s journal; false if there was none.
    fn delete(&self, session: &str) -> Result<bool, StoreError>;
}

/// One write of a group ([`SessionStore::write_many`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Write<'a> {
    /// [`SessionStore::append`].
    Append {
        /// The lease of the session written.
        lease: &'a Lease,
        /// The entries, numbered on from the session's last.
        entries: &'a [Entry],
    },
    /// [`SessionStore::renew`].
    Renew(&'a Lease),
    /// [`SessionStore::release`] (a group's releases: sessions that close together, as at a
    /// server's shutdown, give their leases up in one write).
    Release(&'a Lease),
}

/// A stored session, as [`SessionStore::list`] describes it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionSummary {
    /// Its id.
    pub id: String,
    /// The agent it was on last.
    pub agent: String,
    /// Its records.
    pub entries: u64,
    /// When its last record was written (milliseconds since the Unix epoch).
    pub updated_ms: u64,
    /// Why it closed, if it did.
    pub closed: Option<String>,
    /// The calls that had started and not ended at its last record: in doubt, should it
    /// resume (those waiting for approval or a place, which go on as they were, included).
    pub calls_in_doubt: usize,
    /// Who holds its lease, if anyone does and it has not expired (a holder that stopped
    /// without releasing it is listed until then: [`LeaseHolder::is_gone`] tells).
    pub held_by: Option<LeaseHolder>,
}

impl SessionSummary {
    /// This summary once `entries` (numbered on from its last) are appended, at `updated_ms`:
    /// for a store that keeps each session's summary as it writes, without reading the
    /// journal back.
    pub fn after(&self, entries: &[Entry], updated_ms: u64) -> Self {
        let change = Change::of(entries);
        let running = (self.calls_in_doubt as i64 + change.running).max(0) as usize;
        Self {
            id: self.id.clone(),
            agent: change.agent.unwrap_or_else(|| self.agent.clone()),
            entries: entries.last().map_or(self.entries, |e| e.seq),
            updated_ms,
            closed: self.closed.clone().or(change.closed),
            calls_in_doubt: running,
            held_by: self.held_by.clone(),
        }
    }

    /// The summary of session `id`, from its entries (held by nobody: [`Self::held_by`]
    /// is the store's to fill).
    pub fn of(id: &str, entries: &[Entry], updated_ms: u64) -> Self {
        let journal = Journal::fold(entries);
        Self {
            id: id.to_string(),
            agent: journal.agent.clone().unwrap_or_default(),
            entries: entries.last().map_or(0, |e| e.seq),
            updated_ms,
            closed: journal.closed.clone(),
            calls_in_doubt: journal.running.len(),
            held_by: None,
        }
    }
}

/// Why a store could not do what it was asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No session has this id.
    UnknownSession(String),
    /// An entry's number was taken: another writer appends to this session.
    Conflict {
        /// The session.
        session: String,
        /// The number that was taken.
        seq: u64,
    },
    /// The store holds a newer format than this build reads.
    NewerSchema {
        /// The store's version.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// The session's lease is held by a process that is not known to have stopped.
    Leased {
        /// The session.
        session: String,
        /// Who holds it.
        holder: LeaseHolder,
        /// How long it lasts unless renewed.
        expires_in: Duration,
    },
    /// A write or a renewal with a lease that is no longer the session's: another process
    /// took it over (or it was released), and this one may no longer write.
    LeaseLost {
        /// The session.
        session: String,
        /// Who holds it now, if anyone.
        holder: Option<LeaseHolder>,
    },
    /// A record could not be read back: the store is damaged (nothing was changed).
    Corrupt(String),
    /// The database failed (a locked or unwritable file, a full disk…).
    Io(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSession(id) => write!(f, "no stored session `{id}`"),
            Self::Conflict { session, seq } => write!(
                f,
                "session `{session}` has a record {seq} already: another process writes to it"
            ),
            Self::NewerSchema { found, supported } => write!(
                f,
                "the store was written by a newer colloquy (schema {found}; this one reads up to \
                 {supported}): upgrade colloquy to open it"
            ),
            Self::Leased { session, holder, expires_in } => write!(
                f,
                "session `{session}` is in use by {holder} (its lease runs {:.1}s more unless \
                 renewed): stop that process, or take the session over",
                expires_in.as_secs_f64()
            ),
            Self::LeaseLost { session, holder: Some(holder) } => write!(
                f,
                "session `{session}` was taken over by {holder}: this process may no longer \
                 write to it"
            ),
            Self::LeaseLost { session, holder: None } => write!(
                f,
                "session `{session}` is no longer leased to this process: it may no longer \
                 write to it"
            ),
            Self::Corrupt(why) => write!(f, "the store is damaged: {why}"),
            Self::Io(why) => write!(f, "the store failed: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// What a batch of entries changes in its session's summary row.
pub(crate) struct Change {
    pub(crate) agent: Option<String>,
    pub(crate) closed: Option<String>,
    pub(crate) running: i64,
}

impl Change {
    pub(crate) fn of(entries: &[Entry]) -> Self {
        let mut change = Self { agent: None, closed: None, running: 0 };
        for entry in entries {
            match &entry.record {
                Record::AgentEntered { .. } => {
                    let folded = Journal::fold(std::slice::from_ref(entry));
                    change.agent = folded.agent.or(change.agent.take());
                }
                Record::CloseBegan { reason } => {
                    change.closed.get_or_insert_with(|| reason.clone());
                }
                Record::CallStarted { .. } => change.running += 1,
                Record::CallEnded { .. } => change.running -= 1,
                Record::Resumed { in_doubt } => {
                    // Only the failed ones ended; the others run again, still counted.
                    change.running -=
                        in_doubt.iter().filter(|d| d.outcome == "failed").count() as i64;
                }
                _ => {}
            }
        }
        change
    }
}
