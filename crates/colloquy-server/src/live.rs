//! The server's live sessions: each one's replay buffer (its events numbered from 1, the
//! newest [`Limits::replay_events`](crate::Limits::replay_events) kept, within
//! [`Limits::replay_bytes`](crate::Limits::replay_bytes), each encoded once as
//! the frame every client gets), the task that fills it from the session's event stream, closes
//! (or, kept in a store, suspends) a session nobody has attached to for a while and, for a
//! session in this process, tells a connection how far the events of a reply reach (its
//! watermark). A kept session's numbers go on from the last one kept for it (`numbers.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use colloquy_model::{EventKind, SessionEvent};
use colloquy_protocol::{
    Command, ErrorCode, ErrorKind, Reply, Request, ServerError, ServerMessage, SessionInfo,
};
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use crate::backend::{SessionDriver, StreamItem};
use crate::numbers::Counter;
use crate::registry::Registry;

/// The reason a session closes with when no client has been attached for
/// [`Limits::idle_session`](crate::Limits::idle_session).
pub const CLIENT_GONE: &str = colloquy_model::CloseReason::ClientGone.name();

/// Why the sessions close when the server shuts down.
pub const SERVER_SHUTDOWN: &str = colloquy_model::CloseReason::ServerShutdown.name();

/// The reason a session is closed with when its event stream ends without `session_closed`
/// (where it ran was lost, or its events could no longer be read): the server lets it go, so
/// it must not run on unseen.
pub const EVENTS_ENDED: &str = colloquy_model::CloseReason::EventsEnded.name();

/// Why a session kept in a store stops when nobody is attached or the server shuts down: it
/// is suspended, not closed, so that it resumes when a client attaches again.
pub const SUSPENDED: &str = colloquy_model::CloseReason::Suspended.name();

/// The reason of a session whose store failed: its journal may not hold the close.
const STORE_FAILED: &str = colloquy_model::CloseReason::StoreFailed.name();

/// Attempts at closing an idle session before waiting for another idle period.
const CLOSE_TRIES: u32 = 5;

/// The wait before the second attempt; each next one waits twice as long (0.5 s, then up to
/// 4 s: some 7.5 s over the five).
const CLOSE_BACKOFF: Duration = Duration::from_millis(500);

/// The bound on closing a session whose events ended (10 s).
const ORPHAN_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Watermark requests waiting for the feeder (one per reply a connection is about to send).
const MARK_REQUESTS: usize = 64;

/// Asks the feeder for a watermark: it takes every event already in the session's stream,
/// then answers the number of the last one.
type MarkRequest = oneshot::Sender<u64>;

/// The feeder's end of the watermark requests, for a session whose driver
/// [orders its events before its replies](SessionDriver::events_precede_replies).
pub(crate) struct Marks(mpsc::Receiver<MarkRequest>);

/// One live session.
pub(crate) struct Live {
    pub(crate) id: String,
    pub(crate) agent: String,
    pub(crate) node: Option<String>,
    pub(crate) driver: Arc<dyn SessionDriver>,
    replay: Mutex<Replay>,
    /// Bumped on every event and at the end: connections wait on it for news.
    tick: watch::Sender<u64>,
    /// Connections attached now.
    clients: watch::Sender<usize>,
    /// Where to ask for a watermark; `None` when the session's events arrive another way than
    /// its replies (a cluster's), so a reply carries none.
    marks: Option<mpsc::Sender<MarkRequest>>,
    /// Kept in a store: it suspends rather than closes when idle or at a shutdown.
    kept: bool,
    /// Resumed in this process: its numbers before the first held were another process's.
    resumed: bool,
}

/// What a connection reads from the buffer after its cursor.
pub(crate) enum Batch {
    /// The next frames, in order.
    Frames(Vec<(u64, Utf8Bytes)>),
    /// Nothing new yet.
    Wait,
    /// The session has ended and every frame was read; `true` if its last event was
    /// `session_closed` (otherwise it was lost).
    Ended(bool),
    /// Frames after the cursor were dropped from the buffer.
    Evicted,
}

