//! Event fan-out: the one place a session's events leave it, so every subscriber sees them in
//! the order the Session's mailbox received them.
//!
//! Invariant: a lossless subscriber gets every event its filter passes, in order, until it
//! leaves `max_unread` events unread; then it gets one `x_stream_overflowed` item and is
//! dropped, and nobody else is slowed down. A subscriber that went away is dropped when its
//! next event comes. Event times never go backwards (docs/decisions.md#event-times).

use colloquy_core::{EventKind, EventType, SessionEvent};
use tokio::sync::broadcast;

use crate::clock::SessionClock;
use crate::protocol::Subscriber;

pub(crate) struct Fanout {
    subscribers: Vec<Subscriber>,
    broadcasts: Vec<broadcast::Sender<SessionEvent>>,
    max_unread: usize,
    /// The latest event time sent: an emitter stamps its event before the Session's mailbox
    /// orders it, so a later event may carry an earlier stamp; it is raised to this.
    latest_ms: u64,
}

impl Fanout {
    pub fn new(subscribers: Vec<Subscriber>, max_unread: usize) -> Self {
        Self { subscribers, broadcasts: Vec::new(), max_unread, latest_ms: 0 }
    }

    pub fn subscribe(&mut self, subscriber: Subscriber) {
        self.subscribers.push(subscriber);
    }

    pub fn add_broadcast(&mut self, tx: broadcast::Sender<SessionEvent>) {
        self.broadcasts.push(tx);
    }

    /// Whether anyone listens to events of this type (an event nobody wants need not be
    /// built).
    pub fn wants(&self, event_type: EventType) -> bool {
        !self.broadcasts.is_empty()
            || self.subscribers.iter().any(|s| s.filter.contains(event_type))
    }

    /// Sends `event` to everyone who wants it: every recipient but the last gets a copy, the
    /// last one the event itself.
    pub fn send(&mut self, mut event: SessionEvent, session_id: &str, clock: &SessionClock) {
        event.at_ms = event.at_ms.max(self.latest_ms);
        self.latest_ms = event.at_ms;
        self.broadcasts.retain(|tx| tx.receiver_count() > 0);
        let event_type = event.kind.event_type();
        let wanted = self.subscribers.iter().filter(|s| s.filter.contains(event_type));
        let mut left = wanted.count() + self.broadcasts.len();
        let mut event = Some(event);
        let mut next = || {
            left = left.saturating_sub(1);
            if left == 0 { event.take() } else { event.clone() }
        };
        let limit = self.max_unread;
        self.subscribers.retain(|Subscriber { filter, tx }| {
            if !filter.contains(event_type) {
                return true;
            }
            let Some(event) = next() else { return true };
            if tx.max_capacity() - tx.capacity() < limit {
                return tx.try_send(event).is_ok();
            }
            tracing::warn!(session = %session_id, limit, "an event subscriber stopped reading: its stream is closed");
            let kind = EventKind::StreamOverflowed { unread: limit };
            let at_ms = clock.elapsed_ms().max(self.latest_ms);
            let _ = tx.try_send(SessionEvent { at_ms, kind });
            false
        });
        for tx in &self.broadcasts {
            if let Some(event) = next() {
                let _ = tx.send(event);
            }
        }
    }

    /// Ends every stream (the session closed).
    pub fn clear(&mut self) {
        self.subscribers.clear();
        self.broadcasts.clear();
    }
}
