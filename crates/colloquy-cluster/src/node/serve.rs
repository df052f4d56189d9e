//! Serving one session of the node: its commands (NATS requests on its command subject, each
//! run by the edge's `execute` in a task of its own, so a long `wait_for_idle` holds no
//! other command back; at most `max_in_flight` at once, the rest answered `busy`; one with an
//! id runs once per id: docs/cluster.md#commands) and its
//! events (published to the events stream in order, numbered from 1, the events ready at once
//! in one message, retried until stored for at most `event_timeout`). The session leaves the node once its last event is
//! stored or given up.
//!
//! Nothing over the server's `max_payload` is sent: such an event travels as an `error` event
//! in its place (same index, so readers see no gap), such a reply as a `too_large` error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::message::PublishMessage;
use colloquy_actors::{EventStream, SessionHandle};
use colloquy_edge::execute;
use colloquy_edge::hosting::InFlight;
use colloquy_model::{CloseReason, ErrorSource, EventKind, SessionEvent};
use colloquy_protocol::{ErrorKind, EventFrame, ProtocolError, Reply, Request};
use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};

use super::shared::{EVENTS_UNSTORED, NodeShared, Served};
use super::{fence, hosts};
use crate::error::ClusterError;
use crate::names;
use crate::nats::{HEADROOM, payload_limit, store};
use crate::wire::SessionRecord;

/// The most events one message carries.
const MAX_BATCH: usize = 64;

/// The longest pause between two attempts to publish an event while NATS is away.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// How a node serves a session it starts or resumes.
pub(super) struct Serving<'a> {
    /// The agent's name.
    pub(super) agent: &'a str,
    /// The node's lease.
    pub(super) lease: u64,
    /// The host that asked, which holds the session.
    pub(super) host: Option<&'a str>,
    /// The index of the session's last event already stored (0 for a new session): a resumed
    /// session's events are numbered on from it.
    pub(super) after: u64,
    /// The node a resumed session ran on: its `x_session_resumed` is published as
    /// `x_session_moved` from there to here.
    pub(super) moved_from: Option<String>,
}

/// Records the session, subscribes to its commands and starts publishing its events. Once this
/// returns, a host's commands reach the session. Returns the revision of its record.
pub(super) async fn start(
    shared: &Arc<NodeShared>,
    session: SessionHandle,
    events: EventStream,
    serving: Serving<'_>,
) -> Result<u64, ClusterError> {
    let Serving { agent, lease, host, after, moved_from } = serving;
    let id = session.id().to_owned();
    let record = SessionRecord {
        session_id: id.clone(),
        node: shared.name.clone(),
        boot_id: shared.boot_id.clone(),
        lease,
        agent: agent.to_owned(),
        lost: false,
        durable: shared.config.store.is_some(),
    };
    let body = serde_json::to_vec(&record).unwrap_or_default();
    let revision = shared
        .backend
        .sessions
        .put(names::session_key(&id), body.into())
        .await
        .map_err(ClusterError::nats)?;
    let commands = shared
        .backend
        .client
        .subscribe(names::command_subject(&id))
        .await
        .map_err(ClusterError::nats)?;
    let (ended, on_end) = oneshot::channel();
    let serving =
        tokio::spawn(serve_commands(Arc::clone(shared), session.clone(), commands, on_end));
    let moving = Arc::new(AtomicBool::new(false));
    let (published, on_published) = watch::channel(false);
    let publisher = Publisher {
        shared: Arc::clone(shared),
        session: session.clone(),
        id,
        after,
        moved_from,
        moving: Arc::clone(&moving),
        published,
    };
    let publishing = tokio::spawn(publisher.run(events, ended));
    let tasks = vec![serving.abort_handle(), publishing.abort_handle()];
    let agent = agent.to_owned();
    let served = Served { tasks, lease, agent, moving, published: on_published };
    shared.add_session(session.clone(), served);
    if let Some(host) = host {
        hosts::hold(shared, session.id(), host);
    }
    // A fence between the admission and now did not see this session.
    if shared.is_fenced() {
        fence::stop(shared, shared.remove_session(session.id()).into_iter().collect());
    }
    Ok(revision)
}

