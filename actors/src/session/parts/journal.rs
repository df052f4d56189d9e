//! The session's journal on its way to the store (docs/durability.md): each fact a resume
//! needs becomes a [`Record`], gathered per mailbox turn and handed to the store's writer,
//! which appends each batch to the store, in order, off the Session's task.
//!
//! A call's body and the model's next request are written ahead: the writer tells the Session
//! how far the journal is on disk (`TimerMsg::Stored`), and a call's body, or a context read
//! for an LLM request, waits until the records before it are there
//! (docs/durability.md#write-ahead).
//!
//! The store's writer holds the session's lease (docs/durability.md#leases): it renews it
//! and releases it after the last batch; a lease taken over fails the session (`lease_lost`),
//! as a store that fails does (`store_failed`).
//!
//! Handles only: the batch being gathered, the reads that wait, and the batches on their way,
//! at most [`WRITES_IN_FLIGHT`]: a store that falls that far behind fails the session instead
//! of holding its mailbox.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use colloquy_model::call_ids::derived_base;
use colloquy_model::{ChatContext, ChatItem, CloseReason};
use colloquy_store::{CallInDoubtRecord, Entry, Lease, Record, SessionStore};
use ractor::{ActorRef, RpcReplyPort};

use super::fact::Fact;
use crate::messages::{SessionMsg, TimerMsg};
use crate::support::store_writer::{JournalId, News, STOPPED, StoreWriter};

/// Batches a session may have on their way to the store; one more fails the session
/// (`store_failed`) rather than wait.
pub(crate) const WRITES_IN_FLIGHT: usize = 256;

/// How long a closing session waits for its last batches to reach the store.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// The last record of each batch on its way to the store.
    in_flight: VecDeque<u64>,
    /// Calls waiting for approval or a place under a cap (their `call_waiting` written, no
    /// `call_let_through` yet): their body has not begun.
    waiting: BTreeSet<String>,
    /// Calls a suspend left to the resume, their bodies never begun: their ends (and what
    /// the drain commits for them) are not written (docs/durability.md#suspend).
    held: BTreeSet<String>,
    writer: Option<(Arc<StoreWriter>, JournalId)>,
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

impl JournalOut {
    /// A journal that continues after entry `last_seq`, written by the store's writer, which
    /// renews the lease every third of its ttl, releases it once the journal is written, and
    /// tells `session` how far it is on disk, or that the store failed or the lease was
    /// taken over.
    pub(crate) fn spawn(durable: Durable, last_seq: u64, session: ActorRef<SessionMsg>) -> Self {
        let Durable { store, lease } = durable;
        let writer = StoreWriter::of(&store);
        let id = writer.open(
            lease,
            Box::new(move |news| {
                let message = match news {
                    News::Stored(through) => TimerMsg::Stored(through),
                    News::Failed(why) => TimerMsg::StoreFailed(why),
                    News::LeaseLost(why) => TimerMsg::LeaseLost(why),
                };
                let _ = session.cast(message.into());
            }),
        );
        let (batch, starting, reads, in_flight) =
            (Vec::new(), Vec::new(), Vec::new(), VecDeque::new());
        let (next_seq, writer) = (last_seq + 1, Some((writer, id)));
        let (waiting, held) = (BTreeSet::new(), BTreeSet::new());
        let durable = last_seq;
        Self { batch, next_seq, starting, reads, durable, in_flight, waiting, held, writer }
    }

    /// Records `fact` (decided `at_ms` into the session), if a resume needs it.
    pub(crate) fn record(&mut self, fact: Fact<'_>, at_ms: u64) {
        if matches!(fact, Fact::CloseBegan { reason } if reason == CloseReason::Suspended.name()) {
            return self.suspend(at_ms);
        }
        let Some(record) = record_of(fact).and_then(|r| self.unless_held(r)) else { return };
        match &record {
            Record::CallStarted { call, .. } => {
                self.starting.push((self.next_seq, call.call_id.clone(), false));
            }
            Record::CallWaiting { call_id } => {
                self.waiting.insert(call_id.clone());
            }
            // Its body waits for this record now, not its start's (which comes before it).
            Record::CallLetThrough { call_id } => {
                self.waiting.remove(call_id);
                self.starting.retain(|(_, id, _)| id != call_id);
                self.starting.push((self.next_seq, call_id.clone(), true));
            }
            Record::CallEnded { call_id } => {
                self.waiting.remove(call_id);
            }
            _ => {}
        }
        self.push(record, at_ms);
    }

    fn push(&mut self, record: Record, at_ms: u64) {
        self.batch.push(Entry::new(self.next_seq, at_ms, record));
        self.next_seq += 1;
    }

