//! One WebSocket connection to one session. Three parts, so a slow socket holds nothing else
//! back: a writer task that alone writes to the socket, fed by two queues — the session's
//! events (at most [`Limits::max_unread_frames`]) and, with room of their own so a backlog of
//! events never crowds them out, the connection's replies, errors and pings (at most
//! [`CONTROL_FRAMES`]); a forwarder task that copies the session's events from its replay
//! buffer into the events queue, waiting for room for as long as the events it has yet to send
//! are still in the buffer; and this task, which reads the client's frames, runs each request in
//! a task of its own (at most [`Limits::max_in_flight`]) and queues the answers, and pings the
//! client every [`Limits::ping_interval`], dropping it once it has been silent for
//! [`Limits::client_timeout`]. A client is slow, and let go with `slow_client`, when the events
//! it has yet to read leave the buffer, or when an answer finds no room in its queue within
//! [`Limits::slow_client_grace`] (docs/protocol.md#limits).
//!
//! In process a reply also carries a watermark, the number of the last event its session had
//! emitted when it answered, and the writer holds it until it has written the events up to
//! there (docs/protocol.md#ordering).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use colloquy_protocol::{
    ClosingReason, ErrorCode, PROTOCOL_VERSION, Reply, Request, ServerError, ServerMessage,
};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Duration, Instant, MissedTickBehavior};

use crate::limits::Limits;
use crate::live::{Attached, Batch, Live};
use crate::registry::Registry;
use crate::sockets::SocketPlace;
use colloquy_edge::hosting::InFlight;

/// Frames the forwarder takes from the buffer at a time.
const BATCH: usize = 64;

/// Replies, errors and pings queued for one connection and not yet taken by its socket.
pub(crate) const CONTROL_FRAMES: usize = 64;

/// How long a reply waits for its watermark (1 s): the feeder answers at once unless the
/// session's events are ending, and past it the reply goes without one.
const MARK_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the answer to `close` waits for the session's last events to reach the buffer
/// (10 s: over a cluster they travel apart from the answer); past it, it goes as it is.
const CLOSED_TIMEOUT: Duration = Duration::from_secs(10);

/// A frame queued for the writer, with the event number that orders it: an event's own, the
/// watermark a reply waits for, or 0 for neither.
struct Queued {
    seq: u64,
    message: Message,
}

/// What a connection needs besides its session.
pub(crate) struct Context {
    pub(crate) limits: Limits,
    pub(crate) registry: Arc<Registry>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// The connection counted in its session until it ends.
    pub(crate) attached: Attached,
    /// Its place among the server's WebSockets, held until it ends.
    pub(crate) place: SocketPlace,
}

