//! The host's side: [`Cluster`] reads the nodes' announcements, places sessions on them and
//! reaches sessions by id; [`RemoteSession`] drives one; [`RemoteEvents`] reads its events
//! (docs/cluster.md#hosts).

mod events;
pub(crate) mod loss;
mod moves;
mod remote;
mod shared;

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::TryStreamExt;

pub use events::{EventCursor, RemoteEvent, RemoteEvents};
pub use moves::MOVE_TIMEOUT;
pub use remote::RemoteSession;
pub use shared::Timeouts;

use crate::error::ClusterError;
use crate::names;
use crate::nats::{Backend, HEADROOM, NatsConfig, payload_limit};
use crate::wire::{CLUSTER_VERSION, NodeInfo, PlaceReply, PlaceRequest, StartOptions, rank};
use loss::{Placement, Tracker};
use shared::{ClusterInner, Holder};

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

/// Configures a [`Cluster`] connection.
#[must_use]
pub struct ClusterBuilder {
    server: NatsConfig,
    timeouts: Timeouts,
    lost_after: Duration,
}

impl ClusterBuilder {
    /// The token the NATS server asks for (or use a [`NatsConfig`] with
    /// [`Cluster::builder`], for a user and password or TLS).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.server = self.server.token(token);
        self
    }

    /// The bounds on requests (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// How long after its last heartbeat a node is lost (default 3 s, at least 1 s): the
    /// `max_age` of the nodes bucket if this host creates it. An existing bucket keeps its own,
    /// which is what counts (docs/cluster.md#failure).
    pub fn lost_after(mut self, lost_after: Duration) -> Self {
        self.lost_after = lost_after;
        self
    }

    /// Connects, opens the cluster's buckets and stream (creating them on a fresh server) and
    /// starts watching the nodes, so the sessions of a node that is lost learn it.
    pub async fn connect(self) -> Result<Cluster, ClusterError> {
        let backend = Backend::open(&self.server, "colloquy-host", self.lost_after).await?;
        let tracker = Arc::new(Tracker::default());
        let host_id = uuid::Uuid::new_v4().to_string();
        let inner = Arc::new_cyclic(|inner| {
            let inner: Weak<ClusterInner> = inner.clone();
            let on_lost: loss::OnLost = Box::new(move |lost| {
                if let Some(inner) = inner.upgrade() {
                    moves::found_lost(&inner, lost);
                }
            });
            let watch = loss::watch_nodes(backend.clone(), Arc::clone(&tracker), on_lost);
            let watch = tokio::spawn(watch);
            let beat = tokio::spawn(shared::beat(backend.clone(), host_id.clone()));
            let tasks = vec![watch.abort_handle(), beat.abort_handle()];
            ClusterInner { backend, timeouts: self.timeouts, tracker, host_id, tasks }
        });
        Ok(Cluster { inner })
    }
}

impl Cluster {
    /// Connects to the NATS server at a URL (no credentials) or as a [`NatsConfig`] says, with
    /// the default [`Timeouts`].
    pub async fn connect(nats: impl Into<NatsConfig>) -> Result<Self, ClusterError> {
        Self::builder(nats).connect().await
    }

    /// A connection to configure (timeouts, `lost_after`).
    pub fn builder(nats: impl Into<NatsConfig>) -> ClusterBuilder {
        ClusterBuilder {
            server: nats.into(),
            timeouts: Timeouts::default(),
            lost_after: names::NODE_TTL,
        }
    }

