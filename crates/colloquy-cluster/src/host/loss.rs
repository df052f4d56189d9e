//! Losing a node, seen from a host (docs/cluster.md#failure). One task per [`Cluster`](super::Cluster)
//! watches the nodes bucket, polled without pause and made again after an error or a
//! reconnect, and checks the nodes of its sessions directly after each (re)start and every
//! `max_age`, in case a watch misses an expiry. A node is lost when its entry expires (a
//! `Purge`: the server's expiry marker) or comes back under a greater lease; a delete is a
//! drained node leaving, not a loss. Each session of this host on a lost node is marked at once
//! (moving if the node journaled it, `moves.rs`; lost otherwise, its calls failing
//! [`ClusterError::NodeLost`]), then declared in the stream: an `x_node_lost` marker written
//! into its events, and its record marked `lost`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::kv::{Entry, Operation, UpdateErrorKind};
use async_nats::jetstream::message::PublishMessage;
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::ClusterError;
use crate::names;
use crate::nats::{Backend, store};
use crate::wire::{Marker, NodeInfo, SessionRecord};

/// The pause before a failed watch is made again.
const REWATCH_DELAY: Duration = Duration::from_millis(250);
/// How long a host keeps trying to declare a session lost: well within the stream's duplicate
/// window, so that hosts which all declare it store one marker.
const DECLARE_FOR: Duration = Duration::from_secs(60);
/// The most sessions declared at once.
const DECLARE_CONCURRENCY: usize = 16;

/// Where a session runs, as a host knows it: a node, that boot of it, under that lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) node: String,
    pub(crate) boot_id: String,
    pub(crate) lease: u64,
    /// Whether the node journals it: then a loss moves it rather than ends it.
    pub(crate) durable: bool,
    /// The revision of the session's record that named it (0 if unknown): the greater of two
    /// placements is the newer.
    pub(crate) revision: u64,
}

impl Placement {
    /// The placement a session's record names, at `revision`.
    pub(crate) fn of(record: &SessionRecord, revision: u64) -> Self {
        Self {
            node: record.node.clone(),
            boot_id: record.boot_id.clone(),
            lease: record.lease,
            durable: record.durable,
            revision,
        }
    }

    /// Whether `record` names this placement (whatever its revision).
    pub(crate) fn named_by(&self, record: &SessionRecord) -> bool {
        self.node == record.node && self.boot_id == record.boot_id && self.lease == record.lease
    }
}

/// What became of a session's placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its node holds it.
    Live,
    /// Its node was lost; the session is being resumed on another (docs/cluster.md#moves).
    Moving,
    /// Its node was lost and the session with it.
    Lost,
}

/// One session this host drives, as its loss detection sees it: shared by its
/// [`RemoteSession`](super::RemoteSession) clones and event readers.
#[derive(Debug)]
pub(crate) struct Tracked {
    pub(crate) id: String,
    state: watch::Sender<State>,
}

#[derive(Debug)]
struct State {
    placement: Arc<Placement>,
    phase: Phase,
    /// How many placements of it were found lost: a command sent before one was may have run
    /// there.
    losses: u64,
}

impl Tracked {
    /// Session `id`, placed there, not lost yet.
    pub(crate) fn new(id: &str, placement: Placement) -> Self {
        let state = State { placement: Arc::new(placement), phase: Phase::Live, losses: 0 };
        Self { id: id.to_owned(), state: watch::channel(state).0 }
    }

    /// Where it runs (or ran, while it moves or once it is lost).
    pub(crate) fn placement(&self) -> Arc<Placement> {
        Arc::clone(&self.state.borrow().placement)
    }

    pub(crate) fn phase(&self) -> Phase {
        self.state.borrow().phase
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.phase() == Phase::Lost
    }

    /// How many of its placements were found lost so far.
    pub(crate) fn losses(&self) -> u64 {
        self.state.borrow().losses
    }

    /// Resolves once a placement of it is found lost after `losses` were: a command under
    /// way may have run there. (A drained node's handing over is no loss: it stops taking
    /// commands first and answers those it took.)
    pub(crate) async fn lost_since(&self, losses: u64) {
        let mut state = self.state.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = state.wait_for(|s| s.losses > losses).await;
    }

