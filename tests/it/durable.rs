//! Durable sessions (docs/durability.md): a session's journal in a store, a resume after its
//! process ended, the calls that were running then, and a store that fails.

use std::sync::Arc;

use crate::common::*;
use colloquy::prelude::*;
use colloquy::store::{
    Acquire, Entry, LEASE_TTL, Lease, LeaseHolder, MemoryStore, Record, SessionStore, SqliteStore,
    StoreError,
};

fn refilling_agent() -> Agent {
    agent().tool(sleeper("refill", 60_000, "refilled"))
}

fn agents(name: &str) -> Option<Agent> {
    (name == "A").then(refilling_agent)
}

/// Waits until `store` holds a record of session `id` that `wanted` accepts (the writer runs
/// off the session's task).
pub(crate) async fn stored(
    store: &dyn SessionStore,
    id: &str,
    wanted: impl Fn(&Record) -> bool,
) -> Vec<Entry> {
    for _ in 0..1_000 {
        if let Ok(entries) = store.load(id)
            && entries.iter().any(|e| wanted(&e.record))
        {
            return entries;
        }
        tokio::time::sleep(ms(1)).await;
    }
    panic!("the store never got the record")
}

/// What a crash leaves: a store holding what was durable at that moment, apart from the one
/// the old process goes on writing to.
pub(crate) fn crashed(store: &dyn SessionStore, id: &str) -> Arc<MemoryStore> {
    journal_of(id, &store.load(id).unwrap())
}

/// A store holding `entries` as session `id`'s journal, its lease free.
pub(crate) fn journal_of(id: &str, entries: &[Entry]) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let lease = store.acquire(id, &LeaseHolder::this_process(), LEASE_TTL, Acquire::IfFree);
    let lease = lease.unwrap();
    store.append(&lease, entries).unwrap();
    store.release(&lease).unwrap();
    store
}

/// The texts of the session's messages, in order.
async fn message_texts(session: &SessionHandle) -> Vec<String> {
    let history = session.history().await.unwrap();
    history.iter().filter_map(|i| i.as_message().map(|m| m.text.clone())).collect()
}

/// Every event received so far.
pub(crate) fn drain(events: &mut EventStream) -> Vec<SessionEvent> {
    std::iter::from_fn(|| events.try_recv()).collect()
}

pub(crate) fn resumed_calls(events: &[SessionEvent]) -> Vec<Vec<(String, String)>> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SessionResumed { in_doubt } => Some(
                in_doubt
                    .iter()
                    .map(|c| (c.call_id.clone(), format!("{}:{:?}", c.name, c.outcome)))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_resumed_session_keeps_its_history_and_the_call_in_doubt_ends_once_as_failed() {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refill", "{}"), text("Refilling now.")];
    let mut first = Harness::start_with(builder, refilling_agent(), script).await;
    first.session.user_turn("refill my prescription").await.unwrap();
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallStarted { .. })).await;
    assert!(first.tool_events().iter().any(|e| e.starts_with("S(c1")), "{:?}", first.tool_events());

    // The process dies with `refill` running: what was durable is what the next one reads.
    let store_after_crash = crashed(&*store, &id);
    let llm = ScriptedLlm::new([text("Your refill may not have gone through: shall I retry?")])
        .recording();
    let mut builder = Session::builder().llm(llm.clone()).store(store_after_crash.clone());
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.expect("it resumes");
    assert_eq!(session.id(), id, "the same session, by id");
    session.wait_for_idle().await.unwrap();
    let seen = drain(&mut events);
    assert!(matches!(seen[0].kind, EventKind::AgentHandoff { .. }), "{:?}", seen[0]);
    let resumed = resumed_calls(&seen);
    assert_eq!(resumed, [vec![("c1".to_owned(), "refill:Failed".to_owned())]]);
    assert!(llm.requests().is_empty(), "a resume does not greet or reply by itself");

    let history = session.history().await.unwrap();
    let shown = show(&history);
    assert!(shown.iter().any(|s| s.contains("refill my prescription")), "{shown:?}");
    let output = history
        .iter()
        .filter_map(ChatItem::as_function_call_output)
        .find(|o| o.call_id == "c1")
        .expect("the call in doubt has its output");
    assert!(output.is_error && output.output.contains("interrupted by a restart"), "{output:?}");
    assert_eq!(
        history
            .iter()
            .filter_map(ChatItem::as_function_call_output)
            .filter(|o| o.call_id == "c1")
            .count(),
        1,
        "the call ends once"
    );

    // The conversation goes on, and the model reads what became of the call.
    session.user_turn("did it work?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let request = llm.requests().pop().expect("a request");
    // As a provider sends it: the call (committed at the resume, as the blocking step never
    // got to) answered by its failure.
    let turns = colloquy::llm::turns::turns(&request.items);
    let answered = turns.iter().any(|turn| match turn {
        colloquy::llm::turns::Turn::Assistant { calls, .. } => {
            calls.iter().any(|(call, output)| {
                call.call_id == "c1" && output.output.contains("interrupted by a restart")
            })
        }
        _ => false,
    });
    assert!(answered, "{turns:?}");

    // A second crash finds nothing in doubt: the first resume settled `c1` for good.
    stored(&*store_after_crash, &id, |r| matches!(r, Record::Resumed { .. })).await;
    let again = crashed(&*store_after_crash, &id);
    let mut builder = Session::builder().llm(ScriptedLlm::new([])).store(again);
    let mut events = builder.subscribe();
    let third = builder.resume(&id, agents).await.unwrap();
    third.wait_for_idle().await.unwrap();
    let seen = drain(&mut events);
    assert_eq!(resumed_calls(&seen), [Vec::<(String, String)>::new()]);
    drop((first, session, third));
}

