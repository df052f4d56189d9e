//! Event fan-out: the one place a session's events leave it, so every subscriber sees them in
//! the order the Session's mailbox received them.
//!
//! Invariant: a lossless subscriber gets every event its filter passes, in order, until it
//! leaves `max_unread` events unread; then it gets one `x_stream_overflowed` item and is
//! dropped, and nobody else is slowed down. A subscriber that went away is dropped when its
//! next event comes. Event times never go backwards (docs/decisions.md#event-times).
//!
//! The agent's text deltas (`x_agent_text`) are built only while a subscriber asks for them:
//! the fan-out keeps [`TextWanted`] true exactly while one of its subscribers' filters passes
//! them (broadcasts get [`EventFilter::DEFAULT`], without them).
//!
//! Handles only: the subscribers' channels (an event is an output, not a fact; what an event
//! says about the session is applied as facts before it leaves, in `events.rs` above).

use colloquy_model::{EventFilter, EventKind, EventType, SessionEvent};
use tokio::sync::broadcast;

use crate::messages::{Subscriber, TextWanted};
use crate::support::clock::SessionClock;

pub(crate) struct Fanout {
    subscribers: Vec<Subscriber>,
    broadcasts: Vec<broadcast::Sender<SessionEvent>>,
    max_unread: usize,
    text_wanted: TextWanted,
    /// The latest event time sent: an emitter stamps its event before the Session's mailbox
    /// orders it, so a later event may carry an earlier stamp; it is raised to this.
    latest_ms: u64,
}

impl Fanout {
    pub(crate) fn new(
        subscribers: Vec<Subscriber>,
        max_unread: usize,
        text_wanted: TextWanted,
    ) -> Self {
        let fanout =
            Self { subscribers, broadcasts: Vec::new(), max_unread, text_wanted, latest_ms: 0 };
        fanout.refresh_text_wanted();
        fanout
    }

    pub(crate) fn subscribe(&mut self, subscriber: Subscriber) {
        self.subscribers.push(subscriber);
        self.refresh_text_wanted();
    }

    /// Tells the speeches whether anyone still wants the agent's text.
    fn refresh_text_wanted(&self) {
        let wanted = self.subscribers.iter().any(|s| s.filter.contains(EventType::AgentText));
        self.text_wanted.set(wanted);
    }

    pub(crate) fn add_broadcast(&mut self, tx: broadcast::Sender<SessionEvent>) {
        self.broadcasts.push(tx);
    }

    /// Whether anyone listens to events of this type (an event nobody wants need not be
    /// built).
    pub(crate) fn wants(&self, event_type: EventType) -> bool {
        (!self.broadcasts.is_empty() && EventFilter::DEFAULT.contains(event_type))
            || self.subscribers.iter().any(|s| s.filter.contains(event_type))
    }

    /// Sends `event` to everyone who wants it: every recipient but the last gets a copy, the
    /// last one the event itself.
    pub(crate) fn send(&mut self, mut event: SessionEvent, session_id: &str, clock: &SessionClock) {
        event.at_ms = event.at_ms.max(self.latest_ms);
        self.latest_ms = event.at_ms;
        self.broadcasts.retain(|tx| tx.receiver_count() > 0);
        let event_type = event.kind.event_type();
        let wanted = self.subscribers.iter().filter(|s| s.filter.contains(event_type));
        let broadcasts = match EventFilter::DEFAULT.contains(event_type) {
            true => self.broadcasts.len(),
            false => 0,
        };
        let mut left = wanted.count() + broadcasts;
        let subscribers = self.subscribers.len();
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
        if self.subscribers.len() != subscribers {
            self.refresh_text_wanted();
        }
        for tx in &self.broadcasts[..broadcasts] {
            if let Some(event) = next() {
                let _ = tx.send(event);
            }
        }
    }

    /// Ends every stream (the session closed).
    pub(crate) fn clear(&mut self) {
        self.subscribers.clear();
        self.broadcasts.clear();
        self.text_wanted.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn text() -> SessionEvent {
        let kind = EventKind::AgentText { speech_id: "s1".into(), step: 1, delta: "Hi".into() };
        SessionEvent { at_ms: 0, kind }
    }

    /// Speeches build text deltas exactly while a subscriber asks for them: not for the default
    /// filter or a broadcast, and no longer once the asking subscriber has gone.
    #[tokio::test]
    async fn text_is_wanted_only_while_a_subscriber_asks() {
        let clock = SessionClock::new(0, 20);
        let wanted = TextWanted::default();
        let (plain, _plain_rx) = mpsc::channel(16);
        let plain = Subscriber { filter: EventFilter::DEFAULT, tx: plain };
        let mut fanout = Fanout::new(vec![plain], 16, wanted.clone());
        fanout.add_broadcast(broadcast::channel(16).0);
        assert!(!wanted.get() && !fanout.wants(EventType::AgentText));

        let (asking, mut asking_rx) = mpsc::channel(16);
        fanout.subscribe(Subscriber { filter: EventFilter::ALL, tx: asking });
        assert!(wanted.get() && fanout.wants(EventType::AgentText));
        fanout.send(text(), "s", &clock);
        assert_eq!(asking_rx.try_recv().ok(), Some(text()));

        drop(asking_rx);
        fanout.send(text(), "s", &clock);
        assert!(!wanted.get(), "the subscriber that asked went away");
        fanout.subscribe(Subscriber { filter: EventFilter::agent_text(), tx: mpsc::channel(1).0 });
        assert!(wanted.get());
        fanout.clear();
        assert!(!wanted.get());
    }
}