    /// Resolves once the session is not moving: where it runs then, or `None` if it is lost.
    pub(crate) async fn settled(&self) -> Option<Arc<Placement>> {
        let mut state = self.state.subscribe();
        let settled = state.wait_for(|s| s.phase != Phase::Moving).await;
        settled.ok().and_then(|s| (s.phase == Phase::Live).then(|| Arc::clone(&s.placement)))
    }

    /// Its node was found lost while it ran on `placement`: it is moving if that node
    /// journaled it, lost otherwise. False if it had left that placement already.
    pub(crate) fn lose(&self, placement: &Placement) -> bool {
        self.state.send_if_modified(|s| {
            if *s.placement != *placement || s.phase != Phase::Live {
                return false;
            }
            s.phase = if s.placement.durable { Phase::Moving } else { Phase::Lost };
            s.losses += 1;
            true
        })
    }

    /// Its node was found live after all under `placement` (a loss read from a failed read):
    /// it runs there again, if it was moving from there.
    pub(crate) fn alive_again(&self, placement: &Placement) -> bool {
        self.state.send_if_modified(|s| {
            let again = s.phase == Phase::Moving && *s.placement == *placement;
            if again {
                s.phase = Phase::Live;
            }
            again
        })
    }

    /// Marks it lost for good (no node could resume it); false if it already was.
    pub(crate) fn mark_lost(&self) -> bool {
        self.state.send_if_modified(|s| {
            let changed = s.phase != Phase::Lost;
            if s.phase == Phase::Live {
                s.losses += 1;
            }
            s.phase = Phase::Lost;
            changed
        })
    }

    /// It runs on `placement` now, if that is newer than the one known (or the one known was
    /// lost and this is another); true if that changed anything.
    pub(crate) fn moved(&self, placement: Placement) -> bool {
        self.state.send_if_modified(|s| {
            let newer = placement.revision > s.placement.revision
                || (s.phase != Phase::Live && placement != *s.placement);
            if !newer {
                return false;
            }
            s.placement = Arc::new(placement);
            s.phase = Phase::Live;
            true
        })
    }
}

/// A placement found lost, to declare: `x_node_lost` in the session's events, its record
/// marked.
#[derive(Clone, Debug)]
pub(crate) struct LostPlacement {
    pub(crate) id: String,
    pub(crate) placement: Arc<Placement>,
}

/// The sessions this host drives, by id, for as long as a handle on them lives.
#[derive(Default)]
pub(crate) struct Tracker {
    sessions: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Weak<Tracked>>,
    /// The size at which the entries whose handles are all gone are dropped: twice the size
    /// after the last time, so tracking stays linear.
    prune_at: usize,
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's entry, shared with the handles this host already has on it, which
    /// moves there if `placement` is newer than the one it knows.
    pub(crate) fn track(&self, id: &str, placement: Placement) -> Arc<Tracked> {
        let mut sessions = self.lock();
        if let Some(tracked) = sessions.by_id.get(id).and_then(Weak::upgrade) {
            tracked.moved(placement);
            return tracked;
        }
        if sessions.by_id.len() >= sessions.prune_at {
            sessions.by_id.retain(|_, t| t.strong_count() > 0);
            sessions.prune_at = (sessions.by_id.len() * 2).max(64);
        }
        let tracked = Arc::new(Tracked::new(id, placement));
        sessions.by_id.insert(id.to_owned(), Arc::downgrade(&tracked));
        tracked
    }

    /// The nodes of the sessions tracked that run.
    fn nodes(&self) -> BTreeSet<String> {
        let sessions = self.lock();
        let live = sessions.by_id.values().filter_map(Weak::upgrade);
        live.filter(|t| t.phase() == Phase::Live).map(|t| t.placement().node.clone()).collect()
    }

    /// The sessions this host knows to run on `node`.
    fn on_node(&self, node: &str) -> Vec<Arc<Tracked>> {
        let sessions = self.lock();
        let all = sessions.by_id.values().filter_map(Weak::upgrade);
        all.filter(|t| t.placement().node == node).collect()
    }

    /// The sessions running on `node` under a lease older than `before`, each marked moving
    /// or lost.
    fn lose(&self, node: &str, before: u64) -> Vec<(Arc<Tracked>, Arc<Placement>)> {
        let sessions = self.lock();
        let on_node = sessions.by_id.values().filter_map(Weak::upgrade);
        on_node
            .filter_map(|t| {
                let placement = t.placement();
                let lost = placement.node == node && placement.lease < before && t.lose(&placement);
                lost.then_some((t, placement))
            })
            .collect()
    }
}