/// Serves one connection until the client leaves, the session ends, the client is too slow
/// or the server shuts down.
pub(crate) async fn run(socket: WebSocket, live: Arc<Live>, after: u64, cx: Context) {
    let Context { limits, registry, mut shutdown, attached: _attached, place: _place } = cx;
    let grace = limits.slow_client_grace;
    let (sink, mut stream) = socket.split();
    let (control, control_frames) = mpsc::channel(CONTROL_FRAMES);
    let (events, event_frames) = mpsc::channel(limits.max_unread_frames.max(1));
    // The greeting and a `gap` are queued before anything else can be: the writer takes the
    // control queue first, and neither the forwarder nor a request runs yet.
    let cursor = greet(&live, after, &control);
    let (finish, finished) = oneshot::channel();
    let queues =
        Queues { control: control_frames, events: event_frames, held: None, written: cursor };
    let writer = tokio::spawn(write(sink, queues, finished, limits.close_timeout));
    let mut forwarder = tokio::spawn(forward(Arc::clone(&live), cursor, events.clone()));
    let in_flight = InFlight::new(limits.max_in_flight, "this connection");
    let mut commands: JoinSet<(ServerMessage, Option<u64>)> = JoinSet::new();
    // A client whose network vanished sends no close: pings find it out.
    let every = limits.ping_interval.max(Duration::from_millis(1));
    let mut ping = tokio::time::interval_at(Instant::now() + every, every);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    let mut client_closed = false;
    let mut too_big = false;
    let reason = loop {
        tokio::select! {
            biased;
            () = stopping(&mut shutdown) => {
                // The sessions are closed by now: their last events reach the queue first.
                let _ = tokio::time::timeout(limits.close_timeout, &mut forwarder).await;
                break Some(ClosingReason::ServerShutdown);
            }
            reason = &mut forwarder => {
                let reason = reason.unwrap_or(Some(ClosingReason::SessionClosed));
                if reason == Some(ClosingReason::SessionClosed) {
                    // The answers to requests already sent (a `close` among them) go out
                    // after the session's last event: behind it in the events queue.
                    let wait = async {
                        while let Some(Ok((answer, _))) = commands.join_next().await {
                            if !offer(&events, answer, 0, grace).await {
                                return false;
                            }
                        }
                        true
                    };
                    let answered = tokio::time::timeout(limits.close_timeout, wait).await;
                    if answered == Ok(false) {
                        break Some(ClosingReason::SlowClient);
                    }
                }
                break reason;
            }
            Some(Ok((answer, mark))) = commands.join_next(), if !commands.is_empty() => {
                if !offer(&control, answer, mark.unwrap_or(0), grace).await {
                    break Some(ClosingReason::SlowClient);
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() >= limits.client_timeout {
                    break None;
                }
                // A full queue already holds frames the client has yet to read: this ping
                // would tell nothing more, and the client's silence is timed anyway.
                let _ = control.try_send(Queued { seq: 0, message: Message::Ping(Bytes::new()) });
            }
            frame = stream.next() => {
                heard = Instant::now();
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        let error = ServerError::new(
                            ErrorCode::BadRequest,
                            "binary frames are not read: send requests as text frames of JSON",
                        );
                        if !offer(&control, error.frame(), 0, grace).await {
                            break Some(ClosingReason::SlowClient);
                        }
                        continue;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    // The client began the closing handshake: the writer completes it.
                    Some(Ok(Message::Close(_))) => {
                        client_closed = true;
                        break None;
                    }
                    // A frame over the hard limit, refused unread: the client hears why.
                    Some(Err(e)) if is_over_limit(&e) => {
                        too_big = true;
                        break None;
                    }
                    // The socket failed: nobody to say goodbye to.
                    Some(Err(_)) | None => break None,
                };
                let answer = match read_request(&text, limits.max_frame_bytes) {
                    Ok(request) => match in_flight.admit() {
                        Ok(permit) => {
                            let live = Arc::clone(&live);
                            commands.spawn(async move {
                                let id = request.id;
                                let reply = live.driver.execute(request).await;
                                drop(permit);
                                let mark = match reply {
                                    // Every client has the session's last events before
                                    // `closed`, wherever the session ran
                                    // (docs/protocol.md#ordering).
                                    Reply::Closed { .. } => live.final_seq(CLOSED_TIMEOUT).await,
                                    _ => live.watermark(MARK_TIMEOUT).await,
                                };
                                (ServerMessage::Reply { id, reply }, mark)
                            });
                            continue;
                        }
                        Err(busy) => {
                            ServerMessage::Reply { id: request.id, reply: Reply::Error(busy) }
                        }
                    },
                    Err(error) => error.frame(),
                };
                if !offer(&control, answer, 0, grace).await {
                    break Some(ClosingReason::SlowClient);
                }
            }
        }
    };
    forwarder.abort();
    commands.abort_all();
    let reason = match reason {
        // A session closed by the shutdown: the client hears why.
        Some(ClosingReason::SessionClosed) if registry.is_shutting_down() => {
            Some(ClosingReason::ServerShutdown)
        }
        other => other,
    };
    match reason {
        Some(reason) => {
            let _ = finish.send(Farewell::Closing(reason));
        }
        // The client closed: its close frame is answered (the closing handshake,
        // docs/protocol.md#closing), nothing more.
        None if client_closed => {
            let _ = finish.send(Farewell::Answer);
        }
        None if too_big => {
            let _ = finish.send(Farewell::TooBig);
        }
        // The client went silent or its socket failed: the writer stops without a word.
        None => drop(finish),
    }
    drop((control, events));
    let _ = writer.await;
}