/// Answers each command until the session has ended; then unsubscribes by draining, so a
/// command already on its way is still answered (`closed`) rather than lost to a timeout.
async fn serve_commands(
    shared: Arc<NodeShared>,
    session: SessionHandle,
    mut commands: async_nats::Subscriber,
    mut ended: oneshot::Receiver<()>,
) {
    let client = shared.backend.client.clone();
    let in_flight = InFlight::new(shared.config.max_in_flight, "this session");
    let max_payload = payload_limit(&client);
    let mut draining = false;
    loop {
        let message = tokio::select! {
            biased;
            _ = &mut ended, if !draining => {
                draining = true;
                if commands.drain().await.is_err() {
                    return;
                }
                continue;
            }
            message = commands.next() => message,
        };
        let Some(message) = message else { return };
        // A node back from a stall runs nothing its hosts may have given up on.
        if !shared.holds_lease() {
            fence::fence(&shared, "a command came after its lease lapsed");
            return;
        }
        let Some(reply_to) = message.reply else { continue };
        if let Some(host) = message.headers.as_ref().and_then(|h| h.get(names::HOST_HEADER)) {
            hosts::hold(&shared, session.id(), host.as_str());
        }
        let permit = match in_flight.admit() {
            Ok(permit) => permit,
            Err(busy) => {
                let answer = Reply::Error(busy).encode().into();
                if let Err(e) = client.publish(reply_to, answer).await {
                    tracing::warn!(session = %session.id(), error = %e, "cannot answer a command");
                }
                continue;
            }
        };
        // Run once per id, across a move too: the session journals the ids it took.
        let session = match message.headers.as_ref().and_then(|h| h.get(names::COMMAND_HEADER)) {
            Some(id) => session.with_command_id(id.as_str()),
            None => session.clone(),
        };
        let client = client.clone();
        tokio::spawn(async move {
            let reply = match Request::decode(&message.payload) {
                Ok(request) => execute(&session, request).await,
                Err(e) => Reply::Error(e),
            };
            drop(permit);
            let mut body = reply.encode();
            if body.len() > max_payload {
                body = fit(session.id(), reply, body.len(), max_payload);
            }
            if let Err(e) = client.publish(reply_to, body.into()).await {
                tracing::warn!(session = %session.id(), error = %e, "cannot answer a command");
            }
        });
    }
}

/// A reply of `size` bytes, over `max`, as one that fits. A close's keeps the newest items of
/// the final history that fit: the session did close as asked, which is what its host must
/// hear (the whole history is in its events). Any other becomes a `too_large` error.
fn fit(session: &str, reply: Reply, size: usize, max: usize) -> Vec<u8> {
    let Reply::Closed { mut history } = reply else {
        let message = format!(
            "the reply is {size} bytes, over the NATS server's max_payload ({} bytes)",
            max + HEADROOM
        );
        return Reply::Error(ProtocolError::new(ErrorKind::TooLarge, message)).encode();
    };
    let all = history.len();
    let mut room = max.saturating_sub(Reply::Closed { history: Vec::new() }.encode().len());
    let mut kept = 0;
    for item in history.iter().rev() {
        // Its JSON and the comma before it.
        let len = serde_json::to_vec(item).map_or(usize::MAX, |b| b.len()).saturating_add(1);
        if len > room {
            break;
        }
        room -= len;
        kept += 1;
    }
    history.drain(..all - kept);
    tracing::warn!(
        session,
        kept,
        of = all,
        "the final history is over the NATS server's max_payload: the close's reply carries \
         its newest items"
    );
    Reply::Closed { history }.encode()
}

/// Publishes one session's events.
struct Publisher {
    shared: Arc<NodeShared>,
    session: SessionHandle,
    id: String,
    /// The index the session's events number on from.
    after: u64,
    /// The node it moved from, until its `x_session_moved` is published.
    moved_from: Option<String>,
    /// Set when a drain hands it over: it leaves this node, but does not end.
    moving: Arc<AtomicBool>,
    /// Told once the last event is stored.
    published: watch::Sender<bool>,
}