impl Live {
    pub(crate) fn new(
        id: String,
        agent: String,
        node: Option<String>,
        driver: Arc<dyn SessionDriver>,
        capacity: usize,
        budget: usize,
    ) -> (Self, Option<Marks>) {
        let (marks, requests) = if driver.events_precede_replies() {
            let (marks, requests) = mpsc::channel(MARK_REQUESTS);
            (Some(marks), Some(Marks(requests)))
        } else {
            (None, None)
        };
        let live = Self {
            id,
            agent,
            node,
            driver,
            replay: Mutex::new(Replay::new(capacity, budget)),
            tick: watch::channel(0).0,
            clients: watch::channel(0).0,
            marks,
            kept: false,
            resumed: false,
        };
        (live, requests)
    }

    /// A session kept in a store: its events numbered on after `floor` (the last number an
    /// earlier process gave, 0 for a new session), each number kept by `counter` before any
    /// client reads its event; `resumed` when an earlier process ran it.
    pub(crate) fn kept(mut self, floor: u64, counter: Option<Counter>, resumed: bool) -> Self {
        let replay = self.replay.get_mut().unwrap_or_else(PoisonError::into_inner);
        replay.last_seq = floor;
        replay.counter = counter;
        self.kept = true;
        self.resumed = resumed;
        self
    }

    /// The reason it is stopped with when no client has been attached for a while.
    pub(crate) fn idle_reason(&self) -> &'static str {
        if self.kept { SUSPENDED } else { CLIENT_GONE }
    }

    /// The reason it is stopped with when the server shuts down.
    pub(crate) fn shutdown_reason(&self) -> &'static str {
        if self.kept { SUSPENDED } else { SERVER_SHUTDOWN }
    }

    /// The number of the last event the session emitted so far, once every one of them is in
    /// the buffer (docs/protocol.md#ordering); `None` when its events arrive another way, it
    /// has ended, or the feeder did not answer within `bound`.
    pub(crate) async fn watermark(&self, bound: Duration) -> Option<u64> {
        let marks = self.marks.as_ref()?;
        let asked = async {
            let (request, answer) = oneshot::channel();
            marks.send(request).await.ok()?;
            answer.await.ok()
        };
        tokio::time::timeout(bound, asked).await.ok().flatten()
    }

    /// The number of the session's last event once its events have ended (every one of them
    /// in the buffer), waiting at most `bound` for that; `None` past it.
    pub(crate) async fn final_seq(&self, bound: Duration) -> Option<u64> {
        // Subscribed before the first look, so the end cannot slip between the two.
        let mut news = self.watch();
        let ended = async {
            while !self.replay().ended {
                if news.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(bound, ended).await;
        let replay = self.replay();
        replay.ended.then_some(replay.last_seq)
    }

    fn replay(&self) -> std::sync::MutexGuard<'_, Replay> {
        self.replay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sequence number of the latest event (0 before the first).
    pub(crate) fn last_seq(&self) -> u64 {
        self.replay().last_seq
    }

    /// The sequence number of the oldest event held (`last_seq + 1` when none is).
    pub(crate) fn oldest(&self) -> u64 {
        self.replay().oldest()
    }

    /// The oldest sequence number a client attaching after `after` gets first, if events
    /// after `after` are gone.
    pub(crate) fn gap_after(&self, after: u64) -> Option<u64> {
        let replay = self.replay();
        let oldest = replay.oldest();
        (oldest > after + 1).then_some(oldest)
    }

    /// For a resumed session, a client's `after` past its last event names a number an
    /// earlier process gave and this one never knew (its last numbers were not kept): the
    /// oldest number held, where that client's stream goes on.
    pub(crate) fn unknown_after(&self, after: u64) -> Option<u64> {
        let replay = self.replay();
        (self.resumed && after > replay.last_seq).then(|| replay.oldest())
    }

    /// Whether a client's `after` past the last event is to be answered with a `gap`
    /// ([`unknown_after`](Self::unknown_after)) rather than refused.
    pub(crate) fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// Up to `max` frames after `cursor`.
    pub(crate) fn after(&self, cursor: u64, max: usize) -> Batch {
        self.replay().after(cursor, max)
    }

    /// A receiver that sees every new event and the end.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.tick.subscribe()
    }

    /// Counts a connection in until the guard drops, unless `max` are attached already.
    pub(crate) fn attach(self: &Arc<Self>, max: usize) -> Option<Attached> {
        let mut taken = false;
        self.clients.send_if_modified(|n| {
            taken = *n < max;
            *n += usize::from(taken);
            taken
        });
        taken.then(|| Attached(Arc::clone(self)))
    }

    pub(crate) fn info(&self) -> SessionInfo {
        SessionInfo {
            session_id: self.id.clone(),
            agent: self.agent.clone(),
            node: self.node.clone(),
            clients: *self.clients.borrow(),
            last_seq: self.last_seq(),
        }
    }

    fn take(&self, item: StreamItem) {
        match item {
            StreamItem::Event(event) => self.push(event),
            StreamItem::Lost { count } => self.lost(count),
        }
    }

    fn push(&self, event: SessionEvent) {
        let seq = {
            let mut replay = self.replay();
            let seq = replay.last_seq + 1;
            replay.closed = matches!(event.kind, EventKind::SessionClosed { .. });
            // Closed for good, it never resumes: its number is of no more use. A store that
            // failed could not record the close: the session may resume, its number with it.
            let gone = match &event.kind {
                EventKind::SessionClosed { reason } => {
                    ![SUSPENDED, STORE_FAILED].contains(&reason.as_str())
                }
                _ => false,
            };
            let text = ServerMessage::Event { seq, event }.encode();
            replay.push(seq, seq, Utf8Bytes::from(text));
            if gone && let Some(counter) = replay.counter.take() {
                counter.forget();
            }
            seq
        };
        self.tick.send_replace(seq);
    }

    /// Skips the numbers of `count` events lost on the way; readers get a `gap` for them.
    fn lost(&self, count: u64) {
        let last = {
            let mut replay = self.replay();
            let first = replay.last_seq + 1;
            let last = replay.last_seq.saturating_add(count.max(1));
            replay.closed = false;
            let mut gap = ServerError::new(
                ErrorCode::Gap,
                format!(
                    "events {first} to {last} were lost on the way to this server; the stream \
                     goes on from {}",
                    last + 1
                ),
            );
            gap.oldest_seq = Some(last + 1);
            replay.push(first, last, Utf8Bytes::from(gap.frame().encode()));
            last
        };
        self.tick.send_replace(last);
    }

    fn end(&self) {
        self.replay().ended = true;
        self.tick.send_modify(|_| {});
    }

    /// Asks the session to close with `reason`; `true` once it is closing or closed.
    pub(crate) async fn close(&self, reason: &str) -> bool {
        let request = Request::new(Command::Close { reason: reason.to_owned() });
        match self.driver.execute(request).await {
            Reply::Closed { .. } => true,
            Reply::Error(e) => e.kind == ErrorKind::Closed,
            _ => false,
        }
    }

    /// Whether the last event so far is `session_closed`.
    fn closed(&self) -> bool {
        self.replay().closed
    }
}

