//! Draining a node: no new session; its sessions get the drain timeout to end by themselves,
//! then the rest are closed with reason `node_draining`; their last events are published,
//! the node leaves the nodes bucket and stops. Asked by [`NodeHandle::drain`](super::NodeHandle::drain),
//! a host's request on the node's drain subject, or SIGTERM / SIGINT under
//! [`NodeBuilder::run`](super::NodeBuilder::run).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::shared::{DrainReport, NodeShared, OnDrain};
use super::{announce, handoff};
use crate::error::ClusterError;
use crate::names;

/// The reason sessions closed by a drain carry in `session_closed`.
pub const NODE_DRAINING: &str = colloquy_model::CloseReason::NodeDraining.name();

/// How long a drain waits for the last events of the sessions it closed to be stored.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Drains once; a second caller waits for the first drain and gets its report.
pub(super) async fn drain(shared: &Arc<NodeShared>) -> DrainReport {
    shared.drained.get_or_init(|| run(shared)).await.clone()
}

async fn run(shared: &Arc<NodeShared>) -> DrainReport {
    shared.draining.store(true, Ordering::Release);
    shared.changed.notify_one();
    let mut count = shared.count.subscribe();
    let before = *count.borrow_and_update();
    let timeout = shared.config.drain_timeout;
    let deadline = Instant::now() + timeout;
    let moved = match shared.config.on_drain {
        OnDrain::Move if shared.config.store.is_some() => handoff::move_all(shared, deadline).await,
        _ => 0,
    };
    let mut closed = 0;
    if tokio::time::timeout_at(deadline, count.wait_for(|n| *n == 0)).await.is_err() {
        let sessions = shared.host.sessions();
        closed = sessions.len();
        tracing::info!(node = %shared.name, sessions = closed, "drain timeout: closing sessions");
        let closes = sessions.iter().map(|s| s.close_with_reason(NODE_DRAINING));
        futures_util::future::join_all(closes).await;
        if tokio::time::timeout(FLUSH_TIMEOUT, count.wait_for(|n| *n == 0)).await.is_err() {
            tracing::warn!(node = %shared.name, "drain: some sessions' last events not stored");
        }
    }
    // The announcer stops before the entry goes, so it cannot write it back.
    shared.stop_tasks();
    announce::remove(shared).await;
    let _ = shared.backend.client.flush().await;
    DrainReport { ended: before.saturating_sub(closed + moved), closed, moved }
}

/// Takes drain requests from hosts: answers, then drains.
pub(super) async fn serve(shared: &Arc<NodeShared>) -> Result<AbortHandle, ClusterError> {
    let subject = names::drain_subject(&shared.name);
    shared
        .serve(subject, |shared, message| async move {
            shared.answer(message.reply, b"{}".to_vec()).await;
            shared.drain_requested.notify_one();
            // A task of its own: the drain ends the one serving this subject.
            tokio::spawn(async move { drain(&shared).await });
        })
        .await
}

/// Returns on SIGTERM, SIGINT or a drain request.
pub(super) async fn on_signal(shared: &NodeShared) -> Result<(), ClusterError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| ClusterError::Config(format!("cannot watch SIGTERM: {e}")))?;
        tokio::select! {
            biased;
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            () = shared.drain_requested.notified() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => {}
        () = shared.drain_requested.notified() => {}
    }
    Ok(())
}
