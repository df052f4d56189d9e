//! Both stores lease a session alike (docs/durability.md#leases): one holder at a time, a
//! refusal that names it, expiry, take-over, and a fenced append; a version-1 file migrates.

use std::time::Duration;

use colloquy_model::chat::AgentHandoff;
use colloquy_model::{ChatItem, Timestamp};
use colloquy_store::{
    Acquire, Entry, LEASE_TTL, LeaseHolder, MemoryStore, Record, SessionStore, SqliteStore,
    StoreError,
};

fn entered(seq: u64) -> Entry {
    let item = AgentHandoff {
        id: format!("h{seq}"),
        old_agent: None,
        new_agent: "triage".into(),
        created_at: Timestamp { micros: seq, seq },
    };
    Entry::new(seq, seq, Record::AgentEntered { item: ChatItem::AgentHandoff(item).into() })
}

/// A process of this host that no longer runs.
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("`true` runs");
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("colloquy-lease-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("sessions.db")
}

fn leases_alike(store: &dyn SessionStore) {
    let me = LeaseHolder::this_process();
    let first = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!(first.epoch, 1);
    store.append(&first, &[entered(1)]).unwrap();

    // Another holder while it runs: refused, by name, and nothing stored changes.
    let other = LeaseHolder::new(me.host.clone(), me.pid);
    let refused = store.acquire("s-1", &other, LEASE_TTL, Acquire::IfFree).unwrap_err();
    assert!(matches!(&refused, StoreError::Leased { holder, .. } if *holder == me), "{refused}");
    let text = refused.to_string();
    assert!(text.contains(&format!("process {} on `{}`", me.pid, me.host)), "{text}");
    assert!(text.contains("s more"), "{text}");
    store.renew(&first).unwrap();
    store.append(&first, &[entered(2)]).unwrap();

    assert_eq!(store.list().unwrap()[0].held_by.as_ref(), Some(&me), "listed with its holder");

    // Taken over: the first holder can no longer write or renew, and says who has it.
    let elsewhere = LeaseHolder::new("other-host", 42);
    let second = store.acquire("s-1", &elsewhere, LEASE_TTL, Acquire::TakeOver).unwrap();
    assert_eq!(second.epoch, 2);
    let lost = store.append(&first, &[entered(3)]).unwrap_err();
    assert!(matches!(lost, StoreError::LeaseLost { .. }), "{lost}");
    assert!(lost.to_string().contains("taken over by process 42 on `other-host`"), "{lost}");
    assert!(matches!(store.renew(&first), Err(StoreError::LeaseLost { .. })));
    store.release(&first).unwrap(); // a lost lease releases nothing
    assert_eq!(store.load("s-1").unwrap(), [entered(1), entered(2)]);
    store.append(&second, &[entered(3)]).unwrap();

    // A holder on another host is waited for: refused until its lease expires.
    let refused = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap_err();
    assert!(matches!(refused, StoreError::Leased { .. }), "{refused}");

    // Released: the next acquire gets it at once, numbered after every lease before.
    store.release(&second).unwrap();
    assert!(matches!(store.append(&second, &[entered(4)]), Err(StoreError::LeaseLost { .. })));
    let third = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!(third.epoch, 3);
    store.append(&third, &[entered(4)]).unwrap();
    assert_eq!(store.load("s-1").unwrap().len(), 4);
    store.release(&third).unwrap();
    assert_eq!(store.list().unwrap()[0].held_by, None, "released: held by nobody");
}

fn expires_and_passes_on_from_a_stopped_process(store: &dyn SessionStore) {
    // A lease not renewed for its ttl is free.
    let elsewhere = LeaseHolder::new("other-host", 42);
    let brief = store.acquire("s-2", &elsewhere, Duration::ZERO, Acquire::IfFree).unwrap();
    let me = LeaseHolder::this_process();
    let next = store.acquire("s-2", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!((brief.epoch, next.epoch), (1, 2));

    // A process of this host that no longer runs (`kill -9`) leaves it at once.
    let stopped = LeaseHolder::new(me.host.clone(), gone_pid());
    assert!(stopped.is_gone() && !me.is_gone());
    let held = store.acquire("s-3", &stopped, LEASE_TTL, Acquire::IfFree).unwrap();
    let taken = store.acquire("s-3", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!((held.epoch, taken.epoch), (1, 2));
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
    assert!(matches!(a.append(&held, &[entered(1)]), Err(StoreError::LeaseLost { .. })));
    b.append(&taken, &[entered(1)]).unwrap();
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
            let body = serde_json::to_string(&entered(seq)).unwrap();
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
    assert_eq!(store.load("old").unwrap(), [entered(1), entered(2), entered(3)]);
    assert_eq!(store.load("other").unwrap(), [entered(1), entered(2)]);
    let lease =
        store.acquire("old", &LeaseHolder::this_process(), LEASE_TTL, Acquire::IfFree).unwrap();
    store.append(&lease, &[entered(4)]).unwrap();
    drop(store);
    let db = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, i64::from(colloquy_store::SCHEMA_VERSION));
    let reopened = SqliteStore::open(&path).unwrap();
    let all: Vec<_> = (1..=4).map(entered).collect();
    assert_eq!(reopened.load("old").unwrap(), all);
    assert_eq!(reopened.list().unwrap()[0].entries, 4);
    assert!(reopened.delete("old").unwrap());
    assert_eq!(reopened.load("other").unwrap(), [entered(1), entered(2)]);
}