#[tokio::test(start_paused = true)]
async fn a_resume_that_cannot_be_done_says_why_and_changes_nothing() {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let h = Harness::start_with(builder, refilling_agent(), vec![text("Hello.")]).await;
    h.turn("hi").await;
    let id = h.session.id().to_owned();

    let resume = |store: Arc<MemoryStore>, id: String, agents: fn(&str) -> Option<Agent>| async move {
        let llm = ScriptedLlm::new([]);
        match Session::builder().llm(llm).store(store).resume(&id, agents).await {
            Ok(_) => panic!("`{id}` resumed"),
            Err(e) => e.to_string(),
        }
    };
    let unknown = resume(store.clone(), "nope".into(), agents).await;
    assert!(unknown.contains("no stored session `nope`"), "{unknown}");
    let stranger = resume(crashed(&*store, &id), id.clone(), |_| None).await;
    assert!(stranger.contains("was on agent `A`, which is not registered"), "{stranger}");
    let no_store = Session::builder().llm(ScriptedLlm::new([])).resume(&id, agents).await;
    assert!(no_store.err().unwrap().to_string().contains("call SessionBuilder::store"));

    h.close().await;
    stored(&*store, &id, |r| matches!(r, Record::CloseBegan { .. })).await;
    let entries = store.load(&id).unwrap();
    let closed = resume(store.clone(), id.clone(), agents).await;
    assert!(closed.contains("closed (close)"), "{closed}");
    assert_eq!(store.load(&id).unwrap(), entries, "nothing stored changed");
}

