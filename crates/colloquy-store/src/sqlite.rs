//! The embedded store: one SQLite file (WAL; `synchronous = FULL` by default: an append is on
//! disk when it returns), schema versioned with `PRAGMA user_version`; a group of writes
//! committed together.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use crate::lease::{Acquire, Lease, LeaseHolder, StoredLease};
use crate::memory::now_ms;
use crate::record::{Entry, SCHEMA_VERSION};
use crate::store::{Change, SessionStore, SessionSummary, StoreError, Write};

/// How long a write waits for another process's transaction on the same file before it fails
/// (SQLite's busy timeout).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// What marks a SQLite file as a colloquy store (`PRAGMA application_id`, "Colq"): a database
/// of another application is never taken for one.
const APPLICATION_ID: i64 = 0x436f_6c71;

/// Version 2's journals: a row per entry in the order written, found by an index. Only
/// migrations create it now.
macro_rules! entries_2 {
    () => {
        "CREATE TABLE entries (
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL
        );"
    };
}

/// Version 2's leases: one per session, its holder `NULL` once released (the row stays, so
/// epochs only grow).
macro_rules! leases_2 {
    () => {
        "CREATE TABLE leases (
            session TEXT PRIMARY KEY,
            epoch INTEGER NOT NULL,
            host TEXT,
            pid INTEGER,
            expires_ms INTEGER NOT NULL DEFAULT 0
        );"
    };
}

/// Version 3's journals: a row per append (its entries as one JSON array), in the order
/// written, each naming the row of its session's append before (`prev`), the session's row
/// naming its last (`sessions.last_batch`). A group's commit then touches the last pages of
/// one table and the sessions' rows, and nothing else: an index by session, as version 2
/// had, gets an entry per record in a page per session, scattered over the file — and the
/// WAL carries every page a commit dirties (docs/benchmarks.md#durable-sessions).
macro_rules! batches_3 {
    () => {
        "CREATE TABLE batches (
            session TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            prev INTEGER,
            body TEXT NOT NULL
        );"
    };
}

/// The tables of schema version 4 (as of 3: 4 adds a record type): each session's summary row, the journals, the leases.
const SCHEMA_4: &str = concat!(
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL DEFAULT '',
        entries INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL,
        closed TEXT,
        running INTEGER NOT NULL DEFAULT 0,
        last_batch INTEGER
    );",
    batches_3!(),
    leases_2!(),
    "PRAGMA user_version = 4;
    PRAGMA application_id = 1131375729;"
);

/// From version 1 (the journals in a table keyed by session, no leases) to 2.
const FROM_1: &str = concat!(
    "ALTER TABLE entries RENAME TO entries_1;",
    entries_2!(),
    "INSERT INTO entries (session, seq, body)
        SELECT session, seq, body FROM entries_1 ORDER BY session, seq;
    DROP TABLE entries_1;
    CREATE UNIQUE INDEX entries_by_session ON entries (session, seq);",
    leases_2!(),
    "PRAGMA user_version = 2;"
);

/// From version 2 to 3: each session's journal becomes one batch (its entries, in order).
const FROM_2: &str = concat!(
    "ALTER TABLE sessions ADD COLUMN last_batch INTEGER;",
    batches_3!(),
    "INSERT INTO batches (session, first_seq, prev, body)
        SELECT session, MIN(seq), NULL, '[' || group_concat(body, ',' ORDER BY seq) || ']'
        FROM entries GROUP BY session;
    UPDATE sessions SET last_batch = batches.rowid FROM batches WHERE batches.session = sessions.id;
    DROP TABLE entries;
    PRAGMA user_version = 3;"
);

/// From version 3 to 4: the tables stay; a version-3 journal holds no `command_taken`.
const FROM_3: &str = "PRAGMA user_version = 4;";

/// Journals in one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    db: Mutex<Connection>,
}

/// What an append to a [`SqliteStore`] survives once it returns (docs/durability.md#durability).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// The machine losing power or crashing: each commit is synced to the disk
    /// (`synchronous = FULL`). The default.
    #[default]
    Disk,
    /// The process dying — `kill -9`, a panic, an out-of-memory kill — but not the machine:
    /// each commit is handed to the operating system, which writes it out on its own, and the
    /// file is synced at checkpoints (`synchronous = NORMAL` in WAL mode). A power loss or an
    /// OS crash may lose the last commits, never corrupt the file. Far fewer syncs.
    Process,
}

