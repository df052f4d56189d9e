//! The cluster's session store (docs/cluster.md#journals): each session's journal on one
//! subject of a JetStream stream, so a cluster keeps its sessions' journals on the NATS server
//! it already has, and any node can resume a session another one wrote.
//!
//! One subject holds all of a session: its appends (a message each: the entries as one JSON
//! array) and its lease's changes (a message each, with no entries). Every message carries the
//! session's state after it in a header — the lease, the last entry's number, the summary a
//! listing shows — so the state is one read of the subject's last message, and every write is
//! a compare-and-set on it: published with the subject's last sequence expected. A write that
//! another process came between is refused by the server and decided again on the new state,
//! so a lease taken over fences its old holder at its next write (docs/durability.md#leases).
//!
//! The trait is blocking and NATS is async: the store runs its client on a runtime of its own
//! (one thread), and each call waits for its future there, so it may be called from any
//! thread, as a store is (from a blocking one).
//!
//! Round trips, not CPU, bound it (docs/benchmarks.md#durable-sessions), so: the store keeps
//! each session's state as its own last write left it, and decides the next write on that
//! without reading the subject again (a write another process came between is refused by the
//! server, and decided again on a fresh read); and a group of writes (`write_many`, what the
//! session writer hands over at once) goes out concurrently, one chain per session in order.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{self, Context};
use colloquy_store::{
    Acquire, Entry, Lease, LeaseHolder, SessionStore, SessionSummary, StoreError, StoredLease,
    Write,
};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ClusterError;
use crate::names;
use crate::nats::NatsConfig;

/// The header each message of a journal carries: the session's state after it.
const STATE_HEADER: &str = "Colloquy-Journal-State";

/// How many times a write is decided again when another process wrote first.
const CONTENDED_TRIES: usize = 8;
/// How long a write keeps trying while the server does not answer (a restart, a lost
/// connection): past it the write fails, and its session closes `store_failed`.
const OUTAGE_BOUND: Duration = Duration::from_secs(15);
/// The pause between two tries meanwhile.
const OUTAGE_RETRY: Duration = Duration::from_millis(200);

/// How long a read of a whole journal may go without a message before it fails.
const READ_STALL: Duration = Duration::from_secs(5);

/// How many sessions' writes of one group are under way at once.
const CONCURRENT_WRITES: usize = 128;

/// Sessions whose last state the store keeps, at most: past it the memory is dropped (the next
/// write of each reads its subject again).
const KNOWN_MOST: usize = 100_000;

/// Sessions' journals in a JetStream stream ([`names::JOURNALS_STREAM`]), one subject each.
pub struct JetStreamStore {
    /// Taken only by `drop`, which must not drop it in place: in an async context that panics.
    runtime: Option<tokio::runtime::Runtime>,
    journals: Journals,
}

/// What a write needs, shared by the writes of a group that run at once.
#[derive(Clone)]
struct Journals {
    js: Context,
    stream: stream::Stream,
    /// By subject: the subject's last sequence and the session's state after this store's own
    /// last write there.
    known: Arc<Mutex<HashMap<String, (u64, State)>>>,
}

impl std::fmt::Debug for JetStreamStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamStore").finish_non_exhaustive()
    }
}

impl Drop for JetStreamStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A session's state after a message of its journal.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    lease: Option<LeaseState>,
    entries: u64,
    agent: String,
    closed: Option<String>,
    in_doubt: usize,
    updated_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct LeaseState {
    epoch: u64,
    holder: Option<(String, u32)>,
    expires_ms: u64,
}

impl State {
    fn lease(&self) -> Option<StoredLease> {
        self.lease.as_ref().map(|l| {
            let holder = l.holder.clone().map(|(host, pid)| LeaseHolder::new(host, pid));
            StoredLease::new(l.epoch, holder, l.expires_ms)
        })
    }

    fn set_lease(&mut self, epoch: u64, holder: Option<&LeaseHolder>, expires_ms: u64) {
        let holder = holder.map(|h| (h.host.clone(), h.pid));
        self.lease = Some(LeaseState { epoch, holder, expires_ms });
    }

    fn summary(&self, id: &str) -> SessionSummary {
        let mut summary = SessionSummary::of(id, &[], self.updated_ms);
        summary.agent.clone_from(&self.agent);
        summary.entries = self.entries;
        summary.closed.clone_from(&self.closed);
        summary.calls_in_doubt = self.in_doubt;
        summary.held_by = self.lease().and_then(|l| l.holder_at(now_ms()));
        summary
    }
}