/// Queues the greeting, and a `gap` if events after `after` are gone (or, for a resumed
/// session, `after` is a number it never gave); answers the cursor the events resume from.
fn greet(live: &Live, after: u64, control: &mpsc::Sender<Queued>) -> u64 {
    let hello = ServerMessage::Hello {
        v: PROTOCOL_VERSION,
        session_id: live.id.clone(),
        agent: live.agent.clone(),
        node: live.node.clone(),
        last_seq: live.last_seq(),
    };
    let mut greeting = vec![hello];
    let mut cursor = after;
    if let Some(oldest) = live.gap_after(after) {
        let mut gap = ServerError::new(
            ErrorCode::Gap,
            format!(
                "events {} to {} are no longer held; the stream goes on from {oldest}",
                after + 1,
                oldest - 1
            ),
        );
        gap.oldest_seq = Some(oldest);
        greeting.push(gap.frame());
        cursor = oldest - 1;
    } else if let Some(oldest) = live.unknown_after(after) {
        let mut gap = ServerError::new(
            ErrorCode::Gap,
            format!(
                "event {after} was numbered by the server's process before a restart, and this \
                 one never knew it (its last numbers were lost): the events after it are gone; \
                 this stream goes on from {oldest}, the oldest held, and may repeat numbers you \
                 saw (read `history` again)"
            ),
        );
        gap.oldest_seq = Some(oldest);
        greeting.push(gap.frame());
        cursor = oldest - 1;
    }
    for frame in greeting {
        // The queue is new and holds more than two frames.
        let _ = control.try_send(Queued { seq: 0, message: text(&frame) });
    }
    cursor
}

/// Returns once the server shuts down.
pub(crate) async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` answers is dropped here, not held across the caller's awaits.
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}

fn text(message: &ServerMessage) -> Message {
    Message::Text(Utf8Bytes::from(message.encode()))
}

/// Queues a frame ordered by `seq`, waiting at most `grace` for room; `false` when there was
/// none (a slow client) or the writer has gone.
async fn offer(
    queue: &mpsc::Sender<Queued>,
    message: ServerMessage,
    seq: u64,
    grace: Duration,
) -> bool {
    let queued = Queued { seq, message: text(&message) };
    matches!(tokio::time::timeout(grace, queue.send(queued)).await, Ok(Ok(())))
}

/// Reads one client frame as a request: its size, then its version (so a client of another
/// version hears that rather than a shape error), then its shape.
fn read_request(text: &str, max_bytes: usize) -> Result<Request, ServerError> {
    if text.len() > max_bytes {
        return Err(ServerError::new(
            ErrorCode::TooLarge,
            format!("a frame of {} bytes is over the limit of {max_bytes}", text.len()),
        ));
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        ServerError::new(ErrorCode::BadRequest, format!("the frame is not JSON: {e}"))
    })?;
    let Some(fields) = value.as_object() else {
        let message = format!(
            "a request is a JSON object, such as {{\"v\":{PROTOCOL_VERSION},\"id\":1,\"type\":\"history\"}}; \
             this frame is {}",
            kind_of(&value)
        );
        return Err(ServerError::new(ErrorCode::BadRequest, message));
    };
    let id = match fields.get("id") {
        None | Some(serde_json::Value::Null) => None,
        Some(id) => match id.as_u64() {
            Some(id) => Some(id),
            None => {
                let message = format!(
                    "`id` must be a non-negative integer (at most {}) or absent, not {id}",
                    u64::MAX
                );
                return Err(ServerError::new(ErrorCode::BadRequest, message));
            }
        },
    };
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            let message = format!(
                "protocol version {v} is not supported (this server speaks {PROTOCOL_VERSION})"
            );
            return Err(ServerError::new(ErrorCode::UnsupportedVersion, message).about(id));
        }
        None => {
            let message = format!("a request needs `\"v\": {PROTOCOL_VERSION}`");
            return Err(ServerError::new(ErrorCode::BadRequest, message).about(id));
        }
    }
    let request: Request = serde_json::from_value(value.clone()).map_err(|e| {
        ServerError::new(ErrorCode::BadRequest, format!("unreadable request: {e}")).about(id)
    })?;
    match unknown_field(fields, &request) {
        Some(field) => {
            let message = format!(
                "unknown field `{field}` in a `{}` request: a field the server does not read is \
                 refused, so a typo does not pass silently",
                request.command.name()
            );
            Err(ServerError::new(ErrorCode::BadRequest, message).about(id))
        }
        None => Ok(request),
    }
}

/// A top-level field of the client's frame that the request it decoded to does not carry: one
/// serde skipped (`deny_unknown_fields` does not reach through the flattened command, and the
/// `Request` type stays lenient for the cluster's nodes, which must read a newer host's
/// requests). A `null` field is never one: it may be an absent option's.
fn unknown_field(
    fields: &serde_json::Map<String, serde_json::Value>,
    request: &Request,
) -> Option<String> {
    let known = serde_json::to_value(request).ok()?;
    let known = known.as_object()?;
    fields
        .iter()
        .find(|(name, value)| !value.is_null() && !known.contains_key(name.as_str()))
        .map(|(name, _)| name.clone())
}