impl SqliteStore {
    /// Opens (or creates) the store at `path`, each append on the disk when it returns
    /// ([`Durability::Disk`]). A file that is not a store, or a store of a newer schema, is
    /// refused and left as it is.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::Disk)
    }

    /// As [`open`](Self::open), each append surviving what `durability` says once it returns.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref();
        // Setting a new file up (WAL, the tables) takes locks SQLite's busy timeout does not
        // always wait for: another process doing the same at once is waited for, as long.
        let began = std::time::Instant::now();
        loop {
            match Self::open_once(path, durability) {
                Err(StoreError::Io(why))
                    if why.contains("locked") && began.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                opened => return opened,
            }
        }
    }

    fn open_once(path: &Path, durability: Durability) -> Result<Self, StoreError> {
        let mut db = Connection::open(path).map_err(|e| io(path, &e))?;
        db.busy_timeout(BUSY_TIMEOUT).map_err(|e| io(path, &e))?;
        // One snapshot: another process may be setting the file up meanwhile.
        let (application, version, tables) = {
            let snapshot = db.transaction().map_err(|e| io(path, &e))?;
            let read = |sql: &str| -> Result<i64, StoreError> {
                snapshot.query_row(sql, [], |row| row.get(0)).map_err(|e| io(path, &e))
            };
            let read = (
                read("PRAGMA application_id")?,
                read("PRAGMA user_version")?,
                read("SELECT count(*) FROM sqlite_master")?,
            );
            snapshot.commit().map_err(|e| io(path, &e))?;
            read
        };
        let version = match (application, version) {
            (APPLICATION_ID, v) if v > i64::from(SCHEMA_VERSION) => {
                let found = u32::try_from(v).unwrap_or(u32::MAX);
                return Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION });
            }
            (APPLICATION_ID, v) => v,
            // A new file (or an empty database): it becomes a store.
            (0, 0) if tables == 0 => 0,
            _ => {
                let why = format!("`{}` is a database of another application", path.display());
                return Err(StoreError::Corrupt(format!("{why}: not a colloquy store")));
            }
        };
        // Only a file known to be a store is changed.
        db.pragma_update(None, "journal_mode", "WAL").map_err(|e| io(path, &e))?;
        let synchronous = match durability {
            Durability::Disk => "FULL",
            Durability::Process => "NORMAL",
        };
        db.pragma_update(None, "synchronous", synchronous).map_err(|e| io(path, &e))?;
        // 16 MiB of pages (SQLite's default is 2): the journals of many live sessions are
        // written at once, and an evicted page is read back with a syscall.
        db.pragma_update(None, "cache_size", -16_384).map_err(|e| io(path, &e))?;
        if version < i64::from(SCHEMA_VERSION) {
            // Under the write lock, the version read again: of two processes opening one new
            // (or old) file at once, one creates (or migrates) it and the other finds it done.
            // One transaction: a migration that fails leaves the file as it was.
            let tx = db
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| io(path, &e))?;
            let now: i64 = tx
                .query_row("PRAGMA user_version", [], |row| row.get(0))
                .map_err(|e| io(path, &e))?;
            match now {
                0 => tx.execute_batch(SCHEMA_4),
                1 => tx
                    .execute_batch(FROM_1)
                    .and_then(|()| tx.execute_batch(FROM_2))
                    .and_then(|()| tx.execute_batch(FROM_3)),
                2 => tx.execute_batch(FROM_2).and_then(|()| tx.execute_batch(FROM_3)),
                3 => tx.execute_batch(FROM_3),
                _ => Ok(()),
            }
            .and_then(|()| tx.commit())
            .map_err(|e| io(path, &e))?;
        }
        Ok(Self { db: Mutex::new(db) })
    }
}

/// The outcomes of a group that was not written because of `e`: the writes refused before
/// stay refused, every other (of `count`) fails with `e`.
fn unwritten(
    mut outcomes: Vec<Result<(), StoreError>>,
    count: usize,
    e: &StoreError,
) -> Vec<Result<(), StoreError>> {
    let why = e.to_string();
    for outcome in outcomes.iter_mut().filter(|o| o.is_ok()) {
        *outcome = Err(StoreError::Io(why.clone()));
    }
    outcomes.resize_with(count, || Err(StoreError::Io(why.clone())));
    outcomes
}