impl JetStreamStore {
    /// Connects to `server` and opens the journals' stream, creating it if it does not exist
    /// yet. Blocking (for at most [`CONNECT_TIMEOUT`](crate::CONNECT_TIMEOUT) and a JetStream
    /// call): in async code, call it through `tokio::task::spawn_blocking`.
    pub fn connect(server: impl Into<NatsConfig>) -> Result<Self, ClusterError> {
        let server = server.into();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("colloquy-journals")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Setup { what: "a runtime".into(), reason: e.to_string() })?;
        let opened = wait_on(&runtime, async move {
            let (reconnects, _) = watch::channel(0);
            let client = server.connect("colloquy-journals", reconnects).await?;
            let js = jetstream::ContextBuilder::new().timeout(names::JOURNAL_TIMEOUT).build(client);
            let stream = journals_stream(&js).await?;
            Ok::<_, ClusterError>((js, stream))
        });
        match opened {
            Ok((js, stream)) => {
                let journals = Journals { js, stream, known: Arc::default() };
                Ok(Self { runtime: Some(runtime), journals })
            }
            Err(e) => {
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    /// Runs `work` on the store's runtime and waits for it, from any thread.
    fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        let runtime = self.runtime.as_ref().expect("the runtime lives until the store is dropped");
        wait_on(runtime, work)
    }

    /// Decides a write on session `session`'s state and makes it ([`Journals::write`]).
    fn write(
        &self,
        session: &str,
        decide: impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError> + Send + 'static,
    ) -> Result<(), StoreError> {
        let subject = subject(session)?;
        let journals = self.journals.clone();
        self.run(async move { journals.write(&subject, decide).await })
    }

    /// Session `session`'s state, read from its subject.
    fn state(&self, session: &str) -> Result<State, StoreError> {
        let subject = subject(session)?;
        let stream = self.journals.stream.clone();
        self.run(async move { read_state(&stream, &subject).await.map(|(_, state)| state) })
    }
}

impl Journals {
    /// Decides a write on the session's state and makes it, again on the new state while
    /// another process writes first: `decide` says what to write (its new state and entries),
    /// or that there is nothing to (`None`), or refuses (`Err`). The first decision is made on
    /// the state this store's last write left, if it knows it; anything but a write decided on
    /// that is decided again on a fresh read (another process may have changed the lease).
    async fn write(
        &self,
        subject: &str,
        decide: impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError>,
    ) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + OUTAGE_BOUND;
        let mut contended = 0;
        let mut known = self.known(subject);
        while contended < CONTENDED_TRIES {
            let remembered = known.is_some();
            let (last, state) = match known.take() {
                Some(known) => known,
                None => match read_state(&self.stream, subject).await {
                    Err(StoreError::Io(why)) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(%subject, %why, "cannot read the journal yet");
                        tokio::time::sleep(OUTAGE_RETRY).await;
                        continue;
                    }
                    read => read?,
                },
            };
            let (next, entries) = match decide(state) {
                Ok(Some(write)) => write,
                _ if remembered => {
                    self.remember(subject, None);
                    continue;
                }
                Ok(None) => return Ok(()),
                Err(refused) => return Err(refused),
            };
            let message = Message::new(&next, &entries, last);
            match message.publish(&self.js, &self.stream, subject, deadline).await {
                Ok(sequence) => {
                    self.remember(subject, sequence.map(|sequence| (sequence, next)));
                    return Ok(());
                }
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    self.remember(subject, None);
                    contended += 1;
                }
                Err(e) => {
                    self.remember(subject, None);
                    return Err(io(&e));
                }
            }
        }
        Err(StoreError::Io(format!("`{subject}` is written by others as fast as it is read")))
    }

    fn known(&self, subject: &str) -> Option<(u64, State)> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner).get(subject).cloned()
    }

    /// Keeps (or, with `None`, forgets) the subject's state after this store's write.
    fn remember(&self, subject: &str, after: Option<(u64, State)>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match after {
            Some(after) => {
                if known.len() >= KNOWN_MOST && !known.contains_key(subject) {
                    known.clear();
                }
                known.insert(subject.to_owned(), after);
            }
            None => {
                known.remove(subject);
            }
        }
    }

    /// One write of a group, as the trait's method of its kind makes it.
    async fn run(&self, job: Job) -> Result<(), StoreError> {
        match job {
            Job::Append(lease, entries) => {
                self.write(&subject(&lease.session)?, append(lease, entries)).await
            }
            Job::Renew(lease) => self.write(&subject(&lease.session)?, renew(lease)).await,
            Job::Release(lease) => {
                let subject = subject(&lease.session)?;
                self.write(&subject, release(lease)).await?;
                // A lease of a session never written (a resume refused) leaves nothing behind:
                // read afresh, as another process may have written since this one last did.
                self.remember(&subject, None);
                let (_, state) = read_state(&self.stream, &subject).await?;
                if state.entries == 0 {
                    let purged = self.stream.purge().filter(subject).await;
                    purged.map(drop).map_err(|e| io(&e))?;
                }
                Ok(())
            }
        }
    }
}