impl Publisher {
    /// Publishes every event of the session, then forgets the session. The events ready when a
    /// message leaves travel in it together (a burst is one message and one acknowledgement;
    /// a lone event leaves at once). A message that cannot be stored within the node's
    /// `event_timeout` closes the session ([`EVENTS_UNSTORED`]) and the rest are dropped,
    /// counted in a log line.
    async fn run(mut self, mut events: EventStream, ended: oneshot::Sender<()>) {
        let subject = names::events_subject(&self.id);
        let max_payload = payload_limit(&self.shared.backend.client);
        let timeout = self.shared.config.event_timeout;
        let (mut index, mut dropped, mut closed) = (self.after, 0_u64, None::<String>);
        while let Some(first) = events.recv().await {
            let mut ready = vec![first];
            while ready.len() < MAX_BATCH
                && let Some(event) = events.try_recv()
            {
                ready.push(event);
            }
            // Handed over: its suspend is no end (`x_session_moved` follows from its new node).
            if self.moving.load(Ordering::Acquire) {
                ready.retain(|e| !matches!(e.kind, EventKind::SessionClosed { .. }));
                if ready.is_empty() {
                    continue;
                }
            }
            if let Some(reason) = ready.iter().find_map(|e| match &e.kind {
                EventKind::SessionClosed { reason } => Some(reason.clone()),
                _ => None,
            }) {
                closed = Some(reason);
            }
            if dropped > 0 {
                dropped += ready.len() as u64;
                continue;
            }
            let frames: Vec<Vec<u8>> = ready
                .into_iter()
                .map(|event| {
                    let event = self.moved(event);
                    index += 1;
                    let frame = EventFrame { session_id: self.id.clone(), index, event };
                    self.fit(frame, max_payload)
                })
                .collect();
            let first_index = index + 1 - frames.len() as u64;
            for (at, body) in batches(&frames, max_payload) {
                let id = format!("{}:{}", self.id, first_index + at as u64);
                let store = publish(&self.shared, &subject, &id, body);
                let stored = tokio::time::timeout(timeout, store).await;
                if stored == Ok(Err(Fenced)) {
                    // Stopped by the fence: nothing more of this session leaves the node.
                    return;
                }
                if stored.is_err() {
                    tracing::error!(
                        session = %self.id, index = first_index + at as u64, ?timeout,
                        "events could not be stored: closing the session, dropping its others"
                    );
                    dropped = (frames.len() - at) as u64;
                    self.close(EVENTS_UNSTORED);
                    break;
                }
            }
        }
        if dropped > 0 {
            tracing::warn!(session = %self.id, dropped, "events of the session were not published");
        }
        // A stream that ended before `session_closed` fell behind by `max_unread_events`: a
        // session nobody can follow any more does not run on.
        if self.moving.load(Ordering::Acquire) {
            // Its record and journal go with it to its next node.
        } else {
            match closed {
                None => self.close(EVENTS_UNSTORED),
                Some(reason) => self.forget_journal(&reason),
            }
            let key = names::session_key(&self.id);
            if let Err(e) = self.shared.backend.sessions.delete(key).await {
                tracing::warn!(session = %self.id, error = %e, "cannot remove the session's record");
            }
        }
        let _ = ended.send(());
        self.published.send_replace(true);
        self.shared.remove_session(&self.id);
    }

    /// The event as published: a moved session's `x_session_resumed` says where from.
    fn moved(&mut self, event: SessionEvent) -> SessionEvent {
        let SessionEvent { at_ms, kind: EventKind::SessionResumed { in_doubt } } = event else {
            return event;
        };
        let Some(from) = self.moved_from.take() else {
            return SessionEvent { at_ms, kind: EventKind::SessionResumed { in_doubt } };
        };
        let to = self.shared.name.clone();
        SessionEvent { at_ms, kind: EventKind::SessionMoved { from, to, calls_in_doubt: in_doubt } }
    }

    /// The frame's bytes, or those of an `error` event in its place if it is over `max`.
    fn fit(&self, frame: EventFrame, max: usize) -> Vec<u8> {
        let body = frame.encode();
        if body.len() + 2 <= max {
            return body;
        }
        let message = format!(
            "a {:?} event of {} bytes is over the NATS server's max_payload ({} bytes): \
             it was not published",
            frame.event.kind.event_type(),
            body.len(),
            max + HEADROOM
        );
        tracing::warn!(session = %self.id, index = frame.index, "{message}");
        let at_ms = frame.event.at_ms;
        let kind = EventKind::error(ErrorSource::Session, message);
        EventFrame { event: SessionEvent { at_ms, kind }, ..frame }.encode()
    }

    /// Deletes the journal of a session that closed for good with `reason`, if the node keeps
    /// journals on the server (a suspended session, or one another node took over, keeps its
    /// own; docs/cluster.md#moves).
    fn forget_journal(&self, reason: &str) {
        let kept = [CloseReason::Suspended, CloseReason::LeaseLost, CloseReason::StoreFailed];
        if !self.shared.config.forgets_closed() || kept.iter().any(|r| r.name() == reason) {
            return;
        }
        let Some(store) = self.shared.config.store.clone() else { return };
        let id = self.id.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.delete(&id) {
                tracing::warn!(session = %id, error = %e, "cannot delete the journal of a closed session");
            }
        });
    }

    fn close(&self, reason: &'static str) {
        let session = self.session.clone();
        tokio::spawn(async move { session.close_with_reason(reason).await });
    }
}