/// Refuses a write of `entries` (none for a renewal) under `lease` before anything is written:
/// a lease that is not the session's, an entry whose number is taken. Returns the row of the
/// session's last batch, which the append chains to.
fn check(db: &Connection, lease: &Lease, entries: &[Entry]) -> Result<Option<i64>, StoreError> {
    let session = lease.session.as_str();
    // The lease and the journal's end in one statement: a group checks one per session.
    let (stored, last, last_batch) = db
        .prepare_cached(
            "SELECT l.epoch, l.host, l.pid, l.expires_ms, s.entries, s.last_batch
             FROM (SELECT ?1 AS id) AS k
             LEFT JOIN leases AS l ON l.session = k.id
             LEFT JOIN sessions AS s ON s.id = k.id",
        )
        .and_then(|mut select| {
            select.query_row([session], |row| {
                let stored = lease_of(row)?;
                let last: Option<i64> = row.get(4)?;
                Ok((stored, last.unwrap_or(0), row.get::<_, Option<i64>>(5)?))
            })
        })
        .map_err(|e| failed(&e))?;
    StoredLease::check(stored.as_ref(), lease)?;
    let Some(first) = entries.first() else { return Ok(None) };
    let taken = |seq: u64| StoreError::Conflict { session: session.to_string(), seq };
    if first.seq as i64 <= last {
        return Err(taken(first.seq));
    }
    match entries.windows(2).find(|pair| pair[1].seq <= pair[0].seq) {
        Some(pair) => Err(taken(pair[1].seq)),
        None => Ok(last_batch),
    }
}

/// Appends `entries` (checked) as one batch after the session's batch `prev`, its JSON written
/// into `buffer` (one for a whole group: no reallocation per batch).
fn append(
    db: &Connection,
    lease: &Lease,
    (entries, prev): (&[Entry], Option<i64>),
    buffer: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return Ok(()) };
    let session = lease.session.as_str();
    buffer.clear();
    serde_json::to_writer(&mut *buffer, entries).map_err(|e| StoreError::Io(e.to_string()))?;
    let body = std::str::from_utf8(buffer).map_err(|e| StoreError::Io(e.to_string()))?;
    db.prepare_cached(
        "INSERT INTO batches (session, first_seq, prev, body) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut insert| insert.execute(params![session, first.seq as i64, prev, body]))
    .map_err(|e| failed(&e))?;
    let batch = db.last_insert_rowid();
    let change = Change::of(entries);
    db.prepare_cached(
        "INSERT INTO sessions (id, agent, entries, updated_ms, closed, running, last_batch)
             VALUES (?1, COALESCE(?2, ''), ?3, ?4, ?5, MAX(?6, 0), ?7)
             ON CONFLICT (id) DO UPDATE SET
                 agent = COALESCE(?2, agent),
                 entries = ?3,
                 updated_ms = ?4,
                 closed = COALESCE(closed, ?5),
                 running = MAX(running + ?6, 0),
                 last_batch = ?7",
    )
    .and_then(|mut upsert| {
        upsert.execute(params![
            session,
            change.agent,
            last.seq as i64,
            now_ms() as i64,
            change.closed,
            change.running,
            batch
        ])
    })
    .map_err(|e| failed(&e))?;
    Ok(())
}

/// Gives `lease` up, if it is still the session's.
fn release(db: &Connection, lease: &Lease) -> Result<(), StoreError> {
    db.prepare_cached(
        "UPDATE leases SET host = NULL, pid = NULL, expires_ms = 0
         WHERE session = ?1 AND epoch = ?2",
    )
    .and_then(|mut update| update.execute(params![lease.session, lease.epoch as i64]))
    .map_err(|e| failed(&e))?;
    // A lease of a session never written (a resume refused) leaves nothing behind.
    db.prepare_cached(
        "DELETE FROM leases WHERE session = ?1 AND host IS NULL
         AND NOT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
    )
    .and_then(|mut delete| delete.execute(params![lease.session]))
    .map_err(|e| failed(&e))?;
    Ok(())
}

/// Extends `lease` (checked) by its ttl from now.
fn renew(db: &Connection, lease: &Lease) -> Result<(), StoreError> {
    let expires = now_ms().saturating_add(lease.ttl.as_millis() as u64);
    db.prepare_cached("UPDATE leases SET expires_ms = ?2 WHERE session = ?1")
        .and_then(|mut update| update.execute(params![lease.session, expires as i64]))
        .map_err(|e| failed(&e))?;
    Ok(())
}

