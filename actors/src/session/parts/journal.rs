//! The session's journal on its way to the store (docs/durability.md): each fact a resume
//! needs becomes a [`Record`], gathered per mailbox turn and handed to a writer task that
//! appends each batch to the store, in order, off the Session's task.
//!
//! A call's body and the model's next request are written ahead: the writer tells the Session
//! how far the journal is on disk (`TimerMsg::Stored`), and a call's body, or a context read
//! for an LLM request, waits until the records before it are there
//! (docs/durability.md#write-ahead).
//!
//! The writer holds the session's lease (docs/durability.md#leases): it renews it between
//! batches and releases it after the last; a lease taken over fails the session
//! (`lease_lost`), as a store that fails does (`store_failed`).
//!
//! Handles only: the batch being gathered, the reads that wait, and the writer's channel,
//! which is bounded ([`WRITES_IN_FLIGHT`] batches): a store that falls that far behind fails
//! the session instead of holding its mailbox.

use std::sync::Arc;
use std::time::Duration;

use colloquy_model::{ChatContext, ChatItem, CloseReason};
use colloquy_store::{CallInDoubtRecord, Entry, Lease, Record, SessionStore, StoreError};
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use super::fact::Fact;
use crate::messages::{SessionMsg, TimerMsg};
use crate::support::store_writer::StoreWriter;

/// Batches a session may have on their way to the store; one more fails the session
/// (`store_failed`) rather than wait.
pub(crate) const WRITES_IN_FLIGHT: usize = 256;

/// How long a closing session waits for its last batches to reach the store.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one append (or a renewal of the lease) may take before the store counts as
/// failed: the session closes (`store_failed`) rather than hold its calls and its model
/// requests for ever.
pub(crate) const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct JournalOut {
    batch: Vec<Entry>,
    next_seq: u64,
    /// Calls whose body waits for its start (or its let-through) to be on disk: the record's
    /// number, the call, whether the record is a let-through.
    starting: Vec<(u64, String, bool)>,
    /// Contexts read for LLM requests, held until the journal is on disk through the record
    /// numbered with them: what the model reads is never lost to a crash.
    reads: Vec<(u64, ContextRead)>,
    /// The last record on disk.
    durable: u64,
    tx: Option<mpsc::Sender<Vec<Entry>>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

/// Where a session's journal goes: the store, and the lease that lets this process write
/// there (docs/durability.md#leases).
#[derive(Clone)]
pub(crate) struct Durable {
    pub store: Arc<dyn SessionStore>,
    pub lease: Lease,
}

impl Durable {
    /// Gives the lease up, off the async task (a session that never started).
    pub(crate) async fn release(self) {
        let Self { store, lease } = self;
        let _ = tokio::task::spawn_blocking(move || store.release(&lease)).await;
    }
}

/// What the writer does next: append a batch, or renew the lease.
enum Job {
    Append(Vec<Entry>),
    Renew,
}

impl JournalOut {
    /// A journal that continues after entry `last_seq`, written by a task that renews the
    /// lease every third of its ttl, releases it once the journal is written, and tells
    /// `session` when the store fails or the lease was taken over.
    pub(crate) fn spawn(durable: Durable, last_seq: u64, session: ActorRef<SessionMsg>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<Entry>>(WRITES_IN_FLIGHT);
        let Durable { store, lease } = durable;
        let lease = Arc::new(lease);
        let writer = tokio::spawn(async move {
            let shared = StoreWriter::of(&store);
            let every = (lease.ttl / 3).max(Duration::from_millis(10));
            let mut renewal = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let job = tokio::select! {
                    // The renewal first: ready only when due, so a session that always has a
                    // batch waiting still renews its lease in time.
                    biased;
                    _ = renewal.tick() => Job::Renew,
                    entries = rx.recv() => match entries {
                        Some(mut entries) => {
                            // The batches that wait too: one write, one answer.
                            while let Ok(more) = rx.try_recv() {
                                entries.extend(more);
                            }
                            Job::Append(entries)
                        }
                        None => break,
                    },
                };
                let entries = match job {
                    Job::Append(entries) => Some(entries),
                    Job::Renew => None,
                };
                let last = entries.as_ref().and_then(|e| e.last()).map(|e| e.seq);
                let write = shared.write(&lease, entries);
                let failed = match tokio::time::timeout(APPEND_TIMEOUT, write).await {
                    Ok(Ok(())) => {
                        if let Some(last) = last {
                            let _ = session.cast(TimerMsg::Stored(last).into());
                        }
                        continue;
                    }
                    Ok(Err(e @ StoreError::LeaseLost { .. })) => {
                        let _ = session.cast(TimerMsg::LeaseLost(e.to_string()).into());
                        return;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("a write took over {}s", APPEND_TIMEOUT.as_secs()),
                };
                let _ = session.cast(TimerMsg::StoreFailed(failed).into());
                break;
            }
            // Every batch is written (or none will be): the next process may have the session
            // at once. Bounded, as a store that failed may hang.
            let release = tokio::task::spawn_blocking(move || store.release(&lease));
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, release).await;
        });
        let (batch, starting, reads) = (Vec::new(), Vec::new(), Vec::new());
        let (next_seq, tx, writer) = (last_seq + 1, Some(tx), Some(writer));
        Self { batch, next_seq, starting, reads, durable: last_seq, tx, writer }
    }

    /// Records `fact` (decided `at_ms` into the session), if a resume needs it.
    pub(crate) fn record(&mut self, fact: Fact<'_>, at_ms: u64) {
        let Some(record) = record_of(fact) else { return };
        match &record {
            Record::CallStarted { call, .. } => {
                self.starting.push((self.next_seq, call.call_id.clone(), false));
            }
            // Its body waits for this record now, not its start's (which comes before it).
            Record::CallLetThrough { call_id } => {
                self.starting.retain(|(_, id, _)| id != call_id);
                self.starting.push((self.next_seq, call_id.clone(), true));
            }
            _ => {}
        }
        self.batch.push(Entry::new(self.next_seq, at_ms, record));
        self.next_seq += 1;
    }

    /// Hands the mailbox turn's records to the writer; `Err` (why) if it cannot take them.
    pub(crate) fn flush(&mut self) -> Result<(), String> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let Some(tx) = &self.tx else { return Err("the store's writer has stopped".into()) };
        tx.try_send(std::mem::take(&mut self.batch)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => format!(
                "the store is {WRITES_IN_FLIGHT} writes behind the session: it cannot keep up"
            ),
            mpsc::error::TrySendError::Closed(_) => "the store's writer has stopped".into(),
        })
    }

    /// The calls whose start is on disk now that the journal is through record `through`;
    /// the context reads that waited for it are answered.
    pub(crate) fn stored(&mut self, through: u64) -> Vec<(String, bool)> {
        self.durable = self.durable.max(through);
        let ready = self.reads.partition_point(|(seq, _)| *seq <= through);
        for (_, (reply, context)) in self.reads.drain(..ready) {
            let _ = reply.send(context);
        }
        let done = self.starting.partition_point(|(seq, ..)| *seq <= through);
        self.starting.drain(..done).map(|(_, call_id, through)| (call_id, through)).collect()
    }

    /// Answers a context read for an LLM request once every record so far is on disk (at once
    /// if it is already).
    pub(crate) fn answer_read(&mut self, read: ContextRead) {
        let through = self.next_seq - 1;
        match through <= self.durable {
            true => drop(read.0.send(read.1)),
            false => self.reads.push((through, read)),
        }
    }

    /// Flushes, then waits (at most [`FLUSH_TIMEOUT`]) for the writer to store every batch.
    pub(crate) async fn finish(&mut self) {
        let _ = self.flush();
        self.tx = None;
        if let Some(writer) = self.writer.take()
            && tokio::time::timeout(FLUSH_TIMEOUT, writer).await.is_err()
        {
            tracing::warn!("the store took over {FLUSH_TIMEOUT:?} to write a closed session");
        }
    }
}

