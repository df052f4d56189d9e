//! The session's journal on its way to the store (docs/durability.md): each fact a resume
//! needs becomes a [`Record`], gathered per mailbox turn and handed to a writer task that
//! appends each batch to the store, in order, off the Session's task.
//!
//! Handles only: the batch being gathered and the writer's channel, which is bounded
//! ([`WRITES_IN_FLIGHT`] batches): a store that falls that far behind fails the session
//! instead of holding its mailbox.

use std::sync::Arc;
use std::time::Duration;

use colloquy_model::{ChatItem, CloseReason};
use colloquy_store::{CallInDoubtRecord, Entry, Record, SessionStore};
use ractor::ActorRef;
use tokio::sync::mpsc;

use super::fact::Fact;
use crate::messages::{SessionMsg, TimerMsg};

/// Batches a session may have on their way to the store; one more fails the session
/// (`store_failed`) rather than wait.
pub(crate) const WRITES_IN_FLIGHT: usize = 256;

/// How long a closing session waits for its last batches to reach the store.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct JournalOut {
    batch: Vec<Entry>,
    next_seq: u64,
    tx: Option<mpsc::Sender<Vec<Entry>>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl JournalOut {
    /// A journal for session `id` that continues after entry `last_seq`, written to `store` by
    /// a task that tells `session` when the store fails.
    pub(crate) fn spawn(
        store: Arc<dyn SessionStore>,
        id: Arc<str>,
        last_seq: u64,
        session: ActorRef<SessionMsg>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<Entry>>(WRITES_IN_FLIGHT);
        let writer = tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                let (store, id) = (Arc::clone(&store), Arc::clone(&id));
                let written = tokio::task::spawn_blocking(move || store.append(&id, &batch)).await;
                let failed = match written {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => format!("the store's writer stopped: {e}"),
                };
                let _ = session.cast(TimerMsg::StoreFailed(failed).into());
                return;
            }
        });
        Self { batch: Vec::new(), next_seq: last_seq + 1, tx: Some(tx), writer: Some(writer) }
    }

    /// Records `fact` (decided `at_ms` into the session), if a resume needs it.
    pub(crate) fn record(&mut self, fact: Fact<'_>, at_ms: u64) {
        let Some(record) = record_of(fact) else { return };
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

/// The record of `fact`, in the journal's own format: only what a resume reads.
fn record_of(fact: Fact<'_>) -> Option<Record> {
    let record = match fact {
        Fact::Committed { agent, items, .. } => Record::ItemsCommitted {
            agent: agent.to_string(),
            items: items.iter().map(|item| ChatItem::clone(item)).collect(),
        },
        Fact::AgentEntered { item } => Record::AgentEntered { item: ChatItem::clone(item) },
        Fact::PairMoved { from, to, update_id } => Record::PairMoved {
            from: from.to_string(),
            to: to.to_string(),
            update_id: update_id.to_string(),
        },
        Fact::CallStarted { call, cancellable, .. } => {
            Record::CallStarted { call: colloquy_model::FunctionCall::clone(call), cancellable }
        }
        Fact::CallEnded { call_id } => Record::CallEnded { call_id: call_id.to_string() },
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