/// A write of a group, owned (it runs on the store's runtime).
enum Job {
    Append(Lease, Vec<Entry>),
    Renew(Lease),
    Release(Lease),
}

impl Job {
    /// `None` for a kind of write this store does not know.
    fn of(write: &Write<'_>) -> Option<Self> {
        Some(match write {
            Write::Append { lease, entries } => Job::Append((*lease).clone(), entries.to_vec()),
            Write::Renew(lease) => Job::Renew((*lease).clone()),
            Write::Release(lease) => Job::Release((*lease).clone()),
            _ => return None,
        })
    }

    fn session(&self) -> &str {
        match self {
            Job::Append(lease, _) | Job::Renew(lease) | Job::Release(lease) => &lease.session,
        }
    }
}

/// An append's decision: `entries`, numbered on from the state's, under a lease still held.
fn append(
    lease: Lease,
    entries: Vec<Entry>,
) -> impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError> {
    move |state| {
        StoredLease::check(state.lease().as_ref(), &lease)?;
        let taken = |seq| StoreError::Conflict { session: lease.session.clone(), seq };
        let mut last = state.entries;
        for entry in &entries {
            if entry.seq <= last {
                return Err(taken(entry.seq));
            }
            last = entry.seq;
        }
        let summary = state.summary(&lease.session).after(&entries, now_ms());
        let next = State {
            agent: summary.agent,
            entries: summary.entries,
            closed: summary.closed,
            in_doubt: summary.calls_in_doubt,
            updated_ms: summary.updated_ms,
            lease: state.lease,
        };
        Ok(Some((next, entries.clone())))
    }
}

/// A renewal's decision: the lease's expiry moved on, if it is still held.
fn renew(lease: Lease) -> impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError> {
    move |mut state| {
        StoredLease::check(state.lease().as_ref(), &lease)?;
        let expires = now_ms().saturating_add(lease.ttl.as_millis() as u64);
        state.set_lease(lease.epoch, Some(&lease.holder), expires);
        Ok(Some((state, Vec::new())))
    }
}

/// A release's decision: the lease given up, if it is still held (else nothing to write).
fn release(held: Lease) -> impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError> {
    move |mut state| {
        if StoredLease::check(state.lease().as_ref(), &held).is_err() {
            return Ok(None); // no longer its: nothing to give up
        }
        state.set_lease(held.epoch, None, 0);
        Ok(Some((state, Vec::new())))
    }
}

impl SessionStore for JetStreamStore {
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError> {
        let journals = self.journals.clone();
        let job = Job::Append(lease.clone(), entries.to_vec());
        self.run(async move { journals.run(job).await })
    }

