//! Both stores keep, list and refuse alike; the SQLite file refuses what is not its own.

use colloquy_model::chat::AgentHandoff;
use colloquy_model::{ChatItem, FunctionCall, Message, Role, Timestamp};
use colloquy_store::{
    Acquire, CallInDoubtRecord, Entry, Journal, LEASE_TTL, Lease, LeaseHolder, MemoryStore, Record,
    SessionStore, SqliteStore, StoreError, Write,
};

/// The lease of session `session`, for this process.
fn lease(store: &dyn SessionStore, session: &str) -> Lease {
    store.acquire(session, &LeaseHolder::this_process(), LEASE_TTL, Acquire::IfFree).unwrap()
}

fn at(seq: u64) -> Timestamp {
    Timestamp { micros: seq, seq }
}

fn entered(agent: &str, seq: u64) -> Record {
    let item = AgentHandoff {
        id: format!("h{seq}"),
        old_agent: None,
        new_agent: agent.into(),
        created_at: at(seq),
    };
    Record::AgentEntered { item: ChatItem::AgentHandoff(item).into() }
}

fn said(text: &str, seq: u64) -> Record {
    let message = Message {
        id: format!("m{seq}"),
        role: Role::User,
        text: text.into(),
        interrupted: false,
        created_at: at(seq),
    };
    Record::ItemsCommitted {
        agent: "triage".into(),
        items: vec![ChatItem::Message(message).into()],
    }
}

fn call(call_id: &str) -> FunctionCall {
    FunctionCall {
        id: format!("{call_id}/item"),
        call_id: call_id.into(),
        name: "refill".into(),
        arguments: "{}".into(),
        extra: Default::default(),
        created_at: at(9),
    }
}

fn journal() -> Vec<Entry> {
    let records = [
        entered("triage", 1),
        said("hello", 2),
        Record::CallStarted { call: call("c1"), cancellable: false },
        Record::CallStarted { call: call("c2"), cancellable: true },
        Record::CallEnded { call_id: "c2".into() },
        entered("billing", 6),
    ];
    records.into_iter().enumerate().map(|(i, r)| Entry::new(i as u64 + 1, i as u64, r)).collect()
}

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("colloquy-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("sessions.db")
}

fn keeps_lists_and_refuses(store: &dyn SessionStore) {
    let entries = journal();
    let s1 = lease(store, "s-1");
    store.append(&s1, &entries[..3]).unwrap();
    store.append(&s1, &entries[3..]).unwrap();
    assert_eq!(store.load("s-1").unwrap(), entries);

    let conflict = store.append(&s1, &entries[5..]).unwrap_err();
    assert!(matches!(conflict, StoreError::Conflict { seq: 6, .. }), "{conflict}");
    assert!(conflict.to_string().contains("another process"), "{conflict}");
    assert!(matches!(store.load("nope"), Err(StoreError::UnknownSession(_))));

    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    let summary = &listed[0];
    assert_eq!((summary.id.as_str(), summary.agent.as_str()), ("s-1", "billing"));
    assert_eq!((summary.entries, summary.calls_in_doubt, summary.closed.clone()), (6, 1, None));

    let resumed = vec![CallInDoubtRecord::new("c1", "refill", "failed")];
    let closing = [
        Entry::new(7, 7, Record::Resumed { in_doubt: resumed }),
        Entry::new(8, 8, Record::CloseBegan { reason: "user_ended".into() }),
    ];
    store.append(&s1, &closing).unwrap();
    let summary = &store.list().unwrap()[0];
    assert_eq!((summary.calls_in_doubt, summary.closed.as_deref()), (0, Some("user_ended")));

    assert!(store.delete("s-1").unwrap());
    assert!(!store.delete("s-1").unwrap());
    assert!(store.list().unwrap().is_empty());
}

/// A group of writes: the refused one (a number taken, a lease taken over) writes nothing,
/// the others are all written.
fn writes_a_group_and_refuses_alone(store: &dyn SessionStore) {
    let entries = journal();
    let (a, b) = (lease(store, "a"), lease(store, "b"));
    store.append(&a, &entries[..3]).unwrap();
    let stale = lease(store, "c");
    let holder = LeaseHolder::this_process();
    let c = store.acquire("c", &holder, LEASE_TTL, Acquire::TakeOver).unwrap();
    let outcomes = store.write_many(&[
        Write::Append { lease: &a, entries: &entries[2..] }, // 3 is taken
        Write::Append { lease: &b, entries: &entries },
        Write::Append { lease: &stale, entries: &entries },
        Write::Renew(&c),
        Write::Append { lease: &c, entries: &entries[..2] },
        Write::Release(&b),     // after its append: closing
        Write::Release(&stale), // not held: nothing to do
    ]);
    let refused: Vec<bool> = outcomes.iter().map(Result::is_err).collect();
    assert_eq!(refused, [true, false, true, false, false, false, false], "{outcomes:?}");
    assert!(matches!(outcomes[0], Err(StoreError::Conflict { seq: 3, .. })), "{outcomes:?}");
    assert!(matches!(outcomes[2], Err(StoreError::LeaseLost { .. })), "{outcomes:?}");
    assert_eq!(store.load("a").unwrap(), entries[..3], "nothing of the refused write");
    assert_eq!(store.load("b").unwrap(), entries);
    assert_eq!(store.load("c").unwrap(), entries[..2]);
    // `b` released, `c` still held by its taker.
    let other = LeaseHolder::new("elsewhere", 1);
    assert!(store.acquire("b", &other, LEASE_TTL, Acquire::IfFree).is_ok());
    let held = store.acquire("c", &other, LEASE_TTL, Acquire::IfFree);
    assert!(matches!(held, Err(StoreError::Leased { .. })), "{held:?}");
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
    assert!(matches!(err, StoreError::NewerSchema { found: 4, supported: 3 }), "{err}");
    assert!(err.to_string().contains("upgrade colloquy"), "{err}");
}

/// Sets the file's `user_version` to 4 by rewriting its header (bytes 60..64, big-endian), as
/// a newer colloquy would have.
fn rusqlite_free_bump(path: &std::path::Path) -> bool {
    let mut bytes = std::fs::read(path).unwrap();
    if bytes.len() < 100 {
        return false;
    }
    bytes[60..64].copy_from_slice(&4u32.to_be_bytes());
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