/// What a JSON value is, for an error message.
fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Copies every event after `cursor` into the queue, waiting for room for as long as the
/// events still to send are in the buffer; answers why it stopped (`None`: the writer has
/// gone).
async fn forward(
    live: Arc<Live>,
    mut cursor: u64,
    queue: mpsc::Sender<Queued>,
) -> Option<ClosingReason> {
    let mut news = live.watch();
    news.borrow_and_update();
    loop {
        match live.after(cursor, BATCH) {
            Batch::Frames(frames) => {
                let last = frames.last().map_or(cursor, |(seq, _)| *seq);
                for (seq, text) in frames {
                    loop {
                        tokio::select! {
                            biased;
                            permit = queue.reserve() => {
                                permit.ok()?.send(Queued { seq, message: Message::Text(text) });
                                break;
                            }
                            changed = news.changed() => {
                                changed.ok()?;
                                // The frames of this batch are in hand; the next one is not.
                                if live.oldest() > last + 1 {
                                    return Some(ClosingReason::SlowClient);
                                }
                            }
                        }
                    }
                    cursor = seq;
                }
            }
            Batch::Wait => {
                news.changed().await.ok()?;
                news.borrow_and_update();
            }
            Batch::Ended(true) => return Some(ClosingReason::SessionClosed),
            Batch::Ended(false) => return Some(ClosingReason::SessionLost),
            // Events it had not sent yet were dropped while it waited for room: too slow.
            Batch::Evicted => return Some(ClosingReason::SlowClient),
        }
    }
}

/// The writer's two queues.
struct Queues {
    control: mpsc::Receiver<Queued>,
    events: mpsc::Receiver<Queued>,
    /// A control frame waiting for the events up to its watermark; the control frames behind
    /// it wait too, in order.
    held: Option<Queued>,
    /// The number of the last event taken (the connection's starting cursor before any: the
    /// events up to it never come).
    written: u64,
}

impl Queues {
    /// The next frame, a control frame first unless it waits for events; `None` once both
    /// queues are closed and empty. Cancel-safe: a frame taken and not returned is held.
    async fn next(&mut self) -> Option<Message> {
        let mut open = (true, true);
        loop {
            if let Some(held) = self.held.take_if(|held| held.seq <= self.written) {
                return Some(held.message);
            }
            if self.held.is_some() {
                return match self.events.recv().await {
                    Some(event) => Some(self.taken(event)),
                    // No more events come: nothing left to wait for.
                    None => self.held.take().map(|held| held.message),
                };
            }
            tokio::select! {
                biased;
                frame = self.control.recv(), if open.0 => match frame {
                    Some(frame) => self.held = Some(frame),
                    None => open.0 = false,
                },
                frame = self.events.recv(), if open.1 => match frame {
                    Some(event) => return Some(self.taken(event)),
                    None => open.1 = false,
                },
                else => return None,
            }
        }
    }

    /// The next frame already queued, as [`next`](Self::next) orders them (a control frame
    /// waits for no event missing from the queue); with `events` false, control frames only.
    fn try_next(&mut self, events: bool) -> Option<Message> {
        if self.held.is_none() {
            self.held = self.control.try_recv().ok();
        }
        match self.held.take() {
            Some(held) if held.seq > self.written && events => match self.events.try_recv() {
                Ok(event) => {
                    self.held = Some(held);
                    Some(self.taken(event))
                }
                Err(_) => Some(held.message),
            },
            Some(held) => Some(held.message),
            None if events => self.events.try_recv().ok().map(|event| self.taken(event)),
            None => None,
        }
    }

    /// An event frame taken from its queue: the events up to it are written.
    fn taken(&mut self, event: Queued) -> Message {
        self.written = self.written.max(event.seq);
        event.message
    }
}

/// How a connection's writer ends it.
enum Farewell {
    /// The server closes: the frames still queued (only the control frames for a client too
    /// slow for its events), the `closing` frame and a close frame of the same reason.
    Closing(ClosingReason),
    /// The client began the closing handshake: the answer to its close frame.
    Answer,
    /// The client sent a frame over the hard limit: a close frame 1009, and nothing else
    /// (docs/protocol.md#closing).
    TooBig,
}