    /// A suspend began (docs/durability.md#suspend): the calls whose bodies have not begun —
    /// waiting for approval or a place, or for their start on disk — are left to the resume,
    /// as waiting, and the drain's end of them is not written. Those waiting for the disk
    /// never begin here now.
    fn suspend(&mut self, at_ms: u64) {
        for (_, call_id, _) in std::mem::take(&mut self.starting) {
            self.push(Record::CallWaiting { call_id: call_id.clone() }, at_ms);
            self.held.insert(call_id);
        }
        self.held.extend(std::mem::take(&mut self.waiting));
    }

    /// `record`, unless it ends a held call or commits what the drain answered it with; a held
    /// call let through after all (an approval that came first) runs, and is written again.
    fn unless_held(&mut self, record: Record) -> Option<Record> {
        if self.held.is_empty() {
            return Some(record);
        }
        let held = |id: &str| {
            self.held.contains(id) || derived_base(id).is_some_and(|b| self.held.contains(b))
        };
        match record {
            Record::CallLetThrough { call_id } => {
                self.held.remove(&call_id);
                Some(Record::CallLetThrough { call_id })
            }
            Record::CallEnded { call_id } if held(&call_id) => None,
            Record::ReplyAwaited { update_id } if held(&update_id) => None,
            Record::ItemsCommitted { agent, items } => {
                let of_held = |item: &ChatItem| match item {
                    ChatItem::FunctionCall(c) => held(&c.call_id),
                    ChatItem::FunctionCallOutput(o) => held(&o.call_id),
                    _ => false,
                };
                let items: Vec<_> = items.into_iter().filter(|i| !of_held(i)).collect();
                (!items.is_empty()).then_some(Record::ItemsCommitted { agent, items })
            }
            record => Some(record),
        }
    }

    /// Hands the mailbox turn's records to the writer; `Err` (why) if it cannot take them.
    pub(crate) fn flush(&mut self) -> Result<(), String> {
        let Some(last) = self.batch.last().map(|e| e.seq) else { return Ok(()) };
        let Some((writer, id)) = &self.writer else { return Err(STOPPED.into()) };
        if self.in_flight.len() >= WRITES_IN_FLIGHT {
            return Err(format!(
                "the store is {WRITES_IN_FLIGHT} writes behind the session: it cannot keep up"
            ));
        }
        writer.append(*id, std::mem::take(&mut self.batch))?;
        self.in_flight.push_back(last);
        Ok(())
    }

    /// The calls whose start is on disk now that the journal is through record `through`;
    /// the context reads that waited for it are answered.
    pub(crate) fn stored(&mut self, through: u64) -> Vec<(String, bool)> {
        self.durable = self.durable.max(through);
        while self.in_flight.front().is_some_and(|last| *last <= through) {
            self.in_flight.pop_front();
        }
        let ready = self.reads.partition_point(|(seq, _)| *seq <= through);
        for (_, (reply, context)) in self.reads.drain(..ready) {
            let _ = reply.send(context);
        }
        let done = self.starting.partition_point(|(seq, ..)| *seq <= through);
        self.starting.drain(..done).map(|(_, call_id, through)| (call_id, through)).collect()
    }

    /// The last record decided so far, if it is not on disk yet: what an output that follows
    /// from this mailbox turn's facts waits for.
    pub(crate) fn pending(&self) -> Option<u64> {
        let through = self.next_seq - 1;
        (through > self.durable).then_some(through)
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

    /// Flushes, then waits (at most [`FLUSH_TIMEOUT`]) for the writer to store every batch
    /// and release the lease.
    pub(crate) async fn finish(&mut self) {
        let _ = self.flush();
        if let Some((writer, id)) = self.writer.take()
            && tokio::time::timeout(FLUSH_TIMEOUT, writer.close(id)).await.is_err()
        {
            tracing::warn!("the store took over {FLUSH_TIMEOUT:?} to write a closed session");
        }
    }
}

/// A session stopped without its `post_stop` (its actor killed: a fenced node stops its
/// sessions so): its journal is closed all the same, so the writer renews its lease no more.
impl Drop for JournalOut {
    fn drop(&mut self) {
        if let Some((writer, id)) = self.writer.take() {
            writer.close_now(id);
        }
    }
}

/// A context read for an LLM request: where to answer, and the answer.
pub(crate) type ContextRead = (RpcReplyPort<Option<Arc<ChatContext>>>, Option<Arc<ChatContext>>);

/// The record of `fact`, in the journal's own format: only what a resume reads.
fn record_of(fact: Fact<'_>) -> Option<Record> {
    let record = match fact {
        Fact::Committed { agent, items, .. } => {
            Record::ItemsCommitted { agent: agent.to_string(), items: items.to_vec() }
        }
        Fact::AgentEntered { item } => Record::AgentEntered { item: Arc::clone(item) },
        Fact::HistorySeeded { agent, items } => Record::ItemsCommitted {
            agent: agent.to_string(),
            items: items.iter().cloned().map(Arc::new).collect(),
        },
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
        Fact::CommandTaken { id } => Record::CommandTaken { id: id.to_string() },
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
