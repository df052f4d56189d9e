//! One writer per store in a process (docs/durability.md#group-commit): every session hands
//! it its batches, and it writes whatever is waiting in one `SessionStore::write_many` on a
//! blocking thread — with SQLite, one transaction and one sync for all the sessions that had
//! something ready — renewing the leases that are due in the same write, then tells each
//! session how far its journal is on disk ([`News::Stored`]), or that it failed.
//!
//! Why one task for all: under load, hundreds of sessions write at once. A blocking task per
//! write parked and woke an OS thread each; a task per session to await its writes woke twice
//! more per batch. Here a batch costs a send and, once written, one message to its session. A
//! blocking task per group still tells tokio a write is under way, so a paused clock (tests)
//! stands still meanwhile. A store's writer is a task of the runtime that first wrote to it,
//! lives as long as a session writes to it, and is shared by every session given the same
//! `Arc` of the store.
//!
//! It cannot deadlock: it never awaits a session (it casts to them), and a session never
//! awaits it but in `close`, bounded by `FLUSH_TIMEOUT`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use colloquy_store::{Entry, Lease, SessionStore, StoreError, Write};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Writes one thread takes on at once, at most: a group that large is already one sync for
/// hundreds of sessions, and a bound keeps each answer prompt.
const MOST_AT_ONCE: usize = 1_024;

/// How long one write (and so an append or a renewal of a lease) may take before the store
/// counts as failed: its sessions close (`store_failed`) rather than hold their calls and
/// model requests for ever.
pub(crate) const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A session's journal, as the writer knows it.
pub(crate) type JournalId = u64;

/// What the writer tells a session of its journal.
pub(crate) enum News {
    /// On disk through this record.
    Stored(u64),
    /// The store failed (why): nothing more is written.
    Failed(String),
    /// Another process took the lease over (why): nothing more is written.
    LeaseLost(String),
}

/// Where a session hears its [`News`] (a cast to its mailbox: it never blocks the writer).
pub(crate) type Listener = Box<dyn Fn(News) + Send + Sync>;

/// What a session asks of its store's writer.
enum Job {
    /// Journal `id` is written under `lease`; the writer tells `session` how it goes.
    Open {
        id: JournalId,
        lease: Arc<Lease>,
        session: Listener,
    },
    Append {
        id: JournalId,
        entries: Vec<Entry>,
    },
    /// Everything sent before is written (or never will be): release the lease, then answer.
    Close {
        id: JournalId,
        done: oneshot::Sender<()>,
    },
}

/// A handle on a store's writer task; the task ends when the last handle goes.
pub(crate) struct StoreWriter {
    jobs: mpsc::UnboundedSender<Job>,
}

/// The writers of this process, by store (the address of the store an `Arc` shares). A store
/// cannot be freed while its writer's task holds it, so an address is never reused meanwhile;
/// a writer whose runtime ended (its queue closed) is replaced.
static WRITERS: Mutex<Vec<(usize, Weak<StoreWriter>)>> = Mutex::new(Vec::new());

static NEXT_JOURNAL: AtomicU64 = AtomicU64::new(1);

/// Why a send failed: the writer's runtime is gone.
pub(crate) const STOPPED: &str = "the store's writer has stopped";

impl StoreWriter {
    /// The writer of `store`, started on this runtime if it has none.
    pub(crate) fn of(store: &Arc<dyn SessionStore>) -> Arc<StoreWriter> {
        let key = Arc::as_ptr(store).cast::<()>() as usize;
        let mut writers = WRITERS.lock().unwrap_or_else(PoisonError::into_inner);
        writers.retain(|(_, writer)| writer.upgrade().is_some_and(|w| !w.jobs.is_closed()));
        if let Some(writer) = writers.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade())
        {
            return writer;
        }
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_all(Arc::clone(store), queue));
        let writer = Arc::new(StoreWriter { jobs });
        writers.push((key, Arc::downgrade(&writer)));
        writer
    }

    /// Starts writing a journal under `lease`: its batches' fate is told to `session`, and the
    /// lease is renewed every third of its ttl until [`close`](Self::close).
    pub(crate) fn open(&self, lease: Lease, session: Listener) -> JournalId {
        let id = NEXT_JOURNAL.fetch_add(1, Ordering::Relaxed);
        let _ = self.jobs.send(Job::Open { id, lease: Arc::new(lease), session });
        id
    }

    /// Appends `entries` to journal `id`, after its earlier batches.
    pub(crate) fn append(&self, id: JournalId, entries: Vec<Entry>) -> Result<(), &'static str> {
        self.jobs.send(Job::Append { id, entries }).map_err(|_| STOPPED)
    }

    /// Resolves once every batch of journal `id` is written (or failed) and its lease
    /// released.
    pub(crate) async fn close(&self, id: JournalId) {
        let (done, closed) = oneshot::channel();
        if self.jobs.send(Job::Close { id, done }).is_ok() {
            let _ = closed.await;
        }
    }

    /// Closes journal `id` without waiting: its batches are written and its lease released,
    /// and the lease is no longer renewed.
    pub(crate) fn close_now(&self, id: JournalId) {
        let (done, _) = oneshot::channel();
        let _ = self.jobs.send(Job::Close { id, done });
    }
}

/// A journal being written.
struct Open {
    lease: Arc<Lease>,
    session: Listener,
    renew_at: Instant,
    /// The store refused or failed it: its session was told, and nothing more is written.
    failed: bool,
}

impl Open {
    /// How often its lease is renewed: every third of its ttl.
    fn every(lease: &Lease) -> Duration {
        (lease.ttl / 3).max(Duration::from_millis(10))
    }