/// The encoded frames as messages, each a JSON array of consecutive frames under `max` bytes
/// (every frame fits alone: [`Publisher::fit`]), with the position of its first frame.
fn batches(frames: &[Vec<u8>], max: usize) -> Vec<(usize, Vec<u8>)> {
    let mut out: Vec<(usize, Vec<u8>)> = Vec::new();
    for (at, frame) in frames.iter().enumerate() {
        match out.last_mut() {
            Some((_, body)) if body.len() + 1 + frame.len() <= max => {
                body.pop();
                body.push(b',');
                body.extend_from_slice(frame);
                body.push(b']');
            }
            _ => {
                let mut body = Vec::with_capacity(frame.len() + 2);
                body.push(b'[');
                body.extend_from_slice(frame);
                body.push(b']');
                out.push((at, body));
            }
        }
    }
    out
}

/// The node lost its lease: the message was not sent.
#[derive(Debug, PartialEq)]
struct Fenced;

/// Publishes one event and waits until the stream has stored it, retrying while NATS is away
/// or refuses it (the caller bounds the wait); the event's id makes a retry after a lost
/// acknowledgement a no-op. Each attempt first checks the node's lease: a node back from a
/// stall past it fences itself instead of publishing (docs/cluster.md#fencing).
async fn publish(
    shared: &Arc<NodeShared>,
    subject: &str,
    id: &str,
    body: Vec<u8>,
) -> Result<(), Fenced> {
    let body = bytes::Bytes::from(body);
    let mut delay = Duration::from_millis(50);
    loop {
        if !shared.holds_lease() {
            fence::fence(shared, "an event was to be published after its lease lapsed");
            return Err(Fenced);
        }
        let message = PublishMessage::build().payload(body.clone()).message_id(id);
        match store(&shared.backend.js, subject.to_owned(), message).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::debug!(event = id, error = %e, "event not stored yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            }
        }
    }
}

/// The index of session `id`'s last event in the events stream (0 if it has none): read to
/// its end, each message's frames (markers hold none).
pub(super) async fn last_index(shared: &NodeShared, id: &str) -> Result<u64, ClusterError> {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let subject = names::events_subject(id);
    let stream = &shared.backend.events;
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(_) => {}
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(0),
        // Numbering from 1 again would collide with the stored events: the resume fails.
        Err(e) => return Err(ClusterError::nats(e)),
    }
    let config = pull::OrderedConfig {
        filter_subject: subject,
        deliver_policy: DeliverPolicy::All,
        ..Default::default()
    };
    let consumer = stream.create_consumer(config).await.map_err(ClusterError::nats)?;
    let mut messages = consumer.messages().await.map_err(ClusterError::nats)?;
    let mut last = 0;
    loop {
        let next = tokio::time::timeout(shared.config.event_timeout, messages.next()).await;
        let message = match next {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(ClusterError::nats(e)),
            Ok(None) | Err(_) => return Err(ClusterError::nats("the events stopped short")),
        };
        if let Ok(frames) = serde_json::from_slice::<Vec<EventFrame>>(&message.payload) {
            last = frames.iter().map(|f| f.index).fold(last, u64::max);
        }
        if message.info().map_err(ClusterError::nats)?.pending == 0 {
            return Ok(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::batches;

    #[test]
    fn frames_are_grouped_in_order_into_json_arrays_under_the_limit() {
        let frames: Vec<Vec<u8>> = ["{\"a\":1}", "{\"b\":22}", "{\"c\":333}"]
            .iter()
            .map(|f| f.as_bytes().to_vec())
            .collect();
        let all = batches(&frames, 1024);
        assert_eq!(all.len(), 1);
        let parsed: serde_json::Value = serde_json::from_slice(&all[0].1).expect("JSON");
        assert_eq!(parsed, serde_json::json!([{"a": 1}, {"b": 22}, {"c": 333}]));
        // `[{"a":1},{"b":22}]` is 18 bytes: the third starts a message of its own.
        let split = batches(&frames, 18);
        let starts: Vec<usize> = split.iter().map(|(at, _)| *at).collect();
        assert_eq!(starts, [0, 2]);
        assert!(split.iter().all(|(_, body)| body.len() <= 18));
        assert_eq!(batches(&frames, 9).len(), 3, "each alone when no two fit");
    }
}
