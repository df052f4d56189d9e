//! Placement requests for this node: admission (checked again here, since a host ranks nodes
//! from announcements up to a second old), then the session's start. Requests are taken one
//! at a time, so two cannot both pass the threshold.

use std::sync::Arc;

use async_nats::jetstream::kv::UpdateErrorKind;
use colloquy_actors::Session;
use colloquy_edge::history;
use colloquy_edge::hosting::{Hosted, StartError};
use tokio::task::AbortHandle;

use super::shared::{NodeShared, SessionStart};
use super::{hosts, serve};
use crate::error::ClusterError;
use crate::host::loss::{self, LostPlacement, Placement};
use crate::names;
use crate::wire::{
    Admission, CLUSTER_VERSION, NodeInfo, PlaceReply, PlaceRequest, Refusal, SessionRecord,
    admission,
};

/// Subscribes to the node's placement subject and answers each request.
pub(super) async fn serve(shared: &Arc<NodeShared>) -> Result<AbortHandle, ClusterError> {
    let subject = names::place_subject(&shared.name);
    shared
        .serve(subject, |shared, message| async move {
            let reply = match serde_json::from_slice::<PlaceRequest>(&message.payload) {
                Ok(request) => place(&shared, request).await,
                Err(e) => PlaceReply::Failed { message: format!("unreadable request: {e}") },
            };
            let body = serde_json::to_vec(&reply).unwrap_or_default();
            shared.answer(message.reply, body).await;
        })
        .await
}

/// Admits and starts one session.
async fn place(shared: &Arc<NodeShared>, request: PlaceRequest) -> PlaceReply {
    let sessions = shared.lock_sessions().len();
    let agents = &shared.config.agents;
    let refusal = admission(&Admission {
        agent: &request.agent,
        draining: shared.is_draining(),
        fenced: !shared.holds_lease(),
        serves_agent: agents.offers(&request.agent),
        node_protocol: CLUSTER_VERSION,
        host_protocol: request.v,
        sessions,
        max_sessions: shared.config.max_sessions,
        load: shared.load(sessions),
        load_threshold: shared.config.load_threshold,
    });
    if let Some(refusal) = refusal {
        return PlaceReply::Refused { refusal };
    }
    // The host checked the history already, but only the node knows the agents a handoff in
    // it may name, by name or by id (docs/protocol.md#history).
    if !request.options.history.is_empty() {
        let known = agents.known();
        let rules = history::Rules { instructions: true, agents: Some(&known) };
        if let Err(why) = history::check(&request.options.history, &rules) {
            let message = format!("a history the node refuses: {why}");
            return PlaceReply::Failed { message };
        }
    }
    let start = SessionStart::new(request.agent.clone(), request.options.metadata);
    // Subscribed before the start, so the session's first events are published too; the
    // started hook runs before the answer, so the host cannot reach the session before it.
    let mut builder = Session::builder().host(&shared.host);
    if let Some(store) = &shared.config.store {
        builder = builder.store(Arc::clone(store));
    }
    let history = request.options.history;
    let filter = shared.config.events;
    let (started, claim) = match request.resume {
        Some(id) => match claim(shared, &id).await {
            // Its node was lost: the journal's lease is taken over, which fences that node's
            // journal should it come back (docs/cluster.md#moves).
            Ok(claim) => {
                (agents.resume(builder.take_over(true), id, start, filter).await, Some(claim))
            }
            Err(message) => return PlaceReply::Failed { message },
        },
        None => (agents.start(builder, start, history, filter).await, None),
    };
    let (session, events) = match started {
        Ok(Hosted { session, events, .. }) => (session, events),
        Err(e) => {
            if let Some(claim) = claim {
                claim.give_back(shared).await;
            }
            return match e {
                // Admission refuses an agent the node lacks: this arm only satisfies the types.
                StartError::UnknownAgent(agent) => {
                    PlaceReply::Refused { refusal: Refusal::UnknownAgent { agent } }
                }
                e => PlaceReply::Failed { message: e.to_string() },
            };
        }
    };
    let (after, moved_from) = claim.map_or((0, None), |c| (c.after, Some(c.from.node)));
    let session_id = session.id().to_owned();
    // Read once: the record and the answer name the same lease.
    let lease = shared.lease();
    let host = request.host.as_deref();
    let serving = serve::Serving { agent: &request.agent, lease, host, after, moved_from };
    let started = serve::start(shared, session.clone(), events, serving).await;
    if started.is_ok() {
        for holder in &request.holders {
            hosts::hold(shared, &session_id, holder);
        }
    }
    match started {
        Ok(revision) => PlaceReply::Placed {
            session_id,
            node: shared.name.clone(),
            boot_id: shared.boot_id.clone(),
            lease,
            durable: shared.config.store.is_some(),
            revision,
        },
        Err(e) => {
            let _ = session.close_with_reason("node_error").await;
            PlaceReply::Failed { message: e.to_string() }
        }
    }
}