    /// The live nodes as they last announced themselves (at most a second ago), by name.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        let bound = self.inner.timeouts.place;
        let read = async {
            let store = &self.inner.backend.nodes;
            // The bucket's subjects from its stream's info, not `Store::keys()`: that makes a
            // consumer per call which the server keeps 30 s, and a stream holds 1,000 by
            // default, so a host placing 1,000 sessions in 30 s would be refused.
            let subjects: Vec<(String, usize)> = store
                .stream
                .info_with_subjects(format!("{}>", store.prefix))
                .await
                .map_err(ClusterError::nats)?
                .try_collect()
                .await
                .map_err(ClusterError::nats)?;
            let keys = subjects.into_iter().filter_map(|(subject, _)| {
                subject.strip_prefix(store.prefix.as_str()).map(str::to_owned)
            });
            let mut nodes = Vec::new();
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
        let body = self.place_request(agent, options)?;
        let nodes = self.nodes().await?;
        let mut passed = match self.place_first(rank(&nodes, agent), &body).await? {
            Ok(session) => return Ok(session),
            Err(passed) => passed,
        };
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
        let body = self.place_request(agent, options)?;
        self.place(node, &body).await.map_err(|e| match e {
            ClusterError::NodeLost { node } => ClusterError::NoNode {
                agent: agent.to_owned(),
                detail: format!("node `{node}` is not live"),
            },
            e => e,
        })
    }

    /// Resumes session `id`, whose node was lost, on a live node that keeps journals
    /// ([`NodeBuilder::store`](crate::NodeBuilder::store)) and serves its agent, the least
    /// loaded first (docs/cluster.md#moves): its history, agent and calls come back from the
    /// journal its first node wrote, each call in doubt settled by its tool's policy, and its
    /// events go on after the last one stored (read them with
    /// [`RemoteSession::subscribe_from`] after the last event seen). A session whose node is
    /// live is refused ([`ClusterError::StartFailed`]): a resume would take it from a node
    /// that still runs it.
    pub async fn resume_session(&self, id: &str) -> Result<RemoteSession, ClusterError> {
        self.resume(id, Vec::new()).await
    }

