//! Both stores lease a session alike (docs/durability.md#leases): one holder at a time, a
//! refusal that names it, expiry, take-over, and a fenced append; a version-1 file migrates.

use colloquy_store::conformance::{
    expires_and_passes_on_from_a_stopped_process, handoff, leases_alike,
};
use colloquy_store::{
    Acquire, LEASE_TTL, LeaseHolder, MemoryStore, SessionStore, SqliteStore, StoreError,
};

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("colloquy-lease-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("sessions.db")
}

#[test]
fn the_memory_store_leases_one_holder_at_a_time() {
    leases_alike(&MemoryStore::new());
    expires_and_passes_on_from_a_stopped_process(&MemoryStore::new());
}

#[test]
fn the_sqlite_store_leases_one_holder_at_a_time_across_openings() {
    let path = temp_file("alike");
    leases_alike(&SqliteStore::open(&path).unwrap());
    expires_and_passes_on_from_a_stopped_process(&SqliteStore::open(&path).unwrap());
    // Two openings of one file (two processes) share the leases.
    let (a, b) = (SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap());
    let me = LeaseHolder::this_process();
    let held = a.acquire("s-4", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert!(matches!(
        b.acquire("s-4", &me, LEASE_TTL, Acquire::IfFree),
        Err(StoreError::Leased { .. })
    ));
    let taken = b.acquire("s-4", &me, LEASE_TTL, Acquire::TakeOver).unwrap();
    assert!(matches!(a.append(&held, &[handoff(1)]), Err(StoreError::LeaseLost { .. })));
    b.append(&taken, &[handoff(1)]).unwrap();
}

/// The tables version 1 of the store created, as it wrote them.
const VERSION_1: &str = "
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL DEFAULT '',
        entries INTEGER NOT NULL DEFAULT 0,
        updated_ms INTEGER NOT NULL,
        closed TEXT,
        running INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE entries (
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;
    PRAGMA user_version = 1;
    PRAGMA application_id = 1131375729;";

#[test]
fn a_version_1_file_migrates_to_the_last_version_and_keeps_its_journals() {
    let path = temp_file("v1");
    {
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(VERSION_1).unwrap();
        // Two sessions, their rows interleaved and out of order, as a table keyed by
        // session may hand them back.
        for (session, seq) in [("old", 2), ("other", 1), ("old", 1), ("other", 2), ("old", 3)] {
            let body = serde_json::to_string(&handoff(seq)).unwrap();
            db.execute("INSERT INTO entries VALUES (?1, ?2, ?3)", (session, seq as i64, body))
                .unwrap();
        }
        db.execute_batch(
            "INSERT INTO sessions (id, agent, entries, updated_ms) VALUES ('old', 'triage', 3, 5);
             INSERT INTO sessions (id, agent, entries, updated_ms) VALUES ('other', 'triage', 2, 4);",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load("old").unwrap(), [handoff(1), handoff(2), handoff(3)]);
    assert_eq!(store.load("other").unwrap(), [handoff(1), handoff(2)]);
    let lease =
        store.acquire("old", &LeaseHolder::this_process(), LEASE_TTL, Acquire::IfFree).unwrap();
    store.append(&lease, &[handoff(4)]).unwrap();
    drop(store);
    let db = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, i64::from(colloquy_store::SCHEMA_VERSION));
    let reopened = SqliteStore::open(&path).unwrap();
    let all: Vec<_> = (1..=4).map(handoff).collect();
    assert_eq!(reopened.load("old").unwrap(), all);
    assert_eq!(reopened.list().unwrap()[0].entries, 4);
    assert!(reopened.delete("old").unwrap());
    assert_eq!(reopened.load("other").unwrap(), [handoff(1), handoff(2)]);
}
