//! A drain that moves (docs/cluster.md#drain-moves): each session of the node is handed to
//! another durable node that serves its agent, so a rolling deploy closes no conversation.
//!
//! For each session, all at once: if some other node could take it, wait (within the drain
//! timeout) for it to be quiet — no reply under way, no call running — then stop taking its
//! commands (its hosts get no answer, and send again until it runs elsewhere), suspend it (or,
//! past the timeout, stop it where it stands: its running calls are then in doubt, settled by
//! their tools' policies), store its last events (its suspend is not published: it does not
//! end), mark its record released, and ask the least loaded other node to resume it, as a
//! host would after a loss. The journal is on the server already: nothing is copied. A
//! session that no other node can take is left to the drain's close.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use colloquy_actors::SessionHandle;
use tokio::sync::watch;
use tokio::time::Instant;

use super::shared::NodeShared;
use crate::error::ClusterError;
use crate::host::Cluster;
use crate::names;
use crate::wire::{NodeInfo, SessionRecord};

/// How long a handed-over session's last events may take to be stored.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// One session to hand over, as the node holds it.
struct Leaving {
    handle: SessionHandle,
    agent: String,
    holders: Vec<String>,
    commands: tokio::task::AbortHandle,
    moving: Arc<std::sync::atomic::AtomicBool>,
    published: watch::Receiver<bool>,
}

/// Hands every session another node can take over; returns how many left this node so.
pub(super) async fn move_all(shared: &Arc<NodeShared>, deadline: Instant) -> usize {
    let leaving: Vec<Leaving> = shared
        .lock_sessions()
        .values()
        .map(|live| Leaving {
            handle: live.handle.clone(),
            agent: live.agent.clone(),
            holders: live.holders.iter().cloned().collect(),
            commands: live.tasks[0].clone(),
            moving: Arc::clone(&live.moving),
            published: live.published.clone(),
        })
        .collect();
    if leaving.is_empty() {
        return 0;
    }
    let cluster = Cluster::for_node(shared.backend.clone());
    let moves = leaving.into_iter().map(|s| move_one(shared, &cluster, s, deadline));
    let moved = futures_util::future::join_all(moves).await;
    moved.into_iter().filter(|m| *m).count()
}

/// Hands one session over; false if it stays (no other node could take it).
async fn move_one(
    shared: &Arc<NodeShared>,
    cluster: &Cluster,
    leaving: Leaving,
    deadline: Instant,
) -> bool {
    let id = leaving.handle.id().to_owned();
    match another_node(shared, cluster, &leaving.agent).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(session = %id, agent = %leaving.agent, "no other node takes it: it stays");
            return false;
        }
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "cannot read the nodes: the session stays");
            return false;
        }
    }
    let handle = &leaving.handle;
    if let Ok(Err(_)) = tokio::time::timeout_at(deadline, handle.wait_for_quiet()).await {
        return false; // It ended by itself.
    }
    leaving.moving.store(true, Ordering::Release);
    leaving.commands.abort();
    // A command that came in before the abort (a turn taken) is let finish here.
    let quiet = tokio::time::timeout_at(deadline, handle.wait_for_quiet()).await;
    match quiet {
        Ok(Ok(())) => {
            if let Err(e) = handle.suspend().await {
                tracing::warn!(session = %id, error = %e, "the suspend failed: stopping it");
                handle.actor_cell().kill();
            }
        }
        // Past the drain timeout (or it ended meanwhile): stopped where it stands, as a crash
        // would, its running calls in doubt.
        _ => handle.actor_cell().kill(),
    }
    let mut published = leaving.published;
    if tokio::time::timeout(FLUSH_TIMEOUT, published.wait_for(|p| *p)).await.is_err() {
        tracing::warn!(session = %id, "its last events were not all stored before the move");
    }
    if let Err(e) = release(shared, &id).await {
        tracing::warn!(session = %id, error = %e, "cannot release the session's record");
        return false;
    }
    match cluster.resume(&id, leaving.holders).await {
        Ok(moved) => {
            tracing::info!(session = %id, to = %moved.node(), "handed over");
            true
        }
        // Released: its hosts move it when their next command finds it gone
        // (docs/cluster.md#moves).
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "no node resumed it: its hosts will");
            true
        }
    }
}

/// Whether a live durable node other than this one serves `agent` and would take a session.
async fn another_node(
    shared: &NodeShared,
    cluster: &Cluster,
    agent: &str,
) -> Result<bool, ClusterError> {
    let nodes = cluster.nodes().await?;
    let takes = |n: &NodeInfo| n.name != shared.name && n.durable && n.refusal(agent).is_none();
    Ok(nodes.iter().any(takes))
}

/// Marks the session's record as no node's (`lost`), if it still names this node: the node
/// that resumes it claims it from there.
async fn release(shared: &NodeShared, id: &str) -> Result<(), ClusterError> {
    let record = shared.backend.session_record(id).await?;
    let (record, revision) = record.ok_or_else(|| ClusterError::NotFound(id.to_owned()))?;
    if record.node != shared.name || record.boot_id != shared.boot_id {
        return Ok(());
    }
    let released = SessionRecord { lost: true, ..record };
    let body = serde_json::to_vec(&released).map_err(ClusterError::nats)?;
    let key = names::session_key(id);
    let written = shared.backend.sessions.update(&key, body.into(), revision).await;
    written.map(drop).map_err(ClusterError::nats)
}
