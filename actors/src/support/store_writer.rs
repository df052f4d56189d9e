//! One writer per store in a process (docs/durability.md#group-commit): every session hands
//! it its batches and lease renewals, and it writes whatever is waiting in one
//! `SessionStore::write_many` on a blocking thread — with SQLite, one transaction and one sync
//! for all the sessions that had something ready. Sessions await an answer on a oneshot.
//!
//! Why not a blocking task per session's write: under load, hundreds of sessions write at
//! once, and a blocking task each means as many OS threads parked and woken per write — the
//! journal's cost was mostly that. A blocking task per group still tells tokio a write is
//! under way, so a paused clock (tests) stands still meanwhile. A store's writer is a task of
//! the runtime that first wrote to it, lives as long as a session writes to it, and is shared
//! by every session given the same `Arc` of the store.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use colloquy_store::{Entry, Lease, SessionStore, StoreError, Write};
use tokio::sync::{mpsc, oneshot};

/// Writes one thread takes on at once, at most: a group that large is already one sync for
/// hundreds of sessions, and a bound keeps each answer prompt.
const MOST_AT_ONCE: usize = 1_024;

/// What a session asks of its store's writer.
enum Job {
    Append { lease: Arc<Lease>, entries: Vec<Entry>, done: oneshot::Sender<Outcome> },
    Renew { lease: Arc<Lease>, done: oneshot::Sender<Outcome> },
}

type Outcome = Result<(), StoreError>;

/// A handle on a store's writer task; the task ends when the last handle goes.
pub(crate) struct StoreWriter {
    jobs: mpsc::UnboundedSender<Job>,
}

/// The writers of this process, by store (the address of the store an `Arc` shares). A store
/// cannot be freed while its writer's task holds it, so an address is never reused meanwhile;
/// a writer whose runtime ended (its queue closed) is replaced.
static WRITERS: Mutex<Vec<(usize, Weak<StoreWriter>)>> = Mutex::new(Vec::new());

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

    /// Appends `entries` under `lease`, or renews `lease` when there are none; resolves once
    /// that is written (or failed).
    pub(crate) async fn write(&self, lease: &Arc<Lease>, entries: Option<Vec<Entry>>) -> Outcome {
        let (done, answer) = oneshot::channel();
        let lease = Arc::clone(lease);
        let job = match entries {
            Some(entries) => Job::Append { lease, entries, done },
            None => Job::Renew { lease, done },
        };
        let sent = self.jobs.send(job);
        let stopped = || StoreError::Io("the store's writer stopped".into());
        sent.map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The writer: takes whatever waits, writes it in one go on a blocking thread, answers each,
/// until every handle is gone.
async fn write_all(store: Arc<dyn SessionStore>, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = queue.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < MOST_AT_ONCE
            && let Ok(job) = queue.try_recv()
        {
            jobs.push(job);
        }
        let store = Arc::clone(&store);
        let written = tokio::task::spawn_blocking(move || {
            let outcomes = store.write_many(&writes_of(&jobs));
            (jobs, outcomes)
        })
        .await;
        // A write that panicked drops its jobs: their sessions hear that the writer stopped.
        let Ok((jobs, outcomes)) = written else { continue };
        let mut outcomes = outcomes.into_iter();
        for job in jobs {
            let outcome = outcomes
                .next()
                .unwrap_or_else(|| Err(StoreError::Io("the store left a write unanswered".into())));
            let (Job::Append { done, .. } | Job::Renew { done, .. }) = job;
            let _ = done.send(outcome);
        }
    }
}

fn writes_of(jobs: &[Job]) -> Vec<Write<'_>> {
    jobs.iter()
        .map(|job| match job {
            Job::Append { lease, entries, .. } => Write::Append { lease, entries },
            Job::Renew { lease, .. } => Write::Renew(lease),
        })
        .collect()
}
