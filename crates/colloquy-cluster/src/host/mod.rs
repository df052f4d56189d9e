//! The host's side: [`Cluster`] reads the nodes' announcements, places sessions on them and
//! reaches sessions by id; [`RemoteSession`] drives one; [`RemoteEvents`] reads its events
//! (docs/cluster.md#hosts).

mod events;
mod remote;

use std::sync::Arc;
use std::time::Duration;

use async_nats::RequestErrorKind;
use futures_util::TryStreamExt;

pub use events::{RemoteEvent, RemoteEvents};
pub use remote::RemoteSession;

use crate::error::ClusterError;
use crate::names;
use crate::nats::{Backend, Server};
use crate::wire::{
    CLUSTER_VERSION, NodeInfo, PlaceReply, PlaceRequest, SessionRecord, StartOptions, rank,
};

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
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            command: Duration::from_secs(5),
            wait: Duration::from_secs(600),
            place: Duration::from_secs(10),
        }
    }
}

/// A host's view of the cluster: the nodes, and the sessions it places on them.
///
/// ```no_run
/// use colloquy_cluster::{Cluster, StartOptions};
///
/// # async fn demo() -> Result<(), colloquy_cluster::ClusterError> {
/// let cluster = Cluster::connect("nats://10.0.0.5:4222").await?;
/// let session = cluster.start_session("support", StartOptions::default()).await?;
/// let mut events = session.subscribe().await?;
/// session.user_turn("Where is my order?").await?;
/// while let Some(event) = events.recv().await {
///     let event = event?;
///     println!("{} {:?}", event.index, event.event.kind);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<ClusterInner>,
}

pub(crate) struct ClusterInner {
    pub(crate) backend: Backend,
    pub(crate) timeouts: Timeouts,
}

/// Configures a [`Cluster`] connection.
#[must_use]
pub struct ClusterBuilder {
    server: Server,
    timeouts: Timeouts,
}

impl ClusterBuilder {
    /// The token the NATS server asks for.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.server.token = Some(token.into());
        self
    }

    /// The bounds on requests (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Connects and opens the cluster's buckets and stream (creating them on a fresh server).
    pub async fn connect(self) -> Result<Cluster, ClusterError> {
        let backend = Backend::open(&self.server, "colloquy-host").await?;
        Ok(Cluster { inner: Arc::new(ClusterInner { backend, timeouts: self.timeouts }) })
    }
}

impl Cluster {
    /// Connects to the NATS server at `url` with the default [`Timeouts`] and no credentials.
    pub async fn connect(url: impl Into<String>) -> Result<Self, ClusterError> {
        Self::builder(url).connect().await
    }

    /// A connection to configure (a token, timeouts).
    pub fn builder(url: impl Into<String>) -> ClusterBuilder {
        ClusterBuilder { server: Server::new(url), timeouts: Timeouts::default() }
    }