impl SessionStore for SqliteStore {
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError> {
        let written = self.write_many(&[Write::Append { lease, entries }]);
        written.into_iter().next().unwrap_or(Ok(()))
    }

    /// One immediate transaction for the whole group (the lease reads and the writes are one
    /// that no other process can come between), so one sync. Each write is checked (its lease,
    /// its numbers) before it writes anything, so one refused leaves the others; a failure
    /// while writing fails the whole group, written nowhere (docs/durability.md#group-commit).
    fn write_many(&self, writes: &[Write<'_>]) -> Vec<Result<(), StoreError>> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let all_fail = |e: StoreError| {
            let why = e.to_string();
            writes.iter().map(|_| Err(StoreError::Io(why.clone()))).collect()
        };
        let tx = match db.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => return all_fail(failed(&e)),
        };
        let mut outcomes = Vec::with_capacity(writes.len());
        let mut buffer = Vec::with_capacity(16 * 1024);
        for write in writes {
            let (lease, entries) = match write {
                Write::Append { lease, entries } => (*lease, *entries),
                Write::Renew(lease) | Write::Release(lease) => (*lease, &[][..]),
            };
            // A release needs no check: one of a lease no longer held does nothing.
            let checked = match write {
                Write::Release(_) => Ok(None),
                _ => check(&tx, lease, entries),
            };
            let prev = match checked {
                Ok(prev) => prev,
                Err(refused) => {
                    outcomes.push(Err(refused));
                    continue;
                }
            };
            let written = match write {
                Write::Append { .. } => append(&tx, lease, (entries, prev), &mut buffer),
                Write::Release(_) => release(&tx, lease),
                _ => renew(&tx, lease),
            };
            if let Err(e) = written {
                drop(tx); // rolled back: nothing of the group is written
                return unwritten(outcomes, writes.len(), &e);
            }
            outcomes.push(Ok(()));
        }
        match tx.commit() {
            Ok(()) => outcomes,
            Err(e) => unwritten(outcomes, writes.len(), &failed(&e)),
        }
    }

    fn acquire(
        &self,
        session: &str,
        holder: &LeaseHolder,
        ttl: Duration,
        mode: Acquire,
    ) -> Result<Lease, StoreError> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let tx =
            db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| failed(&e))?;
        let now = now_ms();
        let epoch = StoredLease::grant(stored_lease(&tx, session)?.as_ref(), session, mode, now)?;
        let expires = now.saturating_add(ttl.as_millis() as u64);
        tx.execute(
            "INSERT INTO leases (session, epoch, host, pid, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session) DO UPDATE SET
                 epoch = ?2, host = ?3, pid = ?4, expires_ms = ?5",
            params![session, epoch as i64, holder.host, i64::from(holder.pid), expires as i64],
        )
        .map_err(|e| failed(&e))?;
        tx.commit().map_err(|e| failed(&e))?;
        Ok(Lease::new(session, holder.clone(), epoch, ttl))
    }

    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let written = self.write_many(&[Write::Renew(lease)]);
        written.into_iter().next().unwrap_or(Ok(()))
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let written = self.write_many(&[Write::Release(lease)]);
        written.into_iter().next().unwrap_or(Ok(()))
    }

    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let known: Option<i64> = db
            .query_row("SELECT entries FROM sessions WHERE id = ?1", [session], |row| row.get(0))
            .optional()
            .map_err(|e| failed(&e))?;
        let Some(count) = known else {
            return Err(StoreError::UnknownSession(session.to_string()));
        };
        // The chain from the last batch back, read first to last.
        let mut select = db
            .prepare_cached(&format!(
                "{CHAIN} SELECT batches.session, first_seq, body FROM chain
                 JOIN batches ON batches.rowid = chain.batch ORDER BY chain.n DESC"
            ))
            .map_err(|e| failed(&e))?;
        let rows = select
            .query_map([session], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?, row.get::<_, String>(2)?))
            })
            .map_err(|e| failed(&e))?;
        let mut entries: Vec<Entry> = Vec::new();
        let corrupt = |why: String| StoreError::Corrupt(format!("session `{session}`: {why}"));
        for row in rows {
            let (owner, first_seq, body) = row.map_err(|e| failed(&e))?;
            let batch: Vec<Entry> = serde_json::from_str(&body).map_err(|e| {
                corrupt(format!("the batch from record {first_seq} does not read: {e}"))
            })?;
            let next = entries.last().map_or(1, |e| e.seq + 1);
            if owner != session || batch.first().map(|e| e.seq) != Some(next) {
                return Err(corrupt(format!("its journal breaks off after record {}", next - 1)));
            }
            entries.extend(batch);
        }
        if entries.len() as i64 != count {
            return Err(corrupt(format!("{} of its {count} records read", entries.len())));
        }
        Ok(entries)
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let mut select = db
            .prepare_cached(
                "SELECT id, agent, entries, updated_ms, closed, running, host, pid FROM sessions
                 LEFT JOIN leases ON leases.session = sessions.id AND leases.expires_ms > ?1
                 ORDER BY updated_ms DESC, id",
            )
            .map_err(|e| failed(&e))?;
        let rows = select
            .query_map([now_ms() as i64], |row| {
                let (host, pid): (Option<String>, Option<i64>) = (row.get(6)?, row.get(7)?);
                Ok(SessionSummary {
                    id: row.get(0)?,
                    agent: row.get(1)?,
                    entries: row.get::<_, i64>(2)?.max(0) as u64,
                    updated_ms: row.get::<_, i64>(3)?.max(0) as u64,
                    closed: row.get(4)?,
                    calls_in_doubt: row.get::<_, i64>(5)?.max(0) as usize,
                    held_by: host.zip(pid).map(|(h, p)| LeaseHolder::new(h, p.max(0) as u32)),
                })
            })
            .map_err(|e| failed(&e))?;
        rows.collect::<Result<_, _>>().map_err(|e| failed(&e))
    }

    fn delete(&self, session: &str) -> Result<bool, StoreError> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = db.transaction().map_err(|e| failed(&e))?;
        tx.execute(
            &format!("{CHAIN} DELETE FROM batches WHERE rowid IN (SELECT batch FROM chain)"),
            [session],
        )
        .map_err(|e| failed(&e))?;
        tx.execute("DELETE FROM leases WHERE session = ?1", [session]).map_err(|e| failed(&e))?;
        let deleted =
            tx.execute("DELETE FROM sessions WHERE id = ?1", [session]).map_err(|e| failed(&e))?;
        tx.commit().map_err(|e| failed(&e))?;
        Ok(deleted > 0)
    }
}