/// A connection attached to a session; detaches on drop.
pub(crate) struct Attached(Arc<Live>);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.clients.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The newest events of a session, encoded, with a `gap` frame in place of events lost on the
/// way (their numbers skipped).
struct Replay {
    entries: VecDeque<Entry>,
    capacity: usize,
    /// The most bytes of frames held; the newest frame is held whatever its size.
    budget: usize,
    bytes: usize,
    last_seq: u64,
    ended: bool,
    /// Its last event so far is `session_closed`.
    closed: bool,
    /// Keeps the last number beside the store (a session kept in one).
    counter: Option<Counter>,
}

/// One event's frame (`first == last`), or the `gap` frame of the events `first..=last`.
struct Entry {
    first: u64,
    last: u64,
    text: Utf8Bytes,
}

impl Replay {
    fn new(capacity: usize, budget: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            budget,
            bytes: 0,
            last_seq: 0,
            ended: false,
            closed: false,
            counter: None,
        }
    }

    fn push(&mut self, first: u64, last: u64, text: Utf8Bytes) {
        // Kept before any reader can see the frame: no client holds a number a restart loses.
        if let Some(counter) = &mut self.counter {
            counter.record(last);
        }
        let size = text.len();
        while self.entries.len() >= self.capacity || self.bytes + size > self.budget {
            let Some(evicted) = self.entries.pop_front() else { break };
            self.bytes -= evicted.text.len();
        }
        self.bytes += size;
        self.entries.push_back(Entry { first, last, text });
        self.last_seq = last;
    }

    fn oldest(&self) -> u64 {
        self.entries.front().map_or(self.last_seq + 1, |entry| entry.first)
    }

    /// Up to `max` frames after `cursor`, each with the number a reader's cursor moves to.
    fn after(&self, cursor: u64, max: usize) -> Batch {
        if cursor + 1 < self.oldest() {
            return Batch::Evicted;
        }
        if cursor >= self.last_seq {
            return if self.ended { Batch::Ended(self.closed) } else { Batch::Wait };
        }
        let start = self.entries.partition_point(|entry| entry.last <= cursor);
        let frames = self.entries.range(start..).take(max);
        Batch::Frames(frames.map(|entry| (entry.last, entry.text.clone())).collect())
    }
}

