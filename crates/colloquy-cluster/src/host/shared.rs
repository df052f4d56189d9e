//! What a host's calls share: the connection, the bounds on requests, and the requests
//! themselves with what "no answer" means.

use std::sync::Arc;
use std::time::Duration;

use async_nats::RequestErrorKind;
use async_nats::jetstream::kv::Operation;
use tokio::task::AbortHandle;

use super::loss::Tracker;
use crate::error::ClusterError;
use crate::names::{self, HOST_HEARTBEAT};
use crate::nats::Backend;
use crate::wire::{NodeInfo, SessionRecord};

/// The bounds on a host's requests. Every request a host makes waits at most one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// A session command that answers at once (a turn taken, a history, a cancel): 5 s.
    pub command: Duration,
    /// A command that waits for the session (`wait_for_idle`, `wait_for_quiet`, `close`,
    /// which waits for the session's own drain): 10 minutes.
    pub wait: Duration,
    /// A placement (the node starts the session before it answers), a drain request, a
    /// read of the buckets: 10 s.
    pub place: Duration,
    /// How long a session command that got no answer — its node stalled, or was lost and the
    /// session moves — is sent again, with its id, before it fails: 30 s from its first
    /// send (docs/cluster.md#commands). A command that waits has its own, longer bound.
    pub resend: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            command: Duration::from_secs(5),
            wait: Duration::from_secs(600),
            place: Duration::from_secs(10),
            resend: Duration::from_secs(30),
        }
    }
}

pub(crate) struct ClusterInner {
    pub(crate) backend: Backend,
    pub(crate) timeouts: Timeouts,
    /// The sessions this host drives, for the loss detection.
    pub(crate) tracker: Arc<Tracker>,
    /// Drawn at connect: the nodes hold the sessions this host starts or commands on it
    /// (empty for a draining node's own, which holds nothing).
    pub(crate) host_id: String,
    /// The watch on the nodes bucket and the host's beat, ended with the cluster (none for
    /// a node's own, `Cluster::for_node`).
    pub(crate) tasks: Vec<AbortHandle>,
}

impl Drop for ClusterInner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Tells the nodes this host is alive, every [`HOST_HEARTBEAT`] and at once after a
/// reconnect, so that they keep its sessions (docs/cluster.md#host-lease).
pub(crate) async fn beat(backend: Backend, host_id: String) {
    let subject = names::host_beat_subject(&host_id);
    let mut connections = backend.connections.clone();
    loop {
        connections.borrow_and_update();
        if let Err(e) = backend.client.publish(subject.clone(), bytes::Bytes::new()).await {
            tracing::debug!(host = %host_id, error = %e, "cannot beat");
        }
        tokio::select! {
            biased;
            changed = connections.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(HOST_HEARTBEAT) => {}
        }
    }
}

/// Whether a node holds its entry, as read from the bucket.
pub(crate) enum Holder {
    /// An entry under this lease.
    Live(u64),
    /// No entry: expired, or deleted by a drain.
    Gone,
    /// The read failed.
    Unknown,
}

/// Why a request got no answer.
pub(crate) enum NoAnswer {
    /// Nobody listens on the subject.
    NoResponders,
    /// Nobody answered within the bound.
    TimedOut(Duration),
    /// Anything else.
    Failed(ClusterError),
}

impl NoAnswer {
    /// The error for a caller that treats "nobody listens" as `absent()`.
    pub(crate) fn into_error(
        self,
        absent: impl FnOnce() -> ClusterError,
        what: &str,
    ) -> ClusterError {
        match self {
            Self::NoResponders => absent(),
            Self::TimedOut(after) => ClusterError::Timeout { what: what.to_owned(), after },
            Self::Failed(e) => e,
        }
    }
}

impl ClusterInner {
    /// One request with its bound; the answer's payload.
    pub(crate) async fn request(
        &self,
        subject: String,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<bytes::Bytes, NoAnswer> {
        self.command(subject, body, timeout, None).await
    }

    /// A [`request`](Self::request) carrying session command `id`, which the session runs
    /// once however often it is sent (docs/cluster.md#commands).
    pub(crate) async fn command(
        &self,
        subject: String,
        body: Vec<u8>,
        timeout: Duration,
        id: Option<&str>,
    ) -> Result<bytes::Bytes, NoAnswer> {
        // Every request names this host: a node keeps a session while a host that starts or
        // commands it beats.
        let mut headers = async_nats::HeaderMap::new();
        if !self.host_id.is_empty() {
            headers.insert(names::HOST_HEADER, self.host_id.as_str());
        }
        if let Some(id) = id {
            headers.insert(names::COMMAND_HEADER, id);
        }
        let request =
            async_nats::Request::new().payload(body.into()).headers(headers).timeout(Some(timeout));
        match self.backend.client.send_request(subject, request).await {
            Ok(message) => Ok(message.payload),
            Err(e) => Err(match e.kind() {
                RequestErrorKind::NoResponders => NoAnswer::NoResponders,
                RequestErrorKind::TimedOut => NoAnswer::TimedOut(timeout),
                _ => NoAnswer::Failed(ClusterError::nats(e)),
            }),
        }
    }

    /// Session `id`'s record, `None` if it has none (it ended, or never was).
    pub(crate) async fn session_record(
        &self,
        id: &str,
    ) -> Result<Option<SessionRecord>, ClusterError> {
        Ok(self.session_entry(id).await?.map(|(record, _)| record))
    }

    /// Session `id`'s record and its revision in the bucket.
    pub(crate) async fn session_entry(
        &self,
        id: &str,
    ) -> Result<Option<(SessionRecord, u64)>, ClusterError> {
        let bound = self.timeouts.place;
        let read = self.backend.session_record(id);
        tokio::time::timeout(bound, read).await.map_err(|_| ClusterError::Timeout {
            what: "reading the session".into(),
            after: bound,
        })?
    }

    /// Whether session `id`'s record was deleted lately (its delete marker is still there):
    /// the session ended, rather than its record not being readable yet.
    pub(crate) async fn record_deleted(&self, id: &str) -> bool {
        let read = self.backend.sessions.entry(names::session_key(id));
        match tokio::time::timeout(self.timeouts.place, read).await {
            Ok(Ok(Some(entry))) => entry.operation != Operation::Put,
            _ => false,
        }
    }

    /// Whether node `name` holds an entry, and under which lease.
    pub(crate) async fn holder(&self, name: &str) -> Holder {
        let read = self.backend.nodes.entry(names::node_key(name));
        match tokio::time::timeout(self.timeouts.place, read).await {
            Ok(Ok(Some(entry))) if entry.operation == Operation::Put => {
                match serde_json::from_slice::<NodeInfo>(&entry.value) {
                    Ok(info) => Holder::Live(info.lease),
                    Err(_) => Holder::Unknown,
                }
            }
            Ok(Ok(_)) => Holder::Gone,
            _ => Holder::Unknown,
        }
    }
}
