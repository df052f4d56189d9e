//! Fencing (docs/cluster.md#failure): a node that has lost its lease closes its sessions with
//! reason `node_lost`, so a session given up by its hosts never goes on running. The node
//! learns it from its entry (gone when it writes again: `announce.rs`) or, cut
//! off from NATS, from its own clock: no write stored for the bucket's `max_age` minus a margin,
//! and it stops before any host can have declared it lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::NodeShared;

/// The reason sessions closed by a fence carry in `session_closed`.
pub const NODE_LOST: &str = "node_lost";

/// Gives the lease up: every session is closed with reason [`NODE_LOST`], and the node takes
/// none until it has written its entry again. Does nothing if the node is already fenced.
pub(super) fn fence(shared: &Arc<NodeShared>, why: &str) {
    if shared.fenced.swap(true, Ordering::AcqRel) {
        return;
    }
    let sessions = shared.session_handles();
    tracing::warn!(node = %shared.name, sessions = sessions.len(), "fenced: {why}");
    tokio::spawn(async move {
        let closes = sessions.iter().map(|s| s.close_with_reason(NODE_LOST));
        futures_util::future::join_all(closes).await;
    });
}

/// Fences the node once no write of its entry has been stored for
/// [`fence_after`](NodeShared::fence_after), measured from when that write was sent.
pub(super) async fn watch(shared: Arc<NodeShared>) {
    let mut renewed = shared.renewed.subscribe();
    loop {
        let deadline = *renewed.borrow_and_update() + shared.fence_after();
        tokio::select! {
            changed = renewed.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                let after = shared.fence_after();
                fence(&shared, &format!("no heartbeat stored for {after:?}"));
                if renewed.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}
