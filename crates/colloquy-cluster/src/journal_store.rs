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

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{self, Context};
use colloquy_store::{
    Acquire, Entry, Lease, LeaseHolder, SessionStore, SessionSummary, StoreError, StoredLease,
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

/// Sessions' journals in a JetStream stream ([`names::JOURNALS_STREAM`]), one subject each.
pub struct JetStreamStore {
    /// Taken only by `drop`, which must not drop it in place: in an async context that panics.
    runtime: Option<tokio::runtime::Runtime>,
    js: Context,
    stream: stream::Stream,
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
            Ok((js, stream)) => Ok(Self { runtime: Some(runtime), js, stream }),
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

    /// Decides a write on session `session`'s state and makes it, again on the new state while
    /// another process writes first: `decide` says what to write (its new state and entries),
    /// or that there is nothing to (`None`), or refuses (`Err`).
    fn write(
        &self,
        session: &str,
        decide: impl Fn(State) -> Result<Option<(State, Vec<Entry>)>, StoreError> + Send + 'static,
    ) -> Result<(), StoreError> {
        let subject = subject(session)?;
        let (js, stream) = (self.js.clone(), self.stream.clone());
        self.run(async move {
            let deadline = tokio::time::Instant::now() + OUTAGE_BOUND;
            let mut contended = 0;
            while contended < CONTENDED_TRIES {
                let (last, state) = match read_state(&stream, &subject).await {
                    Err(StoreError::Io(why)) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(%subject, %why, "cannot read the journal yet");
                        tokio::time::sleep(OUTAGE_RETRY).await;
                        continue;
                    }
                    read => read?,
                };
                let Some((next, entries)) = decide(state)? else { return Ok(()) };
                let message = Message::new(&next, &entries, last);
                match message.publish(&js, &stream, &subject, deadline).await {
                    Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => contended += 1,
                    done => return done.map_err(|e| io(&e)),
                }
            }
            Err(StoreError::Io(format!("`{subject}` is written by others as fast as it is read")))
        })
    }

    fn state(&self, session: &str) -> Result<State, StoreError> {
        let subject = subject(session)?;
        let stream = self.stream.clone();
        self.run(async move { read_state(&stream, &subject).await.map(|(_, state)| state) })
    }
}

impl SessionStore for JetStreamStore {
    fn append(&self, lease: &Lease, entries: &[Entry]) -> Result<(), StoreError> {
        let (lease, entries) = (lease.clone(), entries.to_vec());
        self.write(&lease.session.clone(), move |state| {
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
        let lease = lease.clone();
        self.write(&lease.session.clone(), move |mut state| {
            StoredLease::check(state.lease().as_ref(), &lease)?;
            let expires = now_ms().saturating_add(lease.ttl.as_millis() as u64);
            state.set_lease(lease.epoch, Some(&lease.holder), expires);
            Ok(Some((state, Vec::new())))
        })
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let held = lease.clone();
        self.write(&lease.session, move |mut state| {
            if StoredLease::check(state.lease().as_ref(), &held).is_err() {
                return Ok(None); // no longer its: nothing to give up
            }
            state.set_lease(held.epoch, None, 0);
            Ok(Some((state, Vec::new())))
        })?;
        // A lease of a session never written (a resume refused) leaves nothing behind.
        if self.state(&lease.session)?.entries == 0 {
            self.delete(&lease.session)?;
        }
        Ok(())
    }

    fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        let subject = subject(session)?;
        let stream = self.stream.clone();
        let id = session.to_owned();
        let entries = self.run(async move { read_all(&stream, &subject, &id).await })?;
        if entries.is_empty() {
            return Err(StoreError::UnknownSession(session.to_owned()));
        }
        Ok(entries)
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let stream = self.stream.clone();
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
        let stream = self.stream.clone();
        self.run(
            async move { stream.purge().filter(subject).await.map(drop).map_err(|e| io(&e)) },
        )?;
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
    async fn publish(
        &self,
        js: &Context,
        stream: &stream::Stream,
        subject: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), jetstream::context::PublishError> {
        let mut resent = false;
        loop {
            let message = PublishMessage::build()
                .payload(self.body.clone().into())
                .header(STATE_HEADER, self.state.as_str())
                .message_id(self.id.as_str())
                .expected_last_subject_sequence(self.last);
            match crate::nats::store(js, subject.to_owned(), message).await {
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence && resent => {
                    return match self.landed(stream, subject).await {
                        true => Ok(()),
                        false => Err(e),
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
                done => return done,
            }
        }
    }

    /// Whether the subject's last message is this write.
    async fn landed(&self, stream: &stream::Stream, subject: &str) -> bool {
        let Ok(last) = stream.get_last_raw_message_by_subject(subject).await else { return false };
        let id = last
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .map(async_nats::HeaderValue::as_str);
        id == Some(self.id.as_str())
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