/// Session `?1`'s batches, from its last (`n` 0) back to its first, by row.
const CHAIN: &str = "WITH RECURSIVE chain (batch, n) AS (
        SELECT last_batch, 0 FROM sessions WHERE id = ?1 AND last_batch IS NOT NULL
        UNION ALL
        SELECT batches.prev, chain.n + 1 FROM chain JOIN batches ON batches.rowid = chain.batch
        WHERE batches.prev IS NOT NULL
            AND chain.n < (SELECT entries FROM sessions WHERE id = ?1) -- a damaged chain ends
    )";

/// Session `session`'s lease as stored, if it ever had one.
fn stored_lease(db: &Connection, session: &str) -> Result<Option<StoredLease>, StoreError> {
    db.prepare_cached("SELECT epoch, host, pid, expires_ms FROM leases WHERE session = ?1")
        .and_then(|mut select| select.query_row([session], lease_of).optional())
        .map(Option::flatten)
        .map_err(|e| failed(&e))
}

/// The lease in a row's first four columns (`epoch`, `host`, `pid`, `expires_ms`), if any.
fn lease_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Option<StoredLease>> {
    let Some(epoch) = row.get::<_, Option<i64>>(0)? else { return Ok(None) };
    let (host, pid): (Option<String>, Option<i64>) = (row.get(1)?, row.get(2)?);
    let holder = host.zip(pid).map(|(h, p)| LeaseHolder::new(h, p.max(0) as u32));
    Ok(Some(StoredLease::new(epoch.max(0) as u64, holder, row.get::<_, i64>(3)?.max(0) as u64)))
}

/// A failure opening the file at `path`: "not a database" is a damaged file, the rest I/O.
fn io(path: &Path, e: &rusqlite::Error) -> StoreError {
    let at = path.display();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!("`{at}` is not a colloquy store ({e})"))
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Io(format!("`{at}` is locked by another process ({e})"))
        }
        _ => StoreError::Io(format!("`{at}`: {e}")),
    }
}

fn failed(e: &rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(e.to_string())
        }
        _ => StoreError::Io(e.to_string()),
    }
}