#[tokio::test]
async fn a_session_in_a_sqlite_file_resumes_from_a_second_opening_of_it() {
    let dir = std::env::temp_dir().join(format!("colloquy-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sessions.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let builder = Session::builder().store(store.clone());
    let h = Harness::start_with(builder, refilling_agent(), vec![text("Hello there.")]).await;
    h.turn("hi").await;
    let id = h.session.id().to_owned();
    stored(&*store, &id, |r| {
        matches!(r, Record::ItemsCommitted { items, .. }
        if items.iter().any(|i| i.as_message().is_some_and(|m| m.text == "Hello there.")))
    })
    .await;

    let reopened = Arc::new(SqliteStore::open(&path).unwrap());
    let listed = reopened.list().unwrap();
    assert_eq!((listed[0].id.as_str(), listed[0].agent.as_str()), (id.as_str(), "A"));
    // The first one still runs here: as a host that knows its process is gone, take it over.
    let session = Session::builder()
        .llm(ScriptedLlm::new([]))
        .store(reopened)
        .take_over(true)
        .resume(&id, agents)
        .await
        .unwrap();
    let texts = message_texts(&session).await;
    assert_eq!(texts, ["hi", "Hello there."]);
    drop((h, session));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A disk's troubles, for a store in memory ([`Tapped`]): it fails the first append with a
/// record `fail` picks and every one after (a full disk), and holds every append with a record
/// `hold` picks until `released` (a slow disk).
pub(crate) struct Disk {
    fail: fn(&Record) -> bool,
    full: std::sync::atomic::AtomicBool,
    hold: fn(&Record) -> bool,
    pub(crate) released: std::sync::atomic::AtomicBool,
    holding: std::sync::atomic::AtomicBool,
}

impl Disk {
    fn failing_from(fail: fn(&Record) -> bool) -> Tapped<Disk> {
        let (full, released, holding) = (false.into(), false.into(), false.into());
        Tapped::new(Disk { fail, full, hold: |_| false, released, holding })
    }

    pub(crate) fn slow(hold: fn(&Record) -> bool) -> Tapped<Disk> {
        let mut disk = Self::failing_from(|_| false);
        disk.tap.hold = hold;
        disk
    }

    /// Waits (real time, at most 5 s) until an append is held.
    pub(crate) async fn wait_until_holding(&self) {
        for _ in 0..5_000 {
            if self.holding.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(ms(1)).await;
        }
        panic!("no append was held");
    }
}

impl Tap for Disk {
    fn append(
        &self,
        inner: &MemoryStore,
        lease: &Lease,
        entries: &[Entry],
    ) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.full.load(SeqCst) || entries.iter().any(|e| (self.fail)(&e.record)) {
            self.full.store(true, SeqCst);
            return Err(StoreError::Io("disk full".into()));
        }
        if entries.iter().any(|e| (self.hold)(&e.record)) {
            self.holding.store(true, SeqCst);
            while !self.released.load(SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        inner.append(lease, entries)
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_fails_closes_the_session_and_says_so() {
    let store = Arc::new(Disk::failing_from(|r| !matches!(r, Record::AgentEntered { .. })));
    let llm = ScriptedLlm::new([text("Hello.")]);
    let mut builder = Session::builder().llm(llm).store(store);
    let mut stream = builder.subscribe();
    let session = builder.start(refilling_agent()).await.unwrap();
    session.user_turn("hi").await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.recv().await {
        events.push(event);
    }
    let failed: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StoreError { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert!(failed[0].contains("disk full"), "{failed:?}");
    let closed = events.last().map(|e| &e.kind);
    assert!(
        matches!(closed, Some(EventKind::SessionClosed { reason }) if reason == "store_failed"),
        "{closed:?}"
    );
    assert!(matches!(session.user_turn("still there?").await, Err(SessionError::Closed)));
}

#[tokio::test(start_paused = true)]
async fn a_suspended_session_ends_here_and_resumes_with_nothing_in_doubt() {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let script = vec![text("Noted.")];
    let mut h = Harness::start_with(builder, refilling_agent(), script).await;
    h.turn("remember: aisle seat").await;
    let id = h.session.id().to_owned();
    let closed = h.session.suspend().await.expect("it suspends");
    assert_eq!(closed.reason, "suspended");
    assert!(
        h.events().iter().any(
            |e| matches!(&e.kind, EventKind::SessionClosed { reason } if reason == "suspended")
        )
    );
    assert_eq!(store.list().unwrap()[0].closed, None, "open in its store");

    let mut builder = Session::builder().llm(ScriptedLlm::new([])).store(store.clone());
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.expect("a suspended session resumes");
    session.wait_for_idle().await.unwrap();
    let seen = drain(&mut events);
    assert_eq!(resumed_calls(&seen), [Vec::<(String, String)>::new()]);
    let texts = message_texts(&session).await;
    assert_eq!(texts, ["remember: aisle seat", "Noted."]);
}

/// A tool whose body says it ran.
fn marking(ran: Arc<std::sync::atomic::AtomicBool>) -> Agent {
    agent().tool(FunctionTool::new("refill", "Refills.", move |_ctx: RunContext, _a: NoArgs| {
        let ran = Arc::clone(&ran);
        async move {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, ToolError>("refilled")
        }
    }))
}

// The real clock: tokio's paused clock stands still while a blocking write runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_body_starts_only_once_its_start_is_on_disk() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = Arc::new(Disk::slow(|r| matches!(r, Record::CallStarted { .. })));
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refill", "{}"), text("Done.")];
    let mut h = Harness::start_with(builder, marking(Arc::clone(&ran)), script).await;
    h.session.user_turn("refill it").await.unwrap();
    store.tap.wait_until_holding().await;
    // An ungated body would have run within microseconds.
    tokio::time::sleep(ms(300)).await;
    let held = h.tool_events();
    let unseen = !held.iter().any(|e| e.starts_with("S(c1"));
    let ran_early = ran.load(SeqCst);
    store.tap.released.store(true, SeqCst); // before asserting: a failed test must not hang
    assert!(!ran_early, "the body waits while its start is not on disk");
    assert!(unseen, "nor does the host hear of the call (decision 80): {held:?}");

    h.session.wait_for_idle().await.unwrap();
    assert!(ran.load(SeqCst), "then it runs");
    let events = h.tool_events();
    assert_eq!(events.first().map(String::as_str), Some("S(c1)"), "then it starts: {events:?}");
    let history = h.session.history().await.unwrap();
    let output = history.iter().filter_map(ChatItem::as_function_call_output).next();
    assert_eq!(output.map(|o| o.output.as_str()), Some("refilled"));
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_start_never_reaches_the_disk_never_runs() {
    let store = Arc::new(Disk::failing_from(|r| matches!(r, Record::CallStarted { .. })));
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let llm = ScriptedLlm::new([call("c1", "refill", "{}"), text("Done.")]);
    let mut builder = Session::builder().llm(llm).store(store.clone());
    let mut stream = builder.subscribe();
    let session = builder.start(marking(Arc::clone(&ran))).await.unwrap();
    session.user_turn("refill it").await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.recv().await {
        events.push(event);
    }
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst), "the body never ran");
    let ended: Vec<String> =
        tool_events(&events).into_iter().filter(|e| e.starts_with("E(")).collect();
    assert_eq!(ended.len(), 1, "the call ends once: {ended:?}");
    assert!(ended[0].contains("rejected"), "{ended:?}");
    let closed = events.last().map(|e| &e.kind);
    assert!(
        matches!(closed, Some(EventKind::SessionClosed { reason }) if reason == "store_failed"),
        "{closed:?}"
    );
}

// The real clock: tokio's paused clock stands still while a blocking write runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_reads_a_result_only_once_it_is_on_disk() {
    use std::sync::atomic::Ordering::SeqCst;
    let holds_output = |r: &Record| {
        matches!(r, Record::ItemsCommitted { items, .. }
            if items.iter().any(|i| i.as_function_call_output().is_some()))
    };
    let store = Arc::new(Disk::slow(holds_output));
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refill", "{}"), text("Refilled.")];
    let h = Harness::start_with(builder, marking(Arc::clone(&ran)), script).await;
    h.session.user_turn("refill it").await.unwrap();
    store.tap.wait_until_holding().await;
    // An unheld request would have gone out within microseconds.
    tokio::time::sleep(ms(300)).await;
    assert!(ran.load(SeqCst));
    assert_eq!(h.requests().len(), 1, "the model has not read the result");

    store.tap.released.store(true, SeqCst);
    h.session.wait_for_idle().await.unwrap();
    let requests = h.requests();
    assert_eq!(requests.len(), 2);
    let read = show(&requests[1].items);
    assert!(read.iter().any(|s| s.contains("refilled")), "{read:?}");
}

/// A journal written as a session would have: agent `A` entered, the user asked, `refill` was
/// answered provisionally and its `_final` pair inserted for a deferred reply that no reply
/// took before the process died.
fn journal_owing_a_reply() -> Vec<Entry> {
    use colloquy::chat::{
        AgentHandoff, FunctionCall, FunctionCallOutput, Message, Role, Timestamp,
    };
    let at = |seq: u64| Timestamp { micros: seq * 1_000, seq };
    let call = |call_id: &str, seq| {
        ChatItem::FunctionCall(FunctionCall {
            id: format!("item_{seq}"),
            call_id: call_id.into(),
            name: "refill".into(),
            arguments: "{}".into(),
            extra: Default::default(),
            created_at: at(seq),
        })
    };
    let output = |call_id: &str, text: &str, seq| {
        ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: format!("item_{seq}"),
            call_id: call_id.into(),
            name: "refill".into(),
            output: text.into(),
            is_error: false,
            reply_required: true,
            created_at: at(seq),
        })
    };
    let entered = AgentHandoff {
        id: "item_1".into(),
        old_agent: None,
        new_agent: "A".into(),
        created_at: at(1),
    };
    let asked = Message {
        id: "item_2".into(),
        role: Role::User,
        text: "refill it".into(),
        interrupted: false,
        created_at: at(2),
    };
    let committed = |items: Vec<ChatItem>| Record::ItemsCommitted {
        agent: "A".into(),
        items: items.into_iter().map(Arc::new).collect(),
    };
    let records = vec![
        Record::AgentEntered { item: Arc::new(ChatItem::AgentHandoff(entered)) },
        committed(vec![ChatItem::Message(asked)]),
        committed(vec![call("c1", 3)]),
        committed(vec![output("c1", "Refilling in the background.", 4)]),
        committed(vec![call("c1_final", 5), output("c1_final", "refilled", 6)]),
        Record::ReplyAwaited { update_id: "c1_final".into() },
    ];
    records.into_iter().enumerate().map(|(i, r)| Entry::new(i as u64 + 1, i as u64, r)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_reply_owed_at_the_crash_is_delivered_once_after_the_resume() {
    let store = journal_of("s-owed", &journal_owing_a_reply());
    let llm = ScriptedLlm::new([text("Your refill is done.")]).recording();
    let mut builder = Session::builder().llm(llm.clone()).store(store.clone());
    let mut events = builder.subscribe();
    let session = builder.resume("s-owed", agents).await.unwrap();
    session.wait_for_idle().await.unwrap();
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "one deferred reply");
    assert_eq!(requests[0].kind, colloquy::llm::RequestKind::DeferredReply);
    assert!(requests[0].instructions.as_deref().is_some_and(|i| i.contains("c1_final")));
    let seen = drain(&mut events);
    let completed = seen.iter().any(|e| matches!(&e.kind,
        EventKind::ToolReplyUpdated { update_ids, status: colloquy::events::ReplyStatus::Completed, .. }
            if update_ids == &["c1_final".to_owned()]));
    assert!(completed, "{seen:?}");

    // A second crash owes nothing: the reply took the pair.
    stored(&*store, "s-owed", |r| matches!(r, Record::RepliesTaken { .. })).await;
    let again = crashed(&*store, "s-owed");
    let llm = ScriptedLlm::new([]).recording();
    let second = Session::builder().llm(llm.clone()).store(again).resume("s-owed", agents).await;
    second.unwrap().wait_for_idle().await.unwrap();
    assert!(llm.requests().is_empty(), "delivered once");
    drop(session);
}

#[tokio::test(start_paused = true)]
async fn a_seeded_history_is_kept_and_a_wrong_agent_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let seeded = Harness::start(agent(), vec![text("Earlier answer.")]).await;
    seeded.turn("earlier question").await;
    let history = seeded.session.history().await.unwrap();
    let builder = Session::builder().store(store.clone()).history(history);
    let h = Harness::start_with(builder, refilling_agent(), vec![text("Hi again.")]).await;
    h.turn("hello").await;
    let id = h.session.id().to_owned();
    h.session.suspend().await.unwrap();

    let impostor = |_: &str| Some(Agent::new("B", "inst"));
    let refused =
        Session::builder().llm(ScriptedLlm::new([])).store(store.clone()).resume(&id, impostor);
    let why = refused.await.err().expect("refused").to_string();
    assert!(why.contains("made an agent with id `B`"), "{why}");

    let session = Session::builder().llm(ScriptedLlm::new([])).store(store).resume(&id, agents);
    let session = session.await.unwrap();
    let texts = message_texts(&session).await;
    assert_eq!(texts, ["earlier question", "Earlier answer.", "hello", "Hi again."]);
    let context = session.chat_context("A").await.unwrap().expect("A's context");
    assert_eq!(context.iter().filter(|i| i.as_message().is_some()).count(), 4);
    drop(seeded);
}

/// How a test store appends: in place of the `MemoryStore`'s own append, with it at hand.
pub(crate) trait Tap: Send + Sync + 'static {
    fn append(
        &self,
        inner: &MemoryStore,
        lease: &Lease,
        entries: &[Entry],
    ) -> Result<(), StoreError>;
}

/// A closure tap sees the session's journal after each append: every state a crash could leave.
impl<F: Fn(Vec<Entry>) + Send + Sync + 'static> Tap for F {
    fn append(
        &self,
        inner: &MemoryStore,
        lease: &Lease,
        entries: &[Entry],
    ) -> Result<(), StoreError> {
        inner.append(lease, entries)?;
        self(inner.load(&lease.session)?);
        Ok(())
    }
}

