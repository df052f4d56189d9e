//! Losing a node, seen from a host (docs/cluster.md#failure). One task per [`Cluster`](super::Cluster)
//! watches the nodes bucket, polled without pause and made again after an error or a
//! reconnect, and checks the nodes of its sessions directly after each (re)start and every
//! `max_age`, in case a watch misses an expiry. A node is lost when its entry expires (a
//! `Purge`: the server's expiry marker) or comes back under a greater lease; a delete is a
//! drained node leaving, not a loss. Each session of this host on a lost node is marked at once
//! (its calls fail [`ClusterError::NodeLost`]), then declared in the stream: an `x_node_lost`
//! marker written into its events, and its record marked `lost`.

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

/// One session this host drives, as its loss detection sees it: shared by its
/// [`RemoteSession`](super::RemoteSession) clones.
#[derive(Debug)]
pub(crate) struct Tracked {
    pub(crate) id: String,
    pub(crate) node: String,
    pub(crate) boot_id: String,
    pub(crate) lease: u64,
    lost: watch::Sender<bool>,
}

impl Tracked {
    /// Session `id`, placed on `node` (that boot, under that lease), not lost yet.
    pub(crate) fn new(id: &str, node: &str, boot_id: &str, lease: u64) -> Self {
        Self {
            id: id.to_owned(),
            node: node.to_owned(),
            boot_id: boot_id.to_owned(),
            lease,
            lost: watch::channel(false).0,
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves once the session's node is found lost.
    pub(crate) async fn lost(&self) {
        let mut lost = self.lost.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Marks it lost; false if it already was.
    pub(crate) fn mark_lost(&self) -> bool {
        !self.lost.send_replace(true)
    }
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

    /// The session's entry, shared with the handles this host already has on it.
    pub(crate) fn track(&self, id: &str, node: &str, boot_id: &str, lease: u64) -> Arc<Tracked> {
        let mut sessions = self.lock();
        if let Some(tracked) = sessions.by_id.get(id).and_then(Weak::upgrade)
            && tracked.node == node
            && tracked.lease == lease
        {
            return tracked;
        }
        if sessions.by_id.len() >= sessions.prune_at {
            sessions.by_id.retain(|_, t| t.strong_count() > 0);
            sessions.prune_at = (sessions.by_id.len() * 2).max(64);
        }
        let tracked = Arc::new(Tracked::new(id, node, boot_id, lease));
        sessions.by_id.insert(id.to_owned(), Arc::downgrade(&tracked));
        tracked
    }

    /// The nodes of the sessions tracked, not yet lost.
    fn nodes(&self) -> BTreeSet<String> {
        let sessions = self.lock();
        let live = sessions.by_id.values().filter_map(Weak::upgrade).filter(|t| !t.is_lost());
        live.map(|t| t.node.clone()).collect()
    }

    /// Marks lost the sessions on `node` under a lease older than `before`; returns those
    /// that were not lost yet.
    fn lose(&self, node: &str, before: u64) -> Vec<Arc<Tracked>> {
        let sessions = self.lock();
        let on_node = sessions.by_id.values().filter_map(Weak::upgrade);
        on_node.filter(|t| t.node == node && t.lease < before && t.mark_lost()).collect()
    }
}

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
pub(crate) async fn watch_nodes(backend: Backend, tracker: Arc<Tracker>) {
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
        check(&backend, &tracker, &seen).await;
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
                    Some(Ok(entry)) => seen_entry(&backend, &tracker, &mut seen, &entry),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "the nodes watch failed; watching again");
                        break;
                    }
                    None => break,
                },
                _ = checks.tick() => check(&backend, &tracker, &seen).await,
            }
        }
        tokio::time::sleep(REWATCH_DELAY).await;
    }
}

/// One change in the nodes bucket.
fn seen_entry(
    backend: &Backend,
    tracker: &Tracker,
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
                declare(backend, tracker.lose(node, info.lease));
            }
        }
        Operation::Delete => {
            seen.insert(node.to_owned(), Seen::Left);
        }
        Operation::Purge => {
            // A drained node stays `Left`, for the checks that find its entry gone.
            if seen.get(node) != Some(&Seen::Left) {
                seen.remove(node);
                // Expired: every lease registered before the marker is over.
                declare(backend, tracker.lose(node, entry.revision));
            }
        }
    }
}

/// Reads the entry of each node with sessions here and loses those it no longer holds.
async fn check(backend: &Backend, tracker: &Tracker, seen: &HashMap<String, Seen>) {
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
        declare(backend, lost);
    }
}

/// Writes `x_node_lost` into each session's events and marks its record, in the background.
pub(crate) fn declare(backend: &Backend, lost: Vec<Arc<Tracked>>) {
    if lost.is_empty() {
        return;
    }
    tracing::warn!(node = %lost[0].node, sessions = lost.len(), "node lost");
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
async fn declare_one(backend: &Backend, tracked: &Tracked) {
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
async fn try_declare(backend: &Backend, tracked: &Tracked) -> Result<(), ClusterError> {
    let key = names::session_key(&tracked.id);
    let sessions = &backend.sessions;
    let Some(entry) = sessions.entry(&key).await.map_err(ClusterError::nats)? else {
        return Ok(());
    };
    if entry.operation != Operation::Put {
        return Ok(());
    }
    let mut record: SessionRecord =
        serde_json::from_slice(&entry.value).map_err(ClusterError::nats)?;
    if record.lost || record.node != tracked.node || record.lease != tracked.lease {
        return Ok(());
    }
    let marker = Marker::NodeLost {
        session_id: tracked.id.clone(),
        node: tracked.node.clone(),
        boot_id: tracked.boot_id.clone(),
        lease: tracked.lease,
    };
    let message = PublishMessage::build()
        .payload(marker.encode().into())
        .message_id(names::node_lost_id(&tracked.id));
    let subject = names::events_subject(&tracked.id);
    store(&backend.js, subject, message).await.map_err(ClusterError::nats)?;
    record.lost = true;
    let body = serde_json::to_vec(&record).map_err(ClusterError::nats)?;
    mark_lost(backend, &key, body.into(), entry.revision).await
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
