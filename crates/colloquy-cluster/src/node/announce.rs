//! The node's entry in the nodes bucket and the lease it holds by it (docs/cluster.md#failure):
//! taken at start (refused if a live node holds the name), rewritten every heartbeat and at once
//! when its sessions, its draining flag or its connection change, removed by a drain. The entry expires the
//! bucket's `max_age` after the last write, which is how a node that dies or is cut off leaves
//! the bucket; a node that finds its entry gone has been given up, so it stops its sessions
//! ([`fence`]) and registers again under a new lease.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::kv::{CreateErrorKind, Operation, UpdateErrorKind};
use tokio::time::Instant;

use super::fence;
use super::shared::NodeShared;
use crate::error::ClusterError;
use crate::names;
use crate::wire::NodeInfo;

/// Takes the node's name: its first entry, then the same with the lease filled in. Returns the
/// entry's revision.
pub(super) async fn register(shared: &NodeShared) -> Result<u64, ClusterError> {
    let sent = Instant::now();
    match take_lease(shared).await {
        Ok(revision) => {
            shared.renewed.send_replace(sent);
            Ok(revision)
        }
        Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
            Err(ClusterError::NameTaken(shared.name.clone()))
        }
        Err(e) => Err(ClusterError::nats(e)),
    }
}

/// Creates the entry and rewrites it with its own revision as the lease.
async fn take_lease(shared: &NodeShared) -> Result<u64, async_nats::jetstream::kv::CreateError> {
    let key = names::node_key(&shared.name);
    let nodes = &shared.backend.nodes;
    let mut info = shared.info();
    info.lease = 0;
    let lease = nodes.create(&key, encode(&info)).await?;
    shared.lease.store(lease, Ordering::Release);
    // Should this write fail, the next heartbeat writes the lease.
    Ok(nodes.update(&key, entry(shared), lease).await.unwrap_or(lease))
}

/// The pause before a failed write of the entry is tried again: much less than a beat, so a
/// node back on NATS renews its lease well before its fence.
const RETRY: Duration = Duration::from_millis(100);

/// Refreshes the entry for as long as the node runs: every beat, at once when its sessions
/// change or its connection comes back, and soon again after a write that failed.
pub(super) async fn run(shared: Arc<NodeShared>, mut revision: u64) {
    let mut connections = shared.backend.connections.clone();
    connections.borrow_and_update();
    let mut pause = shared.heartbeat();
    loop {
        tokio::select! {
            biased;
            () = shared.changed.notified() => {}
            changed = connections.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(pause) => {}
        }
        if shared.paused.load(Ordering::Acquire) {
            pause = shared.heartbeat();
            continue;
        }
        let stored;
        (revision, stored) = refresh(&shared, revision).await;
        pause = if stored { shared.heartbeat() } else { RETRY.min(shared.heartbeat()) };
    }
}

/// Writes the entry over `revision`; returns the new revision and whether the write was
/// stored, or `revision` if it failed (NATS away: the caller tries again soon, and the fence
/// watches the time).
async fn refresh(shared: &Arc<NodeShared>, revision: u64) -> (u64, bool) {
    let key = names::node_key(&shared.name);
    let sent = Instant::now();
    // Bounded by a beat, so a slow server does not hold the next beats back.
    let write = shared.backend.nodes.update(&key, entry(shared), revision);
    match tokio::time::timeout(shared.heartbeat(), write).await {
        Ok(Ok(revision)) => {
            renewed(shared, sent);
            (revision, true)
        }
        Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
            lapsed(shared, revision).await
        }
        Ok(Err(e)) => {
            tracing::debug!(node = %shared.name, error = %e, "node heartbeat failed");
            (revision, false)
        }
        Err(_) => {
            tracing::debug!(node = %shared.name, "node heartbeat timed out");
            (revision, false)
        }
    }
}

/// The entry is not at `revision`. Either a write that timed out was stored after all (the
/// entry is still this lease's: carry on from it), or the entry expired and hosts have given
/// the node up: its sessions are closed and it registers again, under a new lease.
async fn lapsed(shared: &Arc<NodeShared>, revision: u64) -> (u64, bool) {
    let key = names::node_key(&shared.name);
    let nodes = &shared.backend.nodes;
    match nodes.entry(&key).await {
        Ok(Some(entry)) if entry.operation == Operation::Put && is_ours(shared, &entry.value) => {
            return (entry.revision, false);
        }
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(node = %shared.name, error = %e, "cannot read the node's entry");
            return (revision, false);
        }
    }
    fence::fence(shared, "its entry expired: hosts have given it up");
    let sent = Instant::now();
    match take_lease(shared).await {
        Ok(revision) => {
            renewed(shared, sent);
            tracing::warn!(node = %shared.name, lease = shared.lease(), "registered again");
            (revision, true)
        }
        Err(e) => {
            // Another live node holds the name, or NATS is away: try again soon.
            tracing::warn!(node = %shared.name, error = %e, "cannot register the node again");
            (revision, false)
        }
    }
}

/// A write sent at `sent` was stored: the lease holds, and the node takes sessions again.
fn renewed(shared: &NodeShared, sent: Instant) {
    shared.renewed.send_replace(sent);
    shared.fenced.store(false, Ordering::Release);
}

/// Whether an entry is this node's, under its current lease.
fn is_ours(shared: &NodeShared, value: &[u8]) -> bool {
    serde_json::from_slice::<NodeInfo>(value)
        .is_ok_and(|info| info.boot_id == shared.boot_id && info.lease == shared.lease())
}

/// Leaves the bucket (a drained node).
pub(super) async fn remove(shared: &NodeShared) {
    let key = names::node_key(&shared.name);
    if let Err(e) = shared.backend.nodes.delete(&key).await {
        tracing::warn!(node = %shared.name, error = %e, "cannot remove the node's entry");
    }
}

fn entry(shared: &NodeShared) -> bytes::Bytes {
    encode(&shared.info())
}

fn encode(info: &NodeInfo) -> bytes::Bytes {
    // Strings, numbers and booleans: serialization cannot fail.
    serde_json::to_vec(info).unwrap_or_default().into()
}