    /// The group's writes at once (at most 128 sessions: `CONCURRENT_WRITES`), each session's in
    /// order: one round trip for the group rather than two a write.
    fn write_many(&self, writes: &[Write<'_>]) -> Vec<Result<(), StoreError>> {
        let mut chains: Vec<Vec<(usize, Job)>> = Vec::new();
        let mut by_session: HashMap<String, usize> = HashMap::new();
        let mut unknown = Vec::new();
        for (index, write) in writes.iter().enumerate() {
            let Some(job) = Job::of(write) else {
                unknown.push(index);
                continue;
            };
            let chain = *by_session.entry(job.session().to_owned()).or_insert_with(|| {
                chains.push(Vec::new());
                chains.len() - 1
            });
            chains[chain].push((index, job));
        }
        let (journals, count) = (self.journals.clone(), writes.len());
        self.run(async move {
            let runs = chains.into_iter().map(|chain| {
                let journals = journals.clone();
                async move {
                    let mut done = Vec::with_capacity(chain.len());
                    for (index, job) in chain {
                        done.push((index, journals.run(job).await));
                    }
                    done
                }
            });
            let mut outcomes: Vec<Option<Result<(), StoreError>>> = Vec::new();
            outcomes.resize_with(count, || None);
            for index in unknown {
                outcomes[index] = Some(Err(StoreError::Io("a kind of write unknown here".into())));
            }
            let mut runs = futures_util::stream::iter(runs).buffer_unordered(CONCURRENT_WRITES);
            while let Some(done) = runs.next().await {
                for (index, outcome) in done {
                    outcomes[index] = Some(outcome);
                }
            }
            let lost = || Err(StoreError::Io("the write was not made".into()));
            outcomes.into_iter().map(|o| o.unwrap_or_else(lost)).collect()
        })
    }

    fn acquire(
        &self,
        session: &str,
        holder: &LeaseHolder,
        ttl: Duration,
        mode: Acquire,
    ) -> Result<Lease, StoreError> {
        let epoch = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (granted, id, who) = (epoch.clone(), session.to_owned(), holder.clone());
        self.write(session, move |mut state| {
            let now = now_ms();
            let epoch = StoredLease::grant(state.lease().as_ref(), &id, mode, now)?;
            let expires = now.saturating_add(ttl.as_millis() as u64);
            state.set_lease(epoch, Some(&who), expires);
            granted.store(epoch, std::sync::atomic::Ordering::SeqCst);
            Ok(Some((state, Vec::new())))
        })?;
        let epoch = epoch.load(std::sync::atomic::Ordering::SeqCst);
        Ok(Lease::new(session, holder.clone(), epoch, ttl))
    }

    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let journals = self.journals.clone();
        let job = Job::Renew(lease.clone());
        self.run(async move { journals.run(job).await })
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let journals = self.journals.clone();
        let job = Job::Release(lease.clone());
        self.run(async move { journals.run(job).await })
    }

    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let subject = subject(session)?;
        let stream = self.journals.stream.clone();
        let id = session.to_owned();
        let entries = self.run(async move { read_all(&stream, &subject, &id).await })?;
        if entries.is_empty() {
            return Err(StoreError::UnknownSession(session.to_owned()));
        }
        Ok(entries)
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let stream = self.journals.stream.clone();
        let subjects = self.run(async move {
            let mut subjects = Vec::new();
            let mut listed =
                stream.info_with_subjects(names::JOURNAL_SUBJECTS).await.map_err(|e| io(&e))?;
            while let Some(subject) = listed.next().await {
                subjects.push(subject.map_err(|e| io(&e))?.0);
            }
            Ok::<_, StoreError>(subjects)
        })?;
        let mut list = Vec::new();
        for subject in subjects {
            let Some(id) = subject.strip_prefix(names::JOURNAL_PREFIX) else { continue };
            let state = self.state(id)?;
            if state.entries > 0 {
                list.push(state.summary(id));
            }
        }
        list.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(list)
    }

    fn delete(&self, session: &str) -> Result<bool, StoreError> {
        let had = self.state(session)?.entries > 0;
        let subject = subject(session)?;
        let journals = self.journals.clone();
        self.run(async move {
            journals.remember(&subject, None);
            journals.stream.purge().filter(subject).await.map(drop).map_err(|e| io(&e))
        })?;
        Ok(had)
    }
}

/// Runs `work` on `runtime` and waits for it on this thread (a channel, not `block_on`, which
/// would panic on a thread of another runtime).
fn wait_on<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    work: impl Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv().expect("the store's runtime runs its work to the end")
}

/// Session `session`'s subject, if its id can be one token of a subject.
fn subject(session: &str) -> Result<String, StoreError> {
    match names::is_valid_name(session) {
        true => Ok(format!("{}{session}", names::JOURNAL_PREFIX)),
        false => Err(StoreError::Io(format!(
            "session id `{session}` cannot name a NATS subject (letters, digits, `-` and `_`)"
        ))),
    }
}

/// The subject's last sequence (0 for none) and the state its last message carries.
async fn read_state(stream: &stream::Stream, subject: &str) -> Result<(u64, State), StoreError> {
    let last = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(last) => last,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
            return Ok((0, State::default()));
        }
        Err(e) => return Err(io(&e)),
    };
    let header = last.headers.get(STATE_HEADER).map(|v| v.as_str().to_owned());
    let state = header
        .and_then(|h| serde_json::from_str(&h).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("`{subject}`'s last message has no state")))?;
    Ok((last.sequence, state))
}