    /// A cluster on a node's own connection, to hand its sessions over as it drains: it
    /// places, and watches nothing. It is no host: it beats for nobody, so the sessions it
    /// places are held by the hosts it names (`resume`'s `holders`), not by it.
    pub(crate) fn for_node(backend: Backend) -> Self {
        let inner = ClusterInner {
            backend,
            timeouts: Timeouts::default(),
            tracker: Arc::new(Tracker::default()),
            host_id: String::new(),
            tasks: Vec::new(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// [`resume_session`](Self::resume_session), the new node holding the session for
    /// `holders` too (the hosts that held it on a draining node).
    pub(crate) async fn resume(
        &self,
        id: &str,
        holders: Vec<String>,
    ) -> Result<RemoteSession, ClusterError> {
        if !names::is_valid_name(id) {
            return Err(ClusterError::NotFound(id.to_owned()));
        }
        let record = self.inner.session_record(id).await?;
        let record = record.ok_or_else(|| ClusterError::NotFound(id.to_owned()))?;
        let nodes = self.nodes().await?;
        let live = nodes.iter().any(|n| n.name == record.node && n.lease == record.lease);
        if live && !record.lost {
            let message = format!("session `{id}` runs on live node `{}`", record.node);
            return Err(ClusterError::StartFailed { node: record.node, message });
        }
        let resume = Some((id.to_owned(), holders));
        let body = self.request_body(&record.agent, StartOptions::new(), resume)?;
        let durable = rank(&nodes, &record.agent).into_iter().filter(|n| n.durable).collect();
        let passed = match self.place_first(durable, &body).await? {
            Ok(session) => return Ok(session),
            Err(passed) => passed,
        };
        let detail = match passed.is_empty() {
            true => "no live node keeps journals and serves it".to_owned(),
            false => passed.join("; "),
        };
        Err(ClusterError::NoNode { agent: record.agent, detail })
    }

    /// The session `id`, placed by this host or another (a host that restarted finds its
    /// sessions again this way), while its node holds it. A session whose node was lost is
    /// found too, so its events can be read to the end (`x_node_lost`); its commands fail
    /// with [`ClusterError::NodeLost`]. A session that ended is not found.
    pub async fn session(&self, id: &str) -> Result<RemoteSession, ClusterError> {
        if !names::is_valid_name(id) {
            return Err(ClusterError::NotFound(id.to_owned()));
        }
        let entry = self.inner.session_entry(id).await?;
        let (record, revision) = entry.ok_or_else(|| ClusterError::NotFound(id.to_owned()))?;
        let placement = Placement::of(&record, revision);
        let tracked = self.inner.tracker.track(&record.session_id, placement);
        let placement = tracked.placement();
        // Its node may have been lost while no host drove it: then nobody wrote the marker
        // yet, nor moved it.
        let lost = record.lost
            || match self.inner.holder(&placement.node).await {
                Holder::Live(lease) => lease > placement.lease,
                Holder::Gone => true,
                Holder::Unknown => false,
            };
        if lost && placement.named_by(&record) && tracked.lose(&placement) {
            moves::found_lost(&self.inner, vec![(Arc::clone(&tracked), placement)]);
        }
        Ok(RemoteSession::new(Arc::clone(&self.inner), tracked))
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

    /// The placement request for an `agent` session, refused before any node is asked if NATS
    /// cannot carry it: no node could take it, and a retry would not help.
    fn place_request(&self, agent: &str, options: StartOptions) -> Result<Vec<u8>, ClusterError> {
        self.request_body(agent, options, None)
    }

    /// The placement request; `resume` names the stored session to resume and the hosts
    /// that held it besides this one.
    fn request_body(
        &self,
        agent: &str,
        options: StartOptions,
        resume: Option<(String, Vec<String>)>,
    ) -> Result<Vec<u8>, ClusterError> {
        let host = Some(self.inner.host_id.clone()).filter(|id| !id.is_empty());
        let agent_name = agent.to_owned();
        let (resume, holders) = resume.map_or((None, Vec::new()), |(id, h)| (Some(id), h));
        let request =
            PlaceRequest { v: CLUSTER_VERSION, agent: agent_name, options, host, resume, holders };
        let body = serde_json::to_vec(&request).map_err(ClusterError::nats)?;
        let limit = payload_limit(&self.inner.backend.client);
        if body.len() > limit {
            let what = format!("the start of a `{agent}` session (its history)");
            return Err(ClusterError::TooLarge { what, size: body.len(), limit: limit + HEADROOM });
        }
        Ok(body)
    }

    /// Asks `nodes` in turn until one places `body`: its session, or why each passed (a
    /// refusal, a node gone). A timeout or a failed start ends the search: the session may
    /// exist there, and another node would make it twice.
    async fn place_first(
        &self,
        nodes: Vec<&NodeInfo>,
        body: &[u8],
    ) -> Result<Result<RemoteSession, Vec<String>>, ClusterError> {
        let mut passed = Vec::new();
        for node in nodes {
            match self.place(&node.name, body).await {
                Ok(session) => return Ok(Ok(session)),
                Err(ClusterError::Refused { node, refusal }) => {
                    passed.push(format!("{node}: {refusal}"));
                }
                Err(ClusterError::NodeLost { node }) => passed.push(format!("{node}: gone")),
                Err(e) => return Err(e),
            }
        }
        Ok(Err(passed))
    }

    async fn place(&self, node: &str, body: &[u8]) -> Result<RemoteSession, ClusterError> {
        if !names::is_valid_name(node) {
            return Err(ClusterError::InvalidName(node.to_owned()));
        }
        let subject = names::place_subject(node);
        let answer = self.inner.request(subject, body.to_vec(), self.inner.timeouts.place).await;
        let answer = answer.map_err(|e| {
            e.into_error(|| ClusterError::NodeLost { node: node.to_owned() }, "placement")
        })?;
        match serde_json::from_slice(&answer).map_err(ClusterError::nats)? {
            PlaceReply::Placed { session_id, node, boot_id, lease, durable, revision } => {
                let placement = Placement { node, boot_id, lease, durable, revision };
                let tracked = self.inner.tracker.track(&session_id, placement);
                Ok(RemoteSession::new(Arc::clone(&self.inner), tracked))
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
