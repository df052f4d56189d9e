//! The node's lease on its hosts (docs/cluster.md#host-lease): a session is held by the host
//! that started it and by any host that sent it a command; hosts beat every second on
//! `colloquy.host.<id>.beat`, and a session whose holders have all been silent for
//! `host_lost_after` is closed with reason [`HOST_LOST`]. Otherwise a host that dies (its idle
//! timers die with it) would leave its sessions holding the node's room until a drain.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::shared::NodeShared;
use crate::error::ClusterError;
use crate::names::{self, HOST_HEARTBEAT};

/// The reason a session closes with when every host that held it went silent.
pub const HOST_LOST: &str = colloquy_model::CloseReason::HostLost.name();

/// Records that `host` holds session `id` (it started or commanded it) and is alive.
pub(super) fn hold(shared: &NodeShared, id: &str, host: &str) {
    shared.lock_hosts().insert(host.to_owned(), Instant::now());
    if let Some(live) = shared.lock_sessions().get_mut(id)
        && !live.holders.contains(host)
    {
        live.holders.insert(host.to_owned());
    }
}

/// Hears the hosts' beats and closes the sessions whose hosts all went silent, checking every
/// host beat; in a task the node ends when it stops.
pub(super) async fn watch(shared: &Arc<NodeShared>) -> Result<AbortHandle, ClusterError> {
    let mut beats =
        shared.backend.client.subscribe(names::HOST_BEATS).await.map_err(ClusterError::nats)?;
    let shared = Arc::clone(shared);
    let task = tokio::spawn(async move {
        let mut connections = shared.backend.connections.clone();
        connections.borrow_and_update();
        let mut checks = tokio::time::interval(HOST_HEARTBEAT);
        loop {
            tokio::select! {
                biased;
                changed = connections.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Away from NATS, the node heard nobody: silence is counted afresh.
                    let now = Instant::now();
                    shared.lock_hosts().values_mut().for_each(|heard| *heard = now);
                }
                beat = beats.next() => {
                    let Some(beat) = beat else { return };
                    if let Some(host) = names::beat_host(&beat.subject) {
                        shared.lock_hosts().insert(host.to_owned(), Instant::now());
                    }
                }
                _ = checks.tick() => close_orphans(&shared),
            }
        }
    });
    Ok(task.abort_handle())
}

/// Closes each session whose holders have all been silent past `host_lost_after`, and forgets
/// the hosts that are silent or hold nothing here.
fn close_orphans(shared: &NodeShared) {
    let bound = shared.config.host_lost_after;
    let now = Instant::now();
    let heard: HashMap<String, Instant> = shared.lock_hosts().clone();
    let alive = |host: &String| heard.get(host).is_some_and(|at| now < *at + bound);
    let mut orphans = Vec::new();
    let mut holding = std::collections::BTreeSet::new();
    for live in shared.lock_sessions().values_mut() {
        if live.holders.is_empty() {
            continue;
        }
        if live.holders.iter().any(alive) {
            holding.extend(live.holders.iter().cloned());
        } else {
            // Cleared, so the close is asked once.
            live.holders.clear();
            orphans.push(live.handle.clone());
        }
    }
    // A host heard lately is kept: it may be about to hold a session (`hold`).
    shared.lock_hosts().retain(|host, at| holding.contains(host) || now < *at + bound);
    for session in orphans {
        tracing::warn!(
            node = %shared.name, session = %session.id(), after = ?bound,
            "every host of the session went silent: closing it"
        );
        tokio::spawn(async move { session.close_with_reason(HOST_LOST).await });
    }
}