/// A store in memory whose appends go through `tap`.
pub(crate) struct Tapped<T> {
    inner: MemoryStore,
    pub(crate) tap: T,
}

impl<T: Tap> Tapped<T> {
    pub(crate) fn new(tap: T) -> Self {
        Self { inner: MemoryStore::new(), tap }
    }
}

impl<T: Tap> SessionStore for Tapped<T> {
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError> {
        self.tap.append(&self.inner, lease, entries)
    }
    fn acquire(
        &self,
        session: &str,
        holder: &LeaseHolder,
        ttl: std::time::Duration,
        mode: Acquire,
    ) -> Result<Lease, StoreError> {
        self.inner.acquire(session, holder, ttl, mode)
    }
    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.renew(lease)
    }
    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release(lease)
    }
    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        self.inner.load(session)
    }
    fn list(&self) -> Result<Vec<colloquy::store::SessionSummary>, StoreError> {
        self.inner.list()
    }
    fn delete(&self, session: &str) -> Result<bool, StoreError> {
        self.inner.delete(session)
    }
}

/// How many outputs of call `call_id` `history` holds.
pub(crate) fn outputs_of(history: &[ChatItem], call_id: &str) -> usize {
    let outputs = history.iter().filter_map(ChatItem::as_function_call_output);
    outputs.filter(|o| o.call_id == call_id).count()
}

