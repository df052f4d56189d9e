//! Moving a session whose node was lost (docs/cluster.md#moves). A host that finds the node of
//! one of its sessions lost declares the loss (`loss.rs`) and, if that node journaled the
//! session, asks a live durable node to resume it. Which node resumes it is decided by the
//! session's record, not by who asked first: each resuming node claims the record with a
//! compare-and-set before it touches the journal, so of hosts that all notice the loss, one
//! move wins and the others follow the record to it. Commands sent meanwhile wait for the move
//! (`Tracked::settled`); a move that finds no node within [`MOVE_TIMEOUT`] loses the session.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Cluster;
use super::loss::{self, LostPlacement, Phase, Placement, Tracked};
use super::shared::{ClusterInner, Holder};
use crate::error::ClusterError;

/// How long a host tries to move a session whose node was lost (a live durable node that
/// serves its agent may be starting) before it counts the session lost with its node.
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest pause between two attempts at a move.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Declares each placement found lost, and moves the sessions their nodes journaled.
pub(crate) fn found_lost(inner: &Arc<ClusterInner>, lost: Vec<(Arc<Tracked>, Arc<Placement>)>) {
    let declared = lost
        .iter()
        .map(|(t, p)| LostPlacement { id: t.id.clone(), placement: Arc::clone(p) })
        .collect();
    loss::declare(&inner.backend, declared);
    for (tracked, from) in lost {
        if tracked.phase() == Phase::Moving {
            tokio::spawn(run(Arc::clone(inner), tracked, from));
        }
    }
}

/// Moves one session, trying until it runs somewhere or [`MOVE_TIMEOUT`] has passed.
async fn run(inner: Arc<ClusterInner>, tracked: Arc<Tracked>, from: Arc<Placement>) {
    let deadline = Instant::now() + MOVE_TIMEOUT;
    let mut delay = Duration::from_millis(100);
    loop {
        let why = match attempt(&inner, &tracked, &from).await {
            Ok(()) => return,
            Err(Attempt::Final(why)) => {
                tracing::warn!(session = %tracked.id, from = %from.node, "cannot move: {why}");
                tracked.mark_lost();
                return;
            }
            Err(Attempt::Again(why)) => why,
        };
        if tracked.phase() != Phase::Moving {
            return;
        }
        if Instant::now() + delay >= deadline {
            tracing::warn!(
                session = %tracked.id, from = %from.node, after = ?MOVE_TIMEOUT,
                "cannot move the session: {why}"
            );
            tracked.mark_lost();
            return;
        }
        tracing::debug!(session = %tracked.id, "cannot move yet: {why}");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// Why an attempt did not move the session.
enum Attempt {
    /// Nothing will: the session ended.
    Final(String),
    /// Another attempt may.
    Again(String),
}

/// Follows the record if another move came first; else asks a node to resume the session.
async fn attempt(
    inner: &Arc<ClusterInner>,
    tracked: &Tracked,
    from: &Placement,
) -> Result<(), Attempt> {
    let again = |e: ClusterError| Attempt::Again(e.to_string());
    match inner.session_entry(&tracked.id).await.map_err(again)? {
        None => return Err(Attempt::Final("it has ended".into())),
        Some((record, revision)) if !from.named_by(&record) && !record.lost => {
            tracked.moved(Placement::of(&record, revision));
            return Ok(());
        }
        // Still there, its node live under that lease: the loss was misread.
        Some((record, _)) if !record.lost => {
            if let Holder::Live(lease) = inner.holder(&from.node).await
                && lease == from.lease
            {
                tracked.alive_again(from);
                return Ok(());
            }
        }
        Some(_) => {}
    }
    // The placement's answer moves `tracked` (the tracker shares it).
    let cluster = Cluster { inner: Arc::clone(inner) };
    cluster.resume_session(&tracked.id).await.map(drop).map_err(again)
}