    /// The live nodes as they last announced themselves (at most a second ago), by name.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        let bound = self.inner.timeouts.place;
        let read = async {
            let store = &self.inner.backend.nodes;
            let keys: Vec<String> = store
                .keys()
                .await
                .map_err(ClusterError::nats)?
                .try_collect()
                .await
                .map_err(ClusterError::nats)?;
            let mut nodes = Vec::with_capacity(keys.len());
            for key in keys {
                // An entry that expired between the listing and the read is simply gone.
                if let Some(value) = store.get(&key).await.map_err(ClusterError::nats)? {
                    match serde_json::from_slice::<NodeInfo>(&value) {
                        Ok(node) => nodes.push(node),
                        Err(e) => tracing::warn!(key, error = %e, "unreadable node entry"),
                    }
                }
            }
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(nodes)
        };
        tokio::time::timeout(bound, read).await.unwrap_or_else(|_| {
            Err(ClusterError::Timeout { what: "reading the nodes".into(), after: bound })
        })
    }

    /// Starts an `agent` session on the least loaded live node that serves it and is under
    /// its threshold. A node that refuses (its load changed since it announced) or is gone is
    /// passed over for the next; when none is left the error names each and why.
    pub async fn start_session(
        &self,
        agent: &str,
        options: StartOptions,
    ) -> Result<RemoteSession, ClusterError> {
        let nodes = self.nodes().await?;
        let mut passed = Vec::new();
        for node in rank(&nodes, agent) {
            match self.place(&node.name, agent, &options).await {
                Ok(session) => return Ok(session),
                Err(ClusterError::Refused { node, refusal }) => {
                    passed.push(format!("{node}: {refusal}"));
                }
                Err(ClusterError::NodeLost { node }) => passed.push(format!("{node}: gone")),
                // A timeout or a failed start: the session may exist there; another node
                // would make it twice.
                Err(e) => return Err(e),
            }
        }
        for node in &nodes {
            if let Some(refusal) = node.refusal(agent) {
                passed.push(format!("{}: {refusal}", node.name));
            }
        }
        let detail = if nodes.is_empty() { "no live node".to_owned() } else { passed.join("; ") };
        Err(ClusterError::NoNode { agent: agent.to_owned(), detail })
    }

    /// Starts an `agent` session on the node named `node`, which may refuse it.
    pub async fn start_session_on(
        &self,
        node: &str,
        agent: &str,
        options: StartOptions,
    ) -> Result<RemoteSession, ClusterError> {
        self.place(node, agent, &options).await.map_err(|e| match e {
            ClusterError::NodeLost { node } => ClusterError::NoNode {
                agent: agent.to_owned(),
                detail: format!("node `{node}` is not live"),
            },
            e => e,
        })
    }

    /// The live session `id`, placed by this host or another (a host that restarted finds its
    /// sessions again this way).
    pub async fn session(&self, id: &str) -> Result<RemoteSession, ClusterError> {
        if !names::is_valid_name(id) {
            return Err(ClusterError::NotFound(id.to_owned()));
        }
        let record = self.inner.session_record(id).await?;
        let record = record.ok_or_else(|| ClusterError::NotFound(id.to_owned()))?;
        Ok(RemoteSession::new(
            Arc::clone(&self.inner),
            record.session_id,
            record.node,
            record.boot_id,
        ))
    }

    /// Asks node `node` to drain (no new sessions; its sessions closed with reason
    /// `node_draining` after its drain timeout). Returns once the node has begun.
    pub async fn drain_node(&self, node: &str) -> Result<(), ClusterError> {
        let subject = names::drain_subject(node);
        self.inner.request(subject, Vec::new(), self.inner.timeouts.place).await.map_err(|e| {
            e.into_error(|| ClusterError::NodeLost { node: node.to_owned() }, "drain")
        })?;
        Ok(())
    }

    async fn place(
        &self,
        node: &str,
        agent: &str,
        options: &StartOptions,
    ) -> Result<RemoteSession, ClusterError> {
        if !names::is_valid_name(node) {
            return Err(ClusterError::InvalidName(node.to_owned()));
        }
        let request =
            PlaceRequest { v: CLUSTER_VERSION, agent: agent.to_owned(), options: options.clone() };
        let body = serde_json::to_vec(&request).map_err(ClusterError::nats)?;
        let subject = names::place_subject(node);
        let answer =
            self.inner.request(subject, body, self.inner.timeouts.place).await.map_err(|e| {
                e.into_error(|| ClusterError::NodeLost { node: node.to_owned() }, "placement")
            })?;
        match serde_json::from_slice(&answer).map_err(ClusterError::nats)? {
            PlaceReply::Placed { session_id, node, boot_id } => {
                Ok(RemoteSession::new(Arc::clone(&self.inner), session_id, node, boot_id))
            }
            PlaceReply::Refused { refusal } => {
                Err(ClusterError::Refused { node: node.to_owned(), refusal })
            }
            PlaceReply::Failed { message } => {
                Err(ClusterError::StartFailed { node: node.to_owned(), message })
            }
        }
    }
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
    fn into_error(self, absent: impl FnOnce() -> ClusterError, what: &str) -> ClusterError {
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
        let request = async_nats::Request::new().payload(body.into()).timeout(Some(timeout));
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
        let bound = self.timeouts.place;
        let read = self.backend.sessions.get(names::session_key(id));
        let value = tokio::time::timeout(bound, read)
            .await
            .map_err(|_| ClusterError::Timeout {
                what: "reading the session".into(),
                after: bound,
            })?
            .map_err(ClusterError::nats)?;
        value.map(|v| serde_json::from_slice(&v).map_err(ClusterError::nats)).transpose()
    }

    /// The live node `name`'s entry, if it is live.
    pub(crate) async fn node(&self, name: &str) -> Option<NodeInfo> {
        let read = self.backend.nodes.get(names::node_key(name));
        let value = tokio::time::timeout(self.timeouts.place, read).await.ok()?.ok()??;
        serde_json::from_slice(&value).ok()
    }
}
