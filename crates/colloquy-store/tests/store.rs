//! Both stores keep, list and refuse alike; the SQLite file refuses what is not its own.

use colloquy_store::conformance::{
    call, journal, keeps_lists_and_refuses, lease, writes_a_group_and_refuses_alone,
};
use colloquy_store::{
    CallInDoubtRecord, Entry, Journal, MemoryStore, Record, SessionStore, SqliteStore, StoreError,
};

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("colloquy-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("sessions.db")
}

#[test]
fn two_openings_of_one_new_file_at_once_both_get_the_store() {
    for round in 0..5 {
        let path = temp_file(&format!("race-{round}"));
        let open = || {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(path).map(|_| ()))
        };
        let (a, b) = (open(), open());
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a.is_ok() && b.is_ok(), "round {round}: {a:?} {b:?}");
    }
}

#[test]
fn a_call_run_again_stays_in_doubt_until_it_ends_and_a_failed_one_does_not() {
    let mut entries = journal(); // c1 runs
    let c3 = Record::CallStarted { call: call("c3"), cancellable: false };
    entries.push(Entry::new(7, 7, c3));
    let outcomes = vec![
        CallInDoubtRecord::new("c1", "refill", "rerun"),
        CallInDoubtRecord::new("c3", "refill", "failed"),
    ];
    entries.push(Entry::new(8, 8, Record::Resumed { in_doubt: outcomes }));
    // The process dies again before c1's run starts: c1 is still in doubt, c3 ended.
    let running = |entries: &[Entry]| -> Vec<String> {
        Journal::fold(entries).running.iter().map(|r| r.call.call_id.clone()).collect()
    };
    assert_eq!(running(&entries), ["c1"]);
    let path = temp_file("again");
    let store = SqliteStore::open(&path).unwrap();
    store.append(&lease(&store, "s"), &entries).unwrap();
    assert_eq!(store.list().unwrap()[0].calls_in_doubt, 1, "the listing counts alike");
    entries.push(Entry::new(9, 9, Record::CallEnded { call_id: "c1".into() }));
    assert!(running(&entries).is_empty());
}

#[test]
fn both_stores_write_a_group_and_refuse_a_write_alone() {
    writes_a_group_and_refuses_alone(&MemoryStore::new());
    writes_a_group_and_refuses_alone(&SqliteStore::open(temp_file("group")).unwrap());
}

#[test]
fn the_memory_store_keeps_lists_and_refuses() {
    keeps_lists_and_refuses(&MemoryStore::new());
}

#[test]
fn the_sqlite_store_keeps_lists_and_refuses_and_its_file_outlives_it() {
    let path = temp_file("keeps");
    keeps_lists_and_refuses(&SqliteStore::open(&path).unwrap());
    let store = SqliteStore::open(&path).unwrap();
    store.append(&lease(&store, "s-2"), &journal()).unwrap();
    drop(store);
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.load("s-2").unwrap(), journal());
}

#[test]
fn a_journal_folds_into_what_a_resume_starts_from() {
    let journal = Journal::fold(&journal());
    assert_eq!(journal.agent.as_deref(), Some("billing"));
    assert_eq!(journal.history.len(), 3, "two markers and a message");
    assert_eq!(journal.contexts["triage"].len(), 1);
    assert!(journal.contexts["billing"].is_empty());
    let running: Vec<&str> = journal.running.iter().map(|r| r.call.call_id.as_str()).collect();
    assert_eq!(running, ["c1"]);
    assert_eq!(journal.last_seq, 6);
}

#[test]
fn a_file_that_is_not_a_store_is_refused_and_left_as_it_was() {
    let path = temp_file("corrupt");
    let junk =
        b"this is not a database, and a longer line than SQLite's header: 0123456789".repeat(20);
    std::fs::write(&path, &junk).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("is not a colloquy store"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), junk, "nothing was overwritten");
}

#[test]
fn a_store_of_a_newer_schema_is_refused() {
    let path = temp_file("newer");
    drop(SqliteStore::open(&path).unwrap());
    {
        let db = rusqlite_free_bump(&path);
        assert!(db, "the test could bump the schema");
    }
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { found: 5, supported: 4 }), "{err}");
    assert!(err.to_string().contains("upgrade colloquy"), "{err}");
}

/// Sets the file's `user_version` to 5 by rewriting its header (bytes 60..64, big-endian), as
/// a newer colloquy would have.
fn rusqlite_free_bump(path: &std::path::Path) -> bool {
    let mut bytes = std::fs::read(path).unwrap();
    if bytes.len() < 100 {
        return false;
    }
    bytes[60..64].copy_from_slice(&5u32.to_be_bytes());
    std::fs::write(path, bytes).unwrap();
    true
}

#[test]
fn another_applications_database_is_refused_and_left_as_it_was() {
    for user_version in [0, 1] {
        let path = temp_file(&format!("other-{user_version}"));
        {
            let db = rusqlite::Connection::open(&path).unwrap();
            db.execute_batch("CREATE TABLE entries (x INTEGER); INSERT INTO entries VALUES (7);")
                .unwrap();
            db.pragma_update(None, "user_version", user_version).unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(err.to_string().contains("another application"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was changed");
        assert!(!path.with_extension("db-wal").exists(), "not switched to WAL");
    }
}