    /// Tells the session `outcome` of a write that went through record `last` (a renewal:
    /// none); a failure ends the journal.
    fn answer(&mut self, outcome: Result<(), StoreError>, last: Option<u64>) {
        let news = match outcome {
            Ok(()) => match last {
                Some(last) => News::Stored(last),
                None => return,
            },
            Err(e @ StoreError::LeaseLost { .. }) => News::LeaseLost(e.to_string()),
            Err(e) => News::Failed(e.to_string()),
        };
        self.failed = !matches!(news, News::Stored(_));
        (self.session)(news);
    }
}

/// The writer: takes whatever waits, writes it in one go on a blocking thread, answers each,
/// until every handle is gone.
async fn write_all(store: Arc<dyn SessionStore>, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut open: HashMap<JournalId, Open> = HashMap::new();
    loop {
        let renewal = open.values().filter(|o| !o.failed).map(|o| o.renew_at).min();
        let first = tokio::select! {
            job = queue.recv() => match job {
                Some(job) => Some(job),
                None => break,
            },
            () = sleep_until(renewal) => None,
        };
        let mut jobs: Vec<Job> = first.into_iter().collect();
        while jobs.len() < MOST_AT_ONCE
            && let Ok(job) = queue.try_recv()
        {
            jobs.push(job);
        }
        let group = Group::of(jobs, &mut open);
        let now = Instant::now();
        // The leases due, renewed in the same write (a session that always has a batch
        // waiting still renews in time).
        let renewals: Vec<JournalId> = open
            .iter()
            .filter(|(id, o)| !o.failed && o.renew_at <= now && !group.closing(**id))
            .map(|(id, _)| *id)
            .collect();
        // Whose write is whose: each append's journal and last record, the renewals, then
        // the releases of the journals that close.
        let mut whose: Vec<(JournalId, Kind)> = Vec::new();
        let mut writes: Vec<(Arc<Lease>, Kind, Vec<Entry>)> = Vec::new();
        for (id, entries) in group.appends {
            let Some(o) = open.get(&id) else { continue };
            let kind = Kind::Append(entries.last().map_or(0, |e| e.seq));
            whose.push((id, kind));
            writes.push((Arc::clone(&o.lease), kind, entries));
        }
        let mut other = |ids: &[JournalId], kind: Kind| {
            for id in ids {
                if let Some(o) = open.get(id) {
                    whose.push((*id, kind));
                    writes.push((Arc::clone(&o.lease), kind, Vec::new()));
                }
            }
        };
        other(&renewals, Kind::Renew);
        other(&group.closes.iter().map(|(id, _)| *id).collect::<Vec<_>>(), Kind::Release);
        let work = Arc::clone(&store);
        let write = tokio::task::spawn_blocking(move || match writes.is_empty() {
            true => Vec::new(),
            false => work.write_many(&writes_of(&writes)),
        });
        let outcomes = match tokio::time::timeout(APPEND_TIMEOUT, write).await {
            Ok(Ok(outcomes)) => outcomes,
            // A write that panicked or hung: every session in it fails.
            Ok(Err(_)) => failed_all(whose.len(), "the store's write panicked"),
            Err(_) => failed_all(whose.len(), &format!("a write took over {APPEND_TIMEOUT:?}")),
        };
        let mut outcomes = outcomes.into_iter();
        for (id, kind) in whose {
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err(StoreError::Io("the store left a write unanswered".into())));
            let Some(o) = open.get_mut(&id) else { continue };
            match kind {
                Kind::Append(last) => o.answer(outcome, Some(last)),
                Kind::Renew => {
                    o.renew_at = now + Open::every(&o.lease);
                    o.answer(outcome, None);
                }
                // Its session is closing: the next process finds the lease free, or expired.
                Kind::Release => {}
            }
        }
        for (id, done) in group.closes {
            open.remove(&id);
            let _ = done.send(());
        }
    }
}

/// The jobs of one write: each journal's batches as one append, in the order first sent.
struct Group {
    appends: Vec<(JournalId, Vec<Entry>)>,
    closes: Vec<(JournalId, oneshot::Sender<()>)>,
}

impl Group {
    fn of(jobs: Vec<Job>, open: &mut HashMap<JournalId, Open>) -> Self {
        let mut group = Group { appends: Vec::new(), closes: Vec::new() };
        let mut at: HashMap<JournalId, usize> = HashMap::new();
        for job in jobs {
            match job {
                Job::Open { id, lease, session } => {
                    let renew_at = Instant::now() + Open::every(&lease);
                    open.insert(id, Open { lease, session, renew_at, failed: false });
                }
                Job::Append { id, entries } => {
                    if open.get(&id).is_none_or(|o| o.failed) {
                        continue; // its session was told already
                    }
                    match at.get(&id) {
                        Some(&i) => group.appends[i].1.extend(entries),
                        None => {
                            at.insert(id, group.appends.len());
                            group.appends.push((id, entries));
                        }
                    }
                }
                Job::Close { id, done } => group.closes.push((id, done)),
            }
        }
        group
    }

    fn closing(&self, id: JournalId) -> bool {
        self.closes.iter().any(|(c, _)| *c == id)
    }
}

/// What a write of the group is.
#[derive(Clone, Copy)]
enum Kind {
    /// An append, through this record.
    Append(u64),
    Renew,
    Release,
}

fn writes_of(writes: &[(Arc<Lease>, Kind, Vec<Entry>)]) -> Vec<Write<'_>> {
    writes
        .iter()
        .map(|(lease, kind, entries)| match kind {
            Kind::Append(_) => Write::Append { lease, entries },
            Kind::Renew => Write::Renew(lease),
            Kind::Release => Write::Release(lease),
        })
        .collect()
}

fn failed_all(n: usize, why: &str) -> Vec<Result<(), StoreError>> {
    (0..n).map(|_| Err(StoreError::Io(why.to_string()))).collect()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