/// Whether a read failed on a frame over the hard limit (tungstenite refuses it from its
/// header, before reading it).
fn is_over_limit(e: &axum::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<tungstenite::Error>())
        .is_some_and(|e| matches!(e, tungstenite::Error::Capacity(_)))
}

/// Writes queued frames until told to finish, then says goodbye as told, within
/// `close_timeout`.
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut frames: Queues,
    mut finish: oneshot::Receiver<Farewell>,
    close_timeout: Duration,
) {
    let reason = loop {
        tokio::select! {
            biased;
            reason = &mut finish => break reason,
            frame = frames.next() => {
                let Some(frame) = frame else { break (&mut finish).await };
                tokio::select! {
                    biased;
                    reason = &mut finish => break reason,
                    sent = sink.send(frame) => if sent.is_err() {
                        // A frame the client's close overtook: its answer may still go out.
                        let _ = tokio::time::timeout(close_timeout, sink.close()).await;
                        return;
                    },
                }
            }
        }
    };
    let reason = match reason {
        Ok(Farewell::Closing(reason)) => reason,
        Ok(Farewell::Answer) => {
            // The WebSocket layer queued the echo of the client's close frame when it read
            // it: closing the sink sends it and ends the handshake.
            let _ = tokio::time::timeout(close_timeout, sink.close()).await;
            return;
        }
        Ok(Farewell::TooBig) => {
            let reason = Utf8Bytes::from_static("message too big");
            let frame = Message::Close(Some(CloseFrame { code: close_code::SIZE, reason }));
            let _ = tokio::time::timeout(close_timeout, sink.send(frame)).await;
            return;
        }
        Err(_) => return,
    };
    let last_words = async {
        // A slow client still gets its greeting and the answers it is owed, not the events.
        let events = reason != ClosingReason::SlowClient;
        while let Some(frame) = frames.try_next(events) {
            sink.send(frame).await?;
        }
        let closing = ServerMessage::Closing { reason };
        sink.send(Message::Text(Utf8Bytes::from(closing.encode()))).await?;
        let code = match reason {
            ClosingReason::SlowClient => close_code::POLICY,
            ClosingReason::ServerShutdown => close_code::AWAY,
            ClosingReason::SessionLost => close_code::ERROR,
            _ => close_code::NORMAL,
        };
        let frame = CloseFrame { code, reason: Utf8Bytes::from_static(reason.as_str()) };
        sink.send(Message::Close(Some(frame))).await
    };
    let _ = tokio::time::timeout(close_timeout, last_words).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_request_or_says_what_is_wrong_with_it() {
        let request = read_request(r#"{"v":1,"id":3,"type":"history"}"#, 1024).unwrap();
        assert_eq!(request.id, Some(3));
        let code = |text: &str| read_request(text, 64).unwrap_err();
        assert_eq!(code("nope").code, ErrorCode::BadRequest);
        let v2 = code(r#"{"v":2,"id":4,"type":"history"}"#);
        assert_eq!((v2.code, v2.id), (ErrorCode::UnsupportedVersion, Some(4)));
        let dance = code(r#"{"v":1,"id":5,"type":"dance"}"#);
        assert_eq!((dance.code, dance.id), (ErrorCode::BadRequest, Some(5)));
        assert_eq!(code(r#"{"id":6,"type":"history"}"#).code, ErrorCode::BadRequest);
        let array = code("[1,2]");
        assert!(array.message.contains("a JSON object"), "{}", array.message);
        for id in ["-1", "1.5", "\"7\""] {
            let bad = code(&format!(r#"{{"v":1,"id":{id},"type":"history"}}"#));
            assert_eq!(bad.id, None);
            assert!(bad.message.contains("`id` must be a non-negative integer"), "{}", bad.message);
        }
        let typo = code(r#"{"v":1,"id":8,"type":"say","txet":"a","text":"b"}"#);
        assert_eq!((typo.code, typo.id), (ErrorCode::BadRequest, Some(8)));
        assert!(typo.message.contains("unknown field `txet`"), "{}", typo.message);
        // An absent option sent as null is not unknown.
        let reply =
            r#"{"v":1,"id":null,"type":"generate_reply","instructions":"a","tool_choice":null}"#;
        assert!(read_request(reply, 1024).is_ok());
        assert_eq!(
            code(&format!(r#"{{"v":1,"type":"say","text":"{}"}}"#, "a".repeat(64))).code,
            ErrorCode::TooLarge
        );
    }
}
