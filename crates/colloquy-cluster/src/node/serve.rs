//! Serving one session of the node: its commands (NATS requests on its command subject, each
//! run by the protocol's `execute` in a task of its own, so a long `wait_for_idle` holds no
//! other command back; at most `max_in_flight` at once, the rest answered `busy`) and its events (each published to the events stream, in order, numbered
//! from 1, retried until stored). The session leaves the node once its last event is stored.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use colloquy_actors::{EventStream, SessionHandle};
use colloquy_protocol::{ErrorKind, EventFrame, ProtocolError, Reply, Request, execute};
use futures_util::StreamExt;
use tokio::sync::{Semaphore, oneshot};

use super::fence::NODE_LOST;
use super::shared::NodeShared;
use crate::error::ClusterError;
use crate::names;
use crate::wire::SessionRecord;

/// The longest pause between two attempts to publish an event while NATS is away.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Records the session, subscribes to its commands and starts publishing its events. Once this
/// returns, a host's commands reach the session.
pub(super) async fn start(
    shared: &Arc<NodeShared>,
    session: SessionHandle,
    events: EventStream,
    agent: &str,
    lease: u64,
) -> Result<(), ClusterError> {
    let id = session.id().to_owned();
    let record = SessionRecord {
        session_id: id.clone(),
        node: shared.name.clone(),
        boot_id: shared.boot_id.clone(),
        lease,
        agent: agent.to_owned(),
        lost: false,
    };
    let body = serde_json::to_vec(&record).unwrap_or_default();
    shared
        .backend
        .sessions
        .put(names::session_key(&id), body.into())
        .await
        .map_err(ClusterError::nats)?;
    let commands = shared
        .backend
        .client
        .subscribe(names::command_subject(&id))
        .await
        .map_err(ClusterError::nats)?;
    let (ended, on_end) = oneshot::channel();
    let client = shared.backend.client.clone();
    let limit = shared.config.max_in_flight;
    let serving = tokio::spawn(serve_commands(client, session.clone(), commands, limit, on_end));
    let publishing = tokio::spawn(publish_events(Arc::clone(shared), id, events, ended));
    shared.add_session(session.clone(), vec![serving.abort_handle(), publishing.abort_handle()]);
    // A fence between the admission and now did not see this session.
    if shared.is_fenced() {
        tokio::spawn(async move { session.close_with_reason(NODE_LOST).await });
    }
    Ok(())
}

/// Answers each command until the session has ended; then unsubscribes by draining, so a
/// command already on its way is still answered (`closed`) rather than lost to a timeout.
async fn serve_commands(
    client: async_nats::Client,
    session: SessionHandle,
    mut commands: async_nats::Subscriber,
    limit: usize,
    mut ended: oneshot::Receiver<()>,
) {
    let in_flight = Arc::new(Semaphore::new(limit));
    let mut draining = false;
    loop {
        let message = tokio::select! {
            biased;
            _ = &mut ended, if !draining => {
                draining = true;
                if commands.drain().await.is_err() {
                    return;
                }
                continue;
            }
            message = commands.next() => message,
        };
        let Some(message) = message else { return };
        let Some(reply_to) = message.reply else { continue };
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            let busy = ProtocolError::new(
                ErrorKind::Busy,
                format!("the session runs {limit} commands already: try again once one ends"),
            );
            if let Err(e) = client.publish(reply_to, Reply::Error(busy).encode().into()).await {
                tracing::warn!(session = %session.id(), error = %e, "cannot answer a command");
            }
            continue;
        };
        let session = session.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let reply = match Request::decode(&message.payload) {
                Ok(request) => execute(&session, request).await,
                Err(e) => Reply::Error(e),
            };
            drop(permit);
            if let Err(e) = client.publish(reply_to, reply.encode().into()).await {
                tracing::warn!(session = %session.id(), error = %e, "cannot answer a command");
            }
        });
    }
}

/// Publishes every event of the session, then forgets the session.
async fn publish_events(
    shared: Arc<NodeShared>,
    id: String,
    mut events: EventStream,
    ended: oneshot::Sender<()>,
) {
    let subject = names::events_subject(&id);
    let mut index = 0;
    while let Some(event) = events.recv().await {
        index += 1;
        let frame = EventFrame { session_id: id.clone(), index, event };
        publish(&shared.backend.js, &subject, &format!("{id}:{index}"), frame.encode()).await;
    }
    if let Err(e) = shared.backend.sessions.delete(names::session_key(&id)).await {
        tracing::warn!(session = %id, error = %e, "cannot remove the session's record");
    }
    let _ = ended.send(());
    shared.remove_session(&id);
}

/// Publishes one event and waits until the stream has stored it, retrying while NATS is away;
/// the event's id makes a retry after a lost acknowledgement a no-op.
async fn publish(js: &jetstream::Context, subject: &str, id: &str, body: Vec<u8>) {
    let body = bytes::Bytes::from(body);
    let mut delay = Duration::from_millis(50);
    loop {
        let message = PublishMessage::build().payload(body.clone()).message_id(id);
        let stored = match js.send_publish(subject.to_owned(), message).await {
            Ok(ack) => ack.await.map(drop),
            Err(e) => Err(e),
        };
        match stored {
            Ok(()) => return,
            Err(e) => {
                tracing::debug!(event = id, error = %e, "event not stored yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            }
        }
    }
}
