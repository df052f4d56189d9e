//! Durable colloquy sessions: what a session's journal holds, where it is kept, and what
//! a resume reads back.
//!
//! A Session decides each change to its state as a fact (docs/decisions.md#session-facts);
//! with a store, the facts that a resume needs are written as [`Record`]s — this crate's own
//! versioned format ([`SCHEMA_VERSION`]), never the runtime's types — in
//! [`Entry`]s numbered from 1 per session. A [`SessionStore`] keeps them:
//! [`SqliteStore`] (feature `sqlite`, on by default) in one file, [`MemoryStore`] in memory
//! (tests). [`Journal::fold`] reads a session's entries back into what a resume starts from.
//! One process at a time writes a session: the holder of its [`Lease`].
//! docs/durability.md states the guarantee.

pub mod conformance;
mod journal;
mod lease;
mod memory;
mod record;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use journal::{COMMANDS_KEPT, CallInDoubt, Journal, OwedReply, RememberedResult};
pub use lease::{Acquire, LEASE_TTL, Lease, LeaseHolder, StoredLease};
pub use memory::MemoryStore;
pub use record::{CallInDoubtRecord, Entry, Record, SCHEMA_VERSION};
#[cfg(feature = "sqlite")]
pub use sqlite::{BUSY_TIMEOUT, Durability, SqliteStore};
pub use store::{SessionStore, SessionSummary, StoreError, Write};