/// A context read for an LLM request: where to answer, and the answer.
pub(crate) type ContextRead = (RpcReplyPort<Option<Arc<ChatContext>>>, Option<Arc<ChatContext>>);

/// The record of `fact`, in the journal's own format: only what a resume reads.
fn record_of(fact: Fact<'_>) -> Option<Record> {
    let record = match fact {
        Fact::Committed { agent, items, .. } => Record::ItemsCommitted {
            agent: agent.to_string(),
            items: items.iter().map(|item| ChatItem::clone(item)).collect(),
        },
        Fact::AgentEntered { item } => Record::AgentEntered { item: ChatItem::clone(item) },
        Fact::HistorySeeded { agent, items } => {
            Record::ItemsCommitted { agent: agent.to_string(), items: items.to_vec() }
        }
        Fact::PairMoved { from, to, update_id } => Record::PairMoved {
            from: from.to_string(),
            to: to.to_string(),
            update_id: update_id.to_string(),
        },
        // A call run again after a resume: its start is in the journal (the resume kept it).
        Fact::CallStarted { resumed: true, .. } => return None,
        Fact::CallStarted { call, cancellable, .. } => {
            Record::CallStarted { call: colloquy_model::FunctionCall::clone(call), cancellable }
        }
        Fact::CallEnded { call_id } => Record::CallEnded { call_id: call_id.to_string() },
        Fact::CallWaiting { call_id } => Record::CallWaiting { call_id: call_id.to_string() },
        Fact::ResultRemembered { key, result } => Record::ResultRemembered {
            key: key.to_string(),
            output: result.output.clone(),
            reply_required: result.reply_required,
            message: result.message.clone(),
            until_unix_ms: result.until_unix_ms,
        },
        Fact::CallLetThrough { call_id } => Record::CallLetThrough { call_id: call_id.to_string() },
        Fact::ReplyAwaited { update_id } => {
            Record::ReplyAwaited { update_id: update_id.to_string() }
        }
        Fact::RepliesTaken { update_ids } => {
            Record::RepliesTaken { update_ids: update_ids.to_vec() }
        }
        // A suspended session stays open in its store: it resumes.
        Fact::CloseBegan { reason } if reason == CloseReason::Suspended.name() => return None,
        Fact::CloseBegan { reason } => Record::CloseBegan { reason: reason.to_string() },
        Fact::Resumed { in_doubt } => Record::Resumed {
            in_doubt: in_doubt
                .iter()
                .map(|c| CallInDoubtRecord::new(&c.call_id, &c.name, c.outcome.as_str()))
                .collect(),
        },
        _ => return None,
    };
    Some(record)
}
