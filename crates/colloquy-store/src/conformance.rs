//! The rules every [`SessionStore`] keeps, as checks a store must pass: SQLite's, the memory
//! store, the cluster's, and a host's own (docs/durability.md#stores). Each takes an empty
//! store and panics, naming the rule, where the store breaks one.
//!
//! ```
//! colloquy_store::conformance::check_all(|| Box::new(colloquy_store::MemoryStore::new()));
//! ```

use std::time::Duration;

use colloquy_model::chat::AgentHandoff;
use colloquy_model::{ChatItem, FunctionCall, Message, Role, Timestamp};

use crate::{
    Acquire, CallInDoubtRecord, Entry, LEASE_TTL, Lease, LeaseHolder, Record, SessionStore,
    StoreError, Write,
};

/// Every check below, each on a fresh store from `fresh`.
pub fn check_all(fresh: impl Fn() -> Box<dyn SessionStore>) {
    keeps_lists_and_refuses(&*fresh());
    writes_a_group_and_refuses_alone(&*fresh());
    leases_alike(&*fresh());
    expires_and_passes_on_from_a_stopped_process(&*fresh());
}

/// The lease of session `session`, for this process.
pub fn lease(store: &dyn SessionStore, session: &str) -> Lease {
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

/// A call `call_id` of `refill`.
pub fn call(call_id: &str) -> FunctionCall {
    FunctionCall {
        id: format!("{call_id}/item"),
        call_id: call_id.into(),
        name: "refill".into(),
        arguments: "{}".into(),
        extra: Default::default(),
        created_at: at(9),
    }
}

/// A journal of six entries: two agents, a message, two calls of which one ended.
pub fn journal() -> Vec<Entry> {
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

/// Keeps a journal in order, refuses a number taken, lists it (its agent, records, calls in
/// doubt, close) and deletes it.
pub fn keeps_lists_and_refuses(store: &dyn SessionStore) {
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
pub fn writes_a_group_and_refuses_alone(store: &dyn SessionStore) {
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

/// The entry numbered `seq`: agent `triage` entering.
pub fn handoff(seq: u64) -> Entry {
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

/// One holder at a time, a refusal that names it, renewal, take-over that fences the old
/// holder (its appends and renewals refused), release, and epochs that only grow.
pub fn leases_alike(store: &dyn SessionStore) {
    let me = LeaseHolder::this_process();
    let first = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!(first.epoch, 1);
    store.append(&first, &[handoff(1)]).unwrap();

    // Another holder while it runs: refused, by name, and nothing stored changes.
    let other = LeaseHolder::new(me.host.clone(), me.pid);
    let refused = store.acquire("s-1", &other, LEASE_TTL, Acquire::IfFree).unwrap_err();
    assert!(matches!(&refused, StoreError::Leased { holder, .. } if *holder == me), "{refused}");
    let text = refused.to_string();
    assert!(text.contains(&format!("process {} on `{}`", me.pid, me.host)), "{text}");
    assert!(text.contains("s more"), "{text}");
    store.renew(&first).unwrap();
    store.append(&first, &[handoff(2)]).unwrap();

    assert_eq!(store.list().unwrap()[0].held_by.as_ref(), Some(&me), "listed with its holder");

    // Taken over: the first holder can no longer write or renew, and says who has it.
    let elsewhere = LeaseHolder::new("other-host", 42);
    let second = store.acquire("s-1", &elsewhere, LEASE_TTL, Acquire::TakeOver).unwrap();
    assert_eq!(second.epoch, 2);
    let lost = store.append(&first, &[handoff(3)]).unwrap_err();
    assert!(matches!(lost, StoreError::LeaseLost { .. }), "{lost}");
    assert!(lost.to_string().contains("taken over by process 42 on `other-host`"), "{lost}");
    assert!(matches!(store.renew(&first), Err(StoreError::LeaseLost { .. })));
    store.release(&first).unwrap(); // a lost lease releases nothing
    assert_eq!(store.load("s-1").unwrap(), [handoff(1), handoff(2)]);
    store.append(&second, &[handoff(3)]).unwrap();

    // A holder on another host is waited for: refused until its lease expires.
    let refused = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap_err();
    assert!(matches!(refused, StoreError::Leased { .. }), "{refused}");

    // Released: the next acquire gets it at once, numbered after every lease before.
    store.release(&second).unwrap();
    assert!(matches!(store.append(&second, &[handoff(4)]), Err(StoreError::LeaseLost { .. })));
    let third = store.acquire("s-1", &me, LEASE_TTL, Acquire::IfFree).unwrap();
    assert_eq!(third.epoch, 3);
    store.append(&third, &[handoff(4)]).unwrap();
    assert_eq!(store.load("s-1").unwrap().len(), 4);
    store.release(&third).unwrap();
    assert_eq!(store.list().unwrap()[0].held_by, None, "released: held by nobody");
}

/// A lease expires when not renewed for its ttl, and a holder of this host that no longer runs
/// leaves it at once.
pub fn expires_and_passes_on_from_a_stopped_process(store: &dyn SessionStore) {
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