/// A background tool (answered by its update, its result a `_final` pair) and a blocking one.
fn two_tools() -> Agent {
    let background =
        FunctionTool::new("track", "Tracks.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("tracking").await?;
            tokio::time::sleep(ms(300)).await;
            Ok::<_, ToolError>("delivered")
        });
    agent().tool(background).tool(sleeper("refill", 100, "refilled"))
}

/// A crash after any append, resumed: the history carries on from what was on disk, and every
/// call the model made ends exactly once — by its result, or as interrupted.
#[tokio::test(start_paused = true)]
async fn after_a_crash_at_any_point_every_call_ends_exactly_once() {
    let prefixes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = Arc::clone(&prefixes);
    let store = Arc::new(Tapped::new(move |on_disk| kept.lock().unwrap().push(on_disk)));
    let script = vec![
        call("c1", "track", "{}"),
        call("c2", "refill", "{}"),
        text("On it."),
        text("Both done."),
        text("Anything else?"),
    ];
    let builder = Session::builder().store(store.clone());
    let h = Harness::start_with(builder, two_tools(), script).await;
    h.turn("track my parcel and refill my prescription").await;
    tokio::time::sleep(ms(1_000)).await;
    h.session.wait_for_idle().await.unwrap();
    let id = h.session.id().to_owned();
    h.session.suspend().await.unwrap();
    drop(h);
    let prefixes = prefixes.lock().unwrap().clone();
    assert!(prefixes.len() >= 6, "{} crash points", prefixes.len());

    for (point, on_disk) in prefixes.iter().enumerate() {
        let crashed = journal_of(&id, on_disk);
        let replies: Vec<_> = (0..6).map(|_| text("Resumed.")).collect();
        let builder = Session::builder().llm(ScriptedLlm::new(replies)).store(crashed);
        let resumed = match builder.resume(&id, |name| (name == "A").then(two_tools)).await {
            Ok(session) => session,
            // A crash before the first record: there is nothing to resume.
            Err(e) => {
                assert!(point == 0 && e.to_string().contains("no agent"), "at {point}: {e}");
                continue;
            }
        };
        resumed.wait_for_idle().await.unwrap();
        let history = resumed.history().await.unwrap();
        let before = colloquy::store::Journal::fold(on_disk).history;
        let ids = |items: &[ChatItem]| items.iter().map(|i| i.id().to_owned()).collect::<Vec<_>>();
        assert_eq!(
            ids(&history[..before.len()]),
            ids(&before),
            "at {point}: the history carries on"
        );
        for call in history.iter().filter_map(ChatItem::as_function_call) {
            if call.call_id.ends_with("_final") {
                continue;
            }
            let outputs = |call_id: &str| outputs_of(&history, call_id);
            let finals = outputs(&format!("{}_final", call.call_id));
            assert_eq!(outputs(&call.call_id), 1, "at {point}: {} answered once", call.call_id);
            // Answered by its update, a call ends with its `_final` pair; else by that answer.
            let answer = history
                .iter()
                .filter_map(ChatItem::as_function_call_output)
                .find(|o| o.call_id == call.call_id)
                .map(|o| o.output.contains("tracking"));
            let expected = usize::from(answer == Some(true));
            assert_eq!(
                finals,
                expected,
                "at {point}: {} ends once: {:?}",
                call.call_id,
                show(&history)
            );
        }
        resumed.close().await.unwrap();
    }
}