/// A session this node took from a lost one, before it resumed it.
struct Claim {
    /// The record as it stood: the node it ran on.
    from: SessionRecord,
    /// The revision of the record this node wrote.
    revision: u64,
    /// The index of its last stored event.
    after: u64,
}

/// Claims session `id` for this node, if it can resume it (docs/cluster.md#moves): it keeps
/// journals and does not run the session already; the session's record says it was journaled,
/// and its node was lost. Its `x_node_lost` marker is stored first (once, whoever writes it),
/// so readers meet it before any event of this node; then the record is rewritten to name this
/// node, a compare-and-set on the revision read: of nodes that try at once, one wins and the
/// others refuse, and their hosts follow the record.
async fn claim(shared: &Arc<NodeShared>, id: &str) -> Result<Claim, String> {
    let me = &shared.name;
    if shared.config.store.is_none() {
        return Err(format!("node `{me}` keeps no journals: it cannot resume a session"));
    }
    if shared.lock_sessions().contains_key(id) {
        return Err(format!("node `{me}` runs session `{id}` already"));
    }
    let record = shared.backend.session_record(id).await;
    let record = record.map_err(|e| format!("its record cannot be read: {e}"))?;
    let Some((from, revision)) = record else {
        return Err(format!("session `{id}` has no record: it has ended"));
    };
    if !from.durable {
        return Err(format!("node `{}` kept no journal of session `{id}`", from.node));
    }
    if !from.lost {
        match shared.backend.nodes.get(names::node_key(&from.node)).await {
            Ok(Some(value)) => match serde_json::from_slice::<NodeInfo>(&value) {
                Ok(node) if node.lease == from.lease && node.boot_id == from.boot_id => {
                    return Err(format!("session `{id}` runs on live node `{}`", from.node));
                }
                _ => {}
            },
            Ok(None) => {}
            Err(e) => return Err(format!("node `{}` cannot be read: {e}", from.node)),
        }
        let lost =
            LostPlacement { id: id.to_owned(), placement: Arc::new(Placement::of(&from, 0)) };
        loss::mark(&shared.backend, &lost)
            .await
            .map_err(|e| format!("cannot mark its loss: {e}"))?;
    }
    let claimed = SessionRecord {
        node: me.clone(),
        boot_id: shared.boot_id.clone(),
        lease: shared.lease(),
        lost: false,
        durable: true,
        ..from.clone()
    };
    let body = serde_json::to_vec(&claimed).unwrap_or_default();
    let key = names::session_key(id);
    let revision = match shared.backend.sessions.update(&key, body.into(), revision).await {
        Ok(revision) => revision,
        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
            return Err(format!("session `{id}` was resumed by another node first"));
        }
        Err(e) => return Err(format!("its record cannot be written: {e}")),
    };
    let claim = Claim { from, revision, after: 0 };
    match serve::last_index(shared, id).await {
        Ok(after) => Ok(Claim { after, ..claim }),
        // Numbering from 1 again would collide with the stored events.
        Err(e) => {
            claim.give_back(shared).await;
            Err(format!("its events cannot be read: {e}"))
        }
    }
}

impl Claim {
    /// Puts the record back as it was, marked lost, for another node to resume the session:
    /// this one could not.
    async fn give_back(self, shared: &NodeShared) {
        let record = SessionRecord { lost: true, ..self.from };
        let body = serde_json::to_vec(&record).unwrap_or_default();
        let key = names::session_key(&record.session_id);
        if let Err(e) = shared.backend.sessions.update(&key, body.into(), self.revision).await {
            tracing::warn!(session = %record.session_id, error = %e, "cannot give the session back");
        }
    }
}
