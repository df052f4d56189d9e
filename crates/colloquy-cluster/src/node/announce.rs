//! The node's entry in the nodes bucket: taken at start (refused if a live node holds the
//! name), rewritten every [`HEARTBEAT`] and at once when its sessions or its draining flag
//! change, removed by a drain. The entry expires [`NODE_TTL`](crate::names::NODE_TTL) after the
//! last write, which is how a node that dies leaves the bucket.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{CreateErrorKind, UpdateErrorKind};

use super::shared::NodeShared;
use crate::error::ClusterError;
use crate::names;

/// How often a node refreshes its entry (it also writes at once when its sessions change).
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Takes the node's name: its first entry. Returns the entry's revision.
pub(super) async fn register(shared: &NodeShared) -> Result<u64, ClusterError> {
    let key = names::node_key(&shared.name);
    match shared.backend.nodes.create(&key, entry(shared)).await {
        Ok(revision) => Ok(revision),
        Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
            Err(ClusterError::NameTaken(shared.name.clone()))
        }
        Err(e) => Err(ClusterError::nats(e)),
    }
}

/// Refreshes the entry for as long as the node runs.
pub(super) async fn run(shared: Arc<NodeShared>, mut revision: u64) {
    loop {
        tokio::select! {
            biased;
            () = shared.changed.notified() => {}
            () = tokio::time::sleep(HEARTBEAT) => {}
        }
        revision = refresh(&shared, revision).await;
    }
}

/// Writes the entry over `revision`; returns the new revision, or `revision` if the write
/// failed (NATS away: the next beat tries again).
async fn refresh(shared: &NodeShared, revision: u64) -> u64 {
    let key = names::node_key(&shared.name);
    let nodes = &shared.backend.nodes;
    match nodes.update(&key, entry(shared), revision).await {
        Ok(revision) => revision,
        // The entry expired (the node stalled past its TTL, or the server lost it): take the
        // name again. Fencing the sessions of a node that was given up is not built yet
        // (docs/cluster.md#not-built-yet).
        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
            match nodes.create(&key, entry(shared)).await {
                Ok(revision) => {
                    tracing::warn!(node = %shared.name, "node entry had expired; registered again");
                    revision
                }
                Err(e) => {
                    tracing::warn!(node = %shared.name, error = %e, "cannot register the node again");
                    revision
                }
            }
        }
        Err(e) => {
            tracing::debug!(node = %shared.name, error = %e, "node heartbeat failed");
            revision
        }
    }
}

/// Leaves the bucket (a drained node).
pub(super) async fn remove(shared: &NodeShared) {
    let key = names::node_key(&shared.name);
    if let Err(e) = shared.backend.nodes.delete(&key).await {
        tracing::warn!(node = %shared.name, error = %e, "cannot remove the node's entry");
    }
}

fn entry(shared: &NodeShared) -> bytes::Bytes {
    // Strings, numbers and booleans: serialization cannot fail.
    serde_json::to_vec(&shared.info()).unwrap_or_default().into()
}