/// What the watch does with the sessions it found lost, each with the placement it lost
/// (`moves::found_lost`, for as long as the cluster lives).
pub(crate) type OnLost = Box<dyn Fn(Vec<(Arc<Tracked>, Arc<Placement>)>) + Send + Sync>;

/// What the watch last saw of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// An entry under this lease (0 while the node registers).
    Live(u64),
    /// Deleted: it drained and left. Its delete marker's own expiry shows as a `Purge` later,
    /// which is no loss.
    Left,
}

/// The watch: runs until the cluster drops it.
pub(crate) async fn watch_nodes(backend: Backend, tracker: Arc<Tracker>, on_lost: OnLost) {
    let on_lost = &on_lost;
    let mut connections = backend.connections.clone();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    loop {
        connections.borrow_and_update();
        let mut entries = match backend.nodes.watch_all().await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::debug!(error = %e, "cannot watch the nodes; trying again");
                tokio::time::sleep(REWATCH_DELAY).await;
                continue;
            }
        };
        check(&backend, &tracker, on_lost, &seen).await;
        let mut checks =
            tokio::time::interval_at(Instant::now() + backend.lost_after, backend.lost_after);
        loop {
            tokio::select! {
                biased;
                changed = connections.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                entry = entries.next() => match entry {
                    Some(Ok(entry)) => seen_entry(&backend, &tracker, on_lost, &mut seen, &entry),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "the nodes watch failed; watching again");
                        break;
                    }
                    None => break,
                },
                _ = checks.tick() => check(&backend, &tracker, on_lost, &seen).await,
            }
        }
        tokio::time::sleep(REWATCH_DELAY).await;
    }
}

/// One change in the nodes bucket.
fn seen_entry(
    backend: &Backend,
    tracker: &Tracker,
    on_lost: &OnLost,
    seen: &mut HashMap<String, Seen>,
    entry: &Entry,
) {
    let Some(node) = entry.key.strip_prefix("node.") else { return };
    match entry.operation {
        Operation::Put => {
            let Ok(info) = serde_json::from_slice::<NodeInfo>(&entry.value) else { return };
            let before = seen.insert(node.to_owned(), Seen::Live(info.lease));
            if info.lease > 0 && before != Some(Seen::Live(info.lease)) {
                // Back under a new lease: it has closed what it held under the old ones.
                on_lost(tracker.lose(node, info.lease));
            }
        }
        Operation::Delete => {
            seen.insert(node.to_owned(), Seen::Left);
            // Drained and gone: the sessions it handed over run elsewhere now.
            follow(backend, tracker.on_node(node));
        }
        Operation::Purge => {
            // A drained node stays `Left`, for the checks that find its entry gone.
            if seen.get(node) != Some(&Seen::Left) {
                seen.remove(node);
                // Expired: every lease registered before the marker is over.
                on_lost(tracker.lose(node, entry.revision));
            }
        }
    }
}

/// Reads the entry of each node with sessions here and loses those it no longer holds.
async fn check(
    backend: &Backend,
    tracker: &Tracker,
    on_lost: &OnLost,
    seen: &HashMap<String, Seen>,
) {
    for node in tracker.nodes() {
        let read = backend.nodes.entry(names::node_key(&node));
        let entry = match tokio::time::timeout(backend.lost_after, read).await {
            Ok(Ok(entry)) => entry,
            // Cannot tell: the next check will.
            _ => continue,
        };
        let lost = match entry {
            Some(entry) if entry.operation == Operation::Put => {
                match serde_json::from_slice::<NodeInfo>(&entry.value) {
                    Ok(info) if info.lease > 0 => tracker.lose(&node, info.lease),
                    _ => continue,
                }
            }
            _ if seen.get(&node) == Some(&Seen::Left) => continue,
            _ => tracker.lose(&node, u64::MAX),
        };
        on_lost(lost);
    }
}

/// Reads the records of `sessions`, in the background, and follows each that names a newer
/// placement (a drained node handed it over).
fn follow(backend: &Backend, sessions: Vec<Arc<Tracked>>) {
    if sessions.is_empty() {
        return;
    }
    let backend = backend.clone();
    tokio::spawn(async move {
        for tracked in sessions {
            let read = backend.session_record(&tracked.id);
            if let Ok(Ok(Some((record, revision)))) =
                tokio::time::timeout(backend.lost_after, read).await
                && !record.lost
            {
                tracked.moved(Placement::of(&record, revision));
            }
        }
    });
}