/// One write of a journal: `entries` with the state after them, if the subject's last
/// sequence is still `last`; its id makes a resend after a lost acknowledgement a no-op (the
/// stream drops a duplicate before it checks the expected sequence).
struct Message {
    id: String,
    state: String,
    body: Vec<u8>,
    last: u64,
}

impl Message {
    fn new(state: &State, entries: &[Entry], last: u64) -> Self {
        let body = match entries.is_empty() {
            true => Vec::new(),
            false => serde_json::to_vec(entries).expect("entries serialize"),
        };
        let state = serde_json::to_string(state).expect("a state serializes");
        Self { id: uuid::Uuid::new_v4().to_string(), state, body, last }
    }

    /// Publishes it and waits for its acknowledgement, sent again while the server does not
    /// answer (a restart, a lost connection) until `deadline`. A resend refused for the
    /// subject's sequence may be the first send having landed (the server may check the
    /// sequence before it drops a duplicate): the subject's last message then carries this
    /// write's id, and the write is done.
    /// `Ok` with the subject's sequence after it, when the server said.
    async fn publish(
        &self,
        js: &Context,
        stream: &stream::Stream,
        subject: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Option<u64>, jetstream::context::PublishError> {
        let mut resent = false;
        loop {
            let message = PublishMessage::build()
                .payload(self.body.clone().into())
                .header(STATE_HEADER, self.state.as_str())
                .message_id(self.id.as_str())
                .expected_last_subject_sequence(self.last);
            match crate::nats::store_at(js, subject.to_owned(), message).await {
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence && resent => {
                    return match self.landed(stream, subject).await {
                        Some(sequence) => Ok(Some(sequence)),
                        None => Err(e),
                    };
                }
                Err(e)
                    if e.kind() != PublishErrorKind::WrongLastSequence
                        && tokio::time::Instant::now() + OUTAGE_RETRY < deadline =>
                {
                    tracing::debug!(%subject, error = %e, "journal write not acknowledged: again");
                    resent = true;
                    tokio::time::sleep(OUTAGE_RETRY).await;
                }
                done => return done.map(Some),
            }
        }
    }

    /// The subject's sequence after this write, if its last message is this write.
    async fn landed(&self, stream: &stream::Stream, subject: &str) -> Option<u64> {
        let last = stream.get_last_raw_message_by_subject(subject).await.ok()?;
        let id = last
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .map(async_nats::HeaderValue::as_str);
        (id == Some(self.id.as_str())).then_some(last.sequence)
    }
}

/// Every entry on `subject`, in order (none if it has none).
async fn read_all(
    stream: &stream::Stream,
    subject: &str,
    session: &str,
) -> Result<Vec<Entry>, StoreError> {
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: subject.to_owned(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| io(&e))?;
    let mut entries: Vec<Entry> = Vec::new();
    if read_state(stream, subject).await?.0 == 0 {
        return Ok(entries); // nothing on it: no message would come
    }
    let mut messages = consumer.messages().await.map_err(|e| io(&e))?;
    let corrupt = |why: String| StoreError::Corrupt(format!("session `{session}`: {why}"));
    loop {
        let message = match tokio::time::timeout(READ_STALL, messages.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(io(&e)),
            Ok(None) | Err(_) => return Err(StoreError::Io(format!("`{subject}` stopped short"))),
        };
        let last = message.info().map_err(|e| StoreError::Io(e.to_string()))?.pending == 0;
        if message.payload.is_empty() {
            if last {
                break;
            }
            continue; // the lease's
        }
        let batch: Vec<Entry> = serde_json::from_slice(&message.payload)
            .map_err(|e| corrupt(format!("a batch does not read: {e}")))?;
        let next = entries.last().map_or(1, |e| e.seq + 1);
        if batch.first().map(|e| e.seq) != Some(next) {
            return Err(corrupt(format!("its journal breaks off after record {}", next - 1)));
        }
        entries.extend(batch);
        if last {
            break;
        }
    }
    Ok(entries)
}

/// The journals' stream, created if it does not exist yet.
async fn journals_stream(js: &Context) -> Result<stream::Stream, ClusterError> {
    js.get_or_create_stream(stream::Config {
        name: names::JOURNALS_STREAM.into(),
        description: Some("colloquy session journals, one subject per session".into()),
        subjects: vec![names::JOURNAL_SUBJECTS.into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| ClusterError::Setup {
        what: format!("stream {}", names::JOURNALS_STREAM),
        reason: e.to_string(),
    })
}

fn io(e: &impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