/// Reads the session's events into its buffer until the stream ends; closes the session with
/// [`CLIENT_GONE`] (suspends one kept in a store) once no connection has been attached for `idle` (retrying a failed close
/// [`CLOSE_TRIES`] times with backoff, then again after another idle period). A stream that
/// ends without `session_closed` closes the session with [`EVENTS_ENDED`]. Answers `marks`'
/// watermark requests while the stream lasts. Removes the session from `registry` at the end.
pub(crate) async fn pump(
    live: Arc<Live>,
    mut events: BoxStream<'static, StreamItem>,
    mut marks: Option<Marks>,
    registry: Arc<Registry>,
    idle: Duration,
) {
    let mut clients = live.clients.subscribe();
    // A client may attach between the session's registration and this task's first poll: the
    // count now, not "alone", is where the idle timer starts from.
    let mut alone_since = (*clients.borrow_and_update() == 0).then(Instant::now);
    let mut closing: Option<JoinHandle<bool>> = None;
    let mut closed = false;
    loop {
        let deadline =
            alone_since.filter(|_| closing.is_none() && !closed).map(|since| since + idle);
        tokio::select! {
            biased;
            // Before the events: a steady stream of them must not keep a reply waiting.
            Some(request) = next_mark(&mut marks) => {
                let ended = drain(&live, &mut events);
                let _ = request.send(live.last_seq());
                if ended {
                    break;
                }
            }
            item = events.next() => match item {
                Some(item) => live.take(item),
                None => break,
            },
            changed = clients.changed() => {
                if changed.is_err() {
                    break;
                }
                let attached = *clients.borrow_and_update();
                alone_since = match (attached, alone_since) {
                    (0, None) => Some(Instant::now()),
                    (0, since) => since,
                    _ => None,
                };
            }
            done = finished(&mut closing) => {
                closing = None;
                closed = matches!(done, Ok(true));
                if !closed && alone_since.is_some() {
                    alone_since = Some(Instant::now());
                }
            }
            () = sleep_until(deadline) => {
                closing = Some(tokio::spawn(close_idle(Arc::clone(&live))));
            }
        }
    }
    live.end();
    // A connection still asking hears "no watermark" at once, not after the close below.
    drop(marks);
    if let Some(closing) = closing {
        closing.abort();
    }
    if !live.closed() {
        let closing = live.close(EVENTS_ENDED);
        if !matches!(tokio::time::timeout(ORPHAN_CLOSE_TIMEOUT, closing).await, Ok(true)) {
            tracing::warn!(session = %live.id, "a session whose events ended could not be closed");
        }
    }
    registry.remove(&live.id);
}

/// The next watermark request; pending forever without any.
async fn next_mark(marks: &mut Option<Marks>) -> Option<MarkRequest> {
    match marks {
        Some(Marks(requests)) => requests.recv().await,
        None => std::future::pending().await,
    }
}

/// Takes every item already in the stream, waiting for none; `true` if the stream ended. Run
/// outside tokio's cooperative budget, which could otherwise make a ready item look pending.
fn drain(live: &Live, events: &mut BoxStream<'static, StreamItem>) -> bool {
    loop {
        match tokio::task::unconstrained(events.next()).now_or_never() {
            Some(Some(item)) => live.take(item),
            Some(None) => return true,
            None => return false,
        }
    }
}