/// Writes `x_node_lost` into each session's events and marks its record, in the background.
pub(crate) fn declare(backend: &Backend, lost: Vec<LostPlacement>) {
    if lost.is_empty() {
        return;
    }
    tracing::warn!(node = %lost[0].placement.node, sessions = lost.len(), "node lost");
    let backend = backend.clone();
    tokio::spawn(async move {
        futures_util::stream::iter(lost)
            .for_each_concurrent(DECLARE_CONCURRENCY, |tracked| {
                let backend = backend.clone();
                async move { declare_one(&backend, &tracked).await }
            })
            .await;
    });
}

/// Declares one session lost, trying until it is done or [`DECLARE_FOR`] has passed.
async fn declare_one(backend: &Backend, tracked: &LostPlacement) {
    let deadline = Instant::now() + DECLARE_FOR;
    let mut delay = Duration::from_millis(50);
    loop {
        match try_declare(backend, tracked).await {
            Ok(()) => return,
            Err(e) if Instant::now() + delay < deadline => {
                tracing::debug!(session = %tracked.id, error = %e, "cannot declare the loss yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::warn!(session = %tracked.id, error = %e, "cannot declare the loss");
                return;
            }
        }
    }
}

/// The marker, then the record, unless the record says it is done already or the session
/// ended before its node (no record).
async fn try_declare(backend: &Backend, lost: &LostPlacement) -> Result<(), ClusterError> {
    let (id, placement) = (&lost.id, &lost.placement);
    let Some((mut record, revision)) = backend.session_record(id).await? else {
        return Ok(());
    };
    // Marked already, or moved on: a late marker would be about a placement readers left.
    if record.lost || !placement.named_by(&record) {
        return Ok(());
    }
    mark(backend, lost).await?;
    record.lost = true;
    let body = serde_json::to_vec(&record).map_err(ClusterError::nats)?;
    mark_lost(backend, &names::session_key(id), body.into(), revision).await
}

/// Stores the `x_node_lost` marker of a placement in the session's events, once whoever
/// writes it within the stream's duplicate window.
pub(crate) async fn mark(backend: &Backend, lost: &LostPlacement) -> Result<(), ClusterError> {
    let (id, placement) = (&lost.id, &lost.placement);
    let marker = Marker::NodeLost {
        session_id: id.clone(),
        node: placement.node.clone(),
        boot_id: placement.boot_id.clone(),
        lease: placement.lease,
    };
    let message = PublishMessage::build()
        .payload(marker.encode().into())
        .message_id(names::node_lost_id(id, &placement.node, placement.lease));
    let subject = names::events_subject(id);
    store(&backend.js, subject, message).await.map_err(ClusterError::nats)
}

/// Writes the `lost` record over `revision` (another host marked it first, or the node let the
/// session go since, if that is no longer the last). It expires with the events it points at
/// (`EVENTS_MAX_AGE`), so a node that never comes back leaves no record behind
/// (docs/cluster.md#failure); in a bucket made without per-message TTLs it stays.
async fn mark_lost(
    backend: &Backend,
    key: &str,
    body: bytes::Bytes,
    revision: u64,
) -> Result<(), ClusterError> {
    // The key-value API offers a TTL only to `create`; an update is this publish on the key's
    // subject, compare-and-set on the key's last revision.
    let subject = format!("$KV.{}.{key}", names::SESSIONS_BUCKET);
    let message = PublishMessage::build()
        .payload(body.clone())
        .expected_last_subject_sequence(revision)
        .ttl(names::EVENTS_MAX_AGE);
    match store(&backend.js, subject, message).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(()),
        Err(e) if ttl_disabled(&e) => match backend.sessions.update(key, body, revision).await {
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(()),
            done => done.map(drop).map_err(ClusterError::nats),
        },
        Err(e) => Err(ClusterError::nats(e)),
    }
}

/// The stream refused a message with a TTL: it was made without `allow_msg_ttl`.
fn ttl_disabled(e: &PublishError) -> bool {
    std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
        .is_some_and(|e| e.error_code() == ErrorCode::MESSAGE_TTL_DISABLED)
}
