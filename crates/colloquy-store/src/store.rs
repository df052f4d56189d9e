//! Where journals are kept: the [`SessionStore`] trait a host implements for its own database,
//! what it lists, and how it fails.

use std::fmt;

use crate::journal::Journal;
use crate::record::Entry;

/// Keeps the journals of sessions, by session id.
///
/// The session writes from a thread of its own (never from its actor's task), so the methods
/// block: a store over PostgreSQL or Redis calls its client's blocking API, or blocks on its
/// async one. `append` returns once its entries are durable — what the store calls durable is
/// the session's guarantee (docs/durability.md).
pub trait SessionStore: Send + Sync + 'static {
    /// Appends `entries`, numbered on from the session's last, to session `session`'s journal
    /// (the first append creates it). An entry whose number is taken is refused
    /// ([`StoreError::Conflict`]): two writers never interleave one journal.
    fn append(&self, session: &str, entries: &[Entry]) -> Result<(), StoreError>;

    /// Every entry of session `session`, in order ([`StoreError::UnknownSession`] if none).
    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError>;

    /// The stored sessions, most recently active first.
    fn list(&self) -> Result<Vec<SessionSummary>, StoreError>;

    /// Deletes session `session`'s journal; false if there was none.
    fn delete(&self, session: &str) -> Result<bool, StoreError>;
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
    /// The calls whose body may have been running at its last record: in doubt, should it
    /// resume (calls that waited for approval or a place are not).
    pub calls_in_doubt: usize,
}

impl SessionSummary {
    /// The summary of session `id`, from its entries.
    pub fn of(id: &str, entries: &[Entry], updated_ms: u64) -> Self {
        let journal = Journal::fold(entries);
        Self {
            id: id.to_string(),
            agent: journal.agent.clone().unwrap_or_default(),
            entries: entries.last().map_or(0, |e| e.seq),
            updated_ms,
            closed: journal.closed.clone(),
            calls_in_doubt: journal.running.iter().filter(|r| r.started).count(),
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
            Self::Corrupt(why) => write!(f, "the store is damaged: {why}"),
            Self::Io(why) => write!(f, "the store failed: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}
