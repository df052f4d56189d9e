//! Fencing (docs/cluster.md#fencing): a node that has lost its lease stops its sessions at
//! once, without a word, so a session given up by its hosts never goes on running: no more
//! model requests, no more tool side effects, no more events. The node learns it from its
//! entry (gone when it writes again: `announce.rs`), from its own clock (no write stored for
//! the bucket's `max_age` minus a margin, so it stops before any host can have declared it
//! lost), or from the same clock checked before each event it publishes and each command it
//! runs ([`NodeShared::holds_lease`]), whichever comes first after a stall.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::{LiveSession, NodeShared};
use crate::host::loss::{self, LostPlacement, Placement};

/// Why a fence stopped a node's sessions, as its log says. No `session_closed` is published
/// for them (a fenced node publishes nothing of theirs): their readers end with the
/// `x_node_lost` marker, which the node writes itself once NATS takes it, as a host would.
pub const NODE_LOST: &str = colloquy_model::CloseReason::NodeLost.name();

/// Gives the lease up: every session is stopped ([`stop`]), and the node takes none until
/// it has written its entry again. Does nothing if the node is already fenced.
pub(crate) fn fence(shared: &Arc<NodeShared>, why: &str) {
    if shared.fenced.swap(true, Ordering::AcqRel) {
        return;
    }
    let sessions = shared.take_sessions();
    tracing::warn!(node = %shared.name, sessions = sessions.len(), reason = NODE_LOST, "fenced: {why}");
    stop(shared, sessions);
}

/// Stops `sessions` at once: their command servers and publishers end where they are, and
/// their actors are killed, which aborts their model requests and tool bodies (a graceful
/// close would let running calls finish and publish what they did). Their records stay, so
/// that their hosts, or the node itself, declare them lost.
pub(crate) fn stop(shared: &NodeShared, sessions: Vec<LiveSession>) {
    if sessions.is_empty() {
        return;
    }
    let mut lost = Vec::with_capacity(sessions.len());
    for live in sessions {
        for task in &live.tasks {
            task.abort();
        }
        live.handle.actor_cell().kill();
        let placement = Placement {
            node: shared.name.clone(),
            boot_id: shared.boot_id.clone(),
            lease: live.lease,
            durable: shared.config.store.is_some(),
            revision: 0,
        };
        let id = live.handle.id().to_owned();
        lost.push(LostPlacement { id, placement: Arc::new(placement) });
    }
    // A host may never see the loss (the entry did not expire before the node wrote it
    // again): the node writes the marker itself, retried until NATS takes it.
    loss::declare(&shared.backend, lost);
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
