//! Placement requests for this node: admission (checked again here, since a host ranks nodes
//! from announcements up to a second old), then the session's start. Requests are taken one
//! at a time, so two cannot both pass the threshold.

use std::sync::Arc;

use colloquy_actors::Session;
use colloquy_edge::history;
use colloquy_edge::hosting::{Hosted, StartError};
use tokio::task::AbortHandle;

use super::serve;
use super::shared::{NodeShared, SessionStart};
use crate::error::ClusterError;
use crate::names;
use crate::wire::{Admission, CLUSTER_VERSION, PlaceReply, PlaceRequest, Refusal, admission};

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
    let (started, after) = match request.resume {
        Some(id) => match resumable(shared, &id).await {
            // Its first node was lost (the host checked): its lease is taken over, which
            // fences that node's journal should it come back (docs/cluster.md#resume).
            Ok(after) => (agents.resume(builder.take_over(true), id, start, filter).await, after),
            Err(message) => return PlaceReply::Failed { message },
        },
        None => (agents.start(builder, start, history, filter).await, 0),
    };
    let (session, events) = match started {
        Ok(Hosted { session, events, .. }) => (session, events),
        // Admission refuses an agent the node lacks: this arm only satisfies the types.
        Err(StartError::UnknownAgent(agent)) => {
            return PlaceReply::Refused { refusal: Refusal::UnknownAgent { agent } };
        }
        Err(e) => return PlaceReply::Failed { message: e.to_string() },
    };
    let session_id = session.id().to_owned();
    // Read once: the record and the answer name the same lease.
    let lease = shared.lease();
    let host = request.host.as_deref();
    let serving = serve::Serving { agent: &request.agent, lease, host, after };
    match serve::start(shared, session.clone(), events, serving).await {
        Ok(()) => PlaceReply::Placed {
            session_id,
            node: shared.name.clone(),
            boot_id: shared.boot_id.clone(),
            lease,
        },
        Err(e) => {
            let _ = session.close_with_reason("node_error").await;
            PlaceReply::Failed { message: e.to_string() }
        }
    }
}

/// The index of session `id`'s last stored event, if this node can resume it: it must keep
/// journals, and not hold the session already.
async fn resumable(shared: &Arc<NodeShared>, id: &str) -> Result<u64, String> {
    if shared.config.store.is_none() {
        return Err(format!(
            "node `{}` keeps no journals: it cannot resume a session",
            shared.name
        ));
    }
    if shared.lock_sessions().contains_key(id) {
        return Err(format!("node `{}` runs session `{id}` already", shared.name));
    }
    serve::last_index(shared, id).await.map_err(|e| format!("its events cannot be read: {e}"))
}
