//! [`RemoteEvents`]: a session's events read from the events stream by an ordered consumer
//! filtered to the session's subject, from a cursor on. A message holds one or more events (a
//! node sends the events ready at once together); each carries its index in the session, by
//! which the reader drops what it handed on already and tells a gap. After a reconnect, or if
//! the consumer fails, it is made again after the last message read (the server may have lost
//! it, and the library takes seconds to notice), so a reader never sees a gap or a duplicate.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::stream::Stream as JsStream;
use colloquy_model::{EventKind, SessionEvent};
use colloquy_protocol::EventFrame;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use super::loss::Tracked;
use super::moves;
use super::shared::ClusterInner;
use crate::error::ClusterError;
use crate::names;
use crate::wire::Marker;

/// How long one pull waits on the server: also how soon the consumer notices a restarted
/// server (its idle heartbeat is half of it).
const PULL_EXPIRES: Duration = Duration::from_secs(2);
/// The pause before a failed consumer is made again.
const REOPEN_DELAY: Duration = Duration::from_millis(250);
/// Events read ahead of the reader.
const READ_AHEAD: usize = 256;

/// One event of a remote session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RemoteEvent {
    /// The sequence in the events stream of the message that holds it (events sent together
    /// share one). It grows, with gaps where other sessions' events sit.
    pub seq: u64,
    /// Its number in the session, 1, 2, 3… with no gap.
    pub index: u64,
    /// The event.
    pub event: SessionEvent,
}

impl RemoteEvent {
    /// Where a reader that saw this event resumes
    /// ([`RemoteSession::subscribe_from`](super::RemoteSession::subscribe_from)).
    pub fn cursor(&self) -> EventCursor {
        EventCursor { seq: self.seq, index: self.index }
    }
}

/// A place in a session's events to resume after: the last event a reader saw, kept across a
/// reconnect or a restart (it is plain data: store it as JSON). [`EventCursor::START`] is
/// before the first event.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct EventCursor {
    /// The stream sequence of the message that held the event.
    pub seq: u64,
    /// The event's index in the session.
    pub index: u64,
}

impl EventCursor {
    /// Before the session's first event.
    pub const START: Self = Self { seq: 0, index: 0 };
}

/// A remote session's events, in order. `recv` gives `None` after `session_closed`; an
/// `Err` item says events were lost to the stream's retention, and the stream goes on after
/// it, except [`ClusterError::NodeLost`]: the `x_node_lost` marker a host wrote when it found
/// the session's node lost, the last item if the session could not move
/// (docs/cluster.md#failure). A session that moves goes on in the same stream, past its
/// marker, with `x_session_moved` (docs/cluster.md#moves). A message on the
/// session's subject that holds neither events nor a marker is skipped with a warning in the
/// log; if it stood for events, the next event's index shows them as lost.
#[derive(Debug)]
pub struct RemoteEvents {
    rx: mpsc::Receiver<Result<RemoteEvent, ClusterError>>,
    reader: tokio::task::AbortHandle,
}

impl Drop for RemoteEvents {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl RemoteEvents {
    /// Reads session `id`'s events after `after`: from the message that held it on, skipping
    /// the events of that message up to it.
    pub(crate) async fn open(
        inner: &Arc<ClusterInner>,
        tracked: Arc<Tracked>,
        after: EventCursor,
    ) -> Result<Self, ClusterError> {
        let backend = &inner.backend;
        let id = tracked.id.clone();
        let subject = names::events_subject(&id);
        let mut connections = backend.connections.clone();
        connections.borrow_and_update();
        let stream = &backend.events;
        let last_seq = after.seq.saturating_sub(1);
        let messages = consumer(stream, &subject, last_seq).await?;
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        let reader = Reader {
            stream: stream.clone(),
            subject,
            session: id,
            last_seq,
            next_index: after.index + 1,
            tracked,
            inner: Arc::downgrade(inner),
            connections,
            tx,
        };
        let reader = tokio::spawn(reader.run(messages)).abort_handle();
        Ok(Self { rx, reader })
    }