/// Closes an idle session with [`CLIENT_GONE`] (suspends one kept in a store); `false` if
/// every attempt failed.
async fn close_idle(live: Arc<Live>) -> bool {
    let mut wait = CLOSE_BACKOFF;
    for attempt in 1..=CLOSE_TRIES {
        if live.close(live.idle_reason()).await {
            return true;
        }
        if attempt < CLOSE_TRIES {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    tracing::warn!(session = %live.id, tries = CLOSE_TRIES, "an idle session did not close");
    false
}

/// The end of the close under way, if any.
async fn finished(closing: &mut Option<JoinHandle<bool>>) -> Result<bool, JoinError> {
    match closing {
        Some(closing) => closing.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(seq: u64) -> Utf8Bytes {
        Utf8Bytes::from(seq.to_string())
    }

    fn seqs(batch: Batch) -> Vec<u64> {
        match batch {
            Batch::Frames(frames) => frames.into_iter().map(|(seq, _)| seq).collect(),
            _ => panic!("expected frames"),
        }
    }

    /// A session that records the reasons it is asked to close with, and closes.
    #[derive(Default)]
    struct Closes(Mutex<Vec<String>>);

    impl SessionDriver for Closes {
        fn execute(&self, request: Request) -> futures_util::future::BoxFuture<'static, Reply> {
            if let Command::Close { reason } = request.command {
                self.0.lock().unwrap().push(reason);
            }
            std::future::ready(Reply::Closed { history: Vec::new() }).boxed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_attached_before_the_feeder_first_runs_keeps_the_session_open() {
        let driver = Arc::new(Closes::default());
        let (live, marks) =
            Live::new("s".into(), "a".into(), None, Arc::clone(&driver) as _, 10, 1 << 20);
        let live = Arc::new(live);
        // Attached once the session is registered, before its feeder's first poll.
        let attached = live.attach(1).expect("room for a client");
        let idle = Duration::from_secs(60);
        let events = futures_util::stream::pending().boxed();
        let feeder = tokio::spawn(pump(Arc::clone(&live), events, marks, Arc::default(), idle));
        tokio::time::sleep(idle * 10).await;
        assert!(driver.0.lock().unwrap().is_empty(), "closed with a client attached");
        drop(attached);
        tokio::time::sleep(idle * 2).await;
        assert_eq!(*driver.0.lock().unwrap(), [CLIENT_GONE]);
        feeder.abort();
    }

    #[test]
    fn keeps_the_newest_and_tells_an_evicted_cursor_where_it_resumes() {
        let mut replay = Replay::new(3, usize::MAX);
        assert!(matches!(replay.after(0, 10), Batch::Wait));
        for seq in 1..=5 {
            replay.push(seq, seq, text(seq));
        }
        assert_eq!(replay.oldest(), 3);
        assert!(matches!(replay.after(1, 10), Batch::Evicted));
        assert_eq!(seqs(replay.after(2, 10)), [3, 4, 5]);
        assert_eq!(seqs(replay.after(3, 1)), [4]);
        assert!(matches!(replay.after(5, 10), Batch::Wait));
        replay.ended = true;
        assert!(matches!(replay.after(5, 10), Batch::Ended(false)));
    }

    #[test]
    fn lost_events_are_one_entry_that_moves_a_cursor_past_them() {
        let mut replay = Replay::new(10, usize::MAX);
        replay.push(1, 1, text(1));
        replay.push(2, 4, text(4));
        replay.push(5, 5, text(5));
        assert_eq!(seqs(replay.after(0, 10)), [1, 4, 5]);
        // A cursor inside the lost range still gets the gap.
        assert_eq!(seqs(replay.after(2, 10)), [4, 5]);
        assert_eq!(seqs(replay.after(4, 10)), [5]);
    }

    #[test]
    fn keeps_the_newest_within_the_byte_budget() {
        let mut replay = Replay::new(100, 10);
        for seq in 1..=4 {
            replay.push(seq, seq, Utf8Bytes::from("abcd"));
        }
        assert_eq!((replay.oldest(), replay.bytes), (3, 8));
        // A frame over the whole budget is still held, alone.
        replay.push(5, 5, Utf8Bytes::from("x".repeat(50)));
        assert_eq!((replay.oldest(), replay.bytes), (5, 50));
        replay.push(6, 6, Utf8Bytes::from("abcd"));
        assert_eq!(seqs(replay.after(5, 10)), [6]);
    }
}