    /// The next event; `None` once the session has closed and every event was read.
    pub async fn recv(&mut self) -> Option<Result<RemoteEvent, ClusterError>> {
        self.rx.recv().await
    }
}

impl futures_core::Stream for RemoteEvents {
    type Item = Result<RemoteEvent, ClusterError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

type Messages = pull::Ordered;

/// The frames of one message: a JSON array of them, or one alone (as nodes before batching
/// sent them).
fn frames(payload: &[u8]) -> Result<Vec<EventFrame>, colloquy_protocol::ProtocolError> {
    if payload.first() == Some(&b'[') {
        serde_json::from_slice(payload).map_err(|e| {
            colloquy_protocol::ProtocolError::new(
                colloquy_protocol::ErrorKind::BadReply,
                format!("unreadable events: {e}"),
            )
        })
    } else {
        EventFrame::decode(payload).map(|frame| vec![frame])
    }
}

async fn consumer(stream: &JsStream, subject: &str, after: u64) -> Result<Messages, ClusterError> {
    let deliver_policy = match after {
        0 => DeliverPolicy::All,
        seq => DeliverPolicy::ByStartSequence { start_sequence: seq + 1 },
    };
    let config = pull::OrderedConfig {
        filter_subject: subject.to_owned(),
        deliver_policy,
        // The default (30 s) leaves a consumer blind for ~15 s after a server restart.
        max_expires: PULL_EXPIRES,
        ..Default::default()
    };
    let consumer = stream.create_consumer(config).await.map_err(ClusterError::nats)?;
    consumer.messages().await.map_err(ClusterError::nats)
}

/// The task behind a [`RemoteEvents`].
struct Reader {
    stream: JsStream,
    subject: String,
    session: String,
    /// The stream sequence of the last message read.
    last_seq: u64,
    /// The index the next event should have: lower ones were handed on.
    next_index: u64,
    /// Where the session runs, as the reader's host knows it: an `x_node_lost` marker of
    /// another placement is about a node the session left.
    tracked: Arc<Tracked>,
    /// The host's cluster, told of a loss the reader meets first.
    inner: Weak<ClusterInner>,
    connections: watch::Receiver<u64>,
    tx: mpsc::Sender<Result<RemoteEvent, ClusterError>>,
}

impl Reader {
    async fn run(mut self, mut messages: Messages) {
        loop {
            let next = tokio::select! {
                biased;
                changed = self.connections.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    messages = self.reopen().await;
                    continue;
                }
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    let Ok(info) = message.info() else { continue };
                    let seq = info.stream_sequence;
                    if seq <= self.last_seq {
                        continue;
                    }
                    self.last_seq = seq;
                    match frames(&message.payload) {
                        Ok(frames) => {
                            for frame in frames {
                                if !self.hand_on(seq, frame).await {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            if let Some(marker) = Marker::decode(&message.payload) {
                                if self.moved_on(marker).await {
                                    continue;
                                }
                                return;
                            }
                            // Not the nodes' (anyone allowed to publish on the subject could
                            // have): skipped, so it costs no reader its stream. Events it
                            // stood for show as a gap at the next index.
                            tracing::warn!(
                                session = %self.session, seq, error = %e.message,
                                "an unreadable message among the session's events: skipped"
                            );
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(session = %self.session, error = %e, "event consumer failed");
                    messages = self.reopen().await;
                }
                None => messages = self.reopen().await,
            }
        }
    }

    /// Hands one event on (after a gap error if indices were skipped; not at all if it was
    /// handed on already); false once the reader is gone or the session has closed.
    async fn hand_on(&mut self, seq: u64, frame: EventFrame) -> bool {
        if frame.index < self.next_index {
            return true;
        }
        if frame.index > self.next_index {
            let lost = ClusterError::EventsLost {
                session: self.session.clone(),
                first: self.next_index,
                last: frame.index - 1,
            };
            if self.tx.send(Err(lost)).await.is_err() {
                return false;
            }
        }
        self.next_index = frame.index + 1;
        let closed = matches!(frame.event.kind, EventKind::SessionClosed { .. });
        let event = RemoteEvent { seq, index: frame.index, event: frame.event };
        self.tx.send(Ok(event)).await.is_ok() && !closed
    }

    /// Whether the reader goes on past an `x_node_lost` marker: it concerns a placement the
    /// session left, or the session moved since (the reader waits for the move). If the
    /// session was lost with that node, the reader hands `NodeLost` on and is done.
    async fn moved_on(&mut self, marker: Marker) -> bool {
        let Marker::NodeLost { node, boot_id, lease, .. } = marker;
        let placement = self.tracked.placement();
        if (&node, &boot_id, lease) != (&placement.node, &placement.boot_id, placement.lease) {
            return true;
        }
        // The reader heard of the loss first.
        if self.tracked.lose(&placement) {
            let lost = vec![(Arc::clone(&self.tracked), placement)];
            match self.inner.upgrade() {
                Some(inner) => moves::found_lost(&inner, lost),
                None => drop(self.tracked.mark_lost()),
            }
        }
        if self.tracked.settled().await.is_some() {
            return true;
        }
        let _ = self.tx.send(Err(ClusterError::NodeLost { node })).await;
        false
    }

    /// A new consumer after the last event read, tried until the server gives one.
    async fn reopen(&mut self) -> Messages {
        loop {
            tokio::time::sleep(REOPEN_DELAY).await;
            self.connections.borrow_and_update();
            match consumer(&self.stream, &self.subject, self.last_seq).await {
                Ok(messages) => return messages,
                Err(e) => tracing::debug!(session = %self.session, error = %e, "cannot reopen"),
            }
        }
    }
}
