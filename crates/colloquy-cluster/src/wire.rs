//! What nodes and hosts tell each other besides session commands: a node's announcement, a
//! session's record, a placement request and its answer (JSON, versioned by
//! [`CLUSTER_VERSION`]); and the pure rules of admission and ranking both sides apply.

use serde::{Deserialize, Serialize};

/// The version of these messages: a node answers a placement request of another version with
/// [`Refusal::Version`].
pub const CLUSTER_VERSION: u32 = 1;

/// What a node announces in the nodes bucket, refreshed every second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's name, unique among live nodes.
    pub name: String,
    /// Drawn at each start: a node that restarts under the same name is another boot.
    pub boot_id: String,
    /// The node's lease: the revision of the entry it registered with (0 in that first
    /// entry, until the node rewrites it). A node that registers again after its entry
    /// expired holds a greater lease, and sessions placed under an older one are lost
    /// (docs/cluster.md#failure).
    #[serde(default)]
    pub lease: u64,
    /// The agents it can start, by name, in order.
    pub agents: Vec<String>,
    /// Its live sessions.
    pub sessions: usize,
    /// The most sessions it holds at once.
    pub max_sessions: usize,
    /// Its load, from its load function (by default `sessions / max_sessions`).
    pub load: f64,
    /// At or above this load it takes no new session.
    pub load_threshold: f64,
    /// The colloquy-cluster version it runs.
    pub version: String,
    /// The [`CLUSTER_VERSION`] it speaks.
    pub protocol: u32,
    /// Whether it is draining: it takes no new session.
    pub draining: bool,
    /// Whether it keeps its sessions' journals in a store, and so can resume a session
    /// another node wrote ([`Cluster::resume_session`](crate::Cluster::resume_session)).
    #[serde(default)]
    pub durable: bool,
}

impl NodeInfo {
    /// Why this node, as announced, would refuse a new `agent` session; `None` if it would
    /// take it. The node checks again when asked (the announcement may be a second old).
    pub fn refusal(&self, agent: &str) -> Option<Refusal> {
        admission(&Admission {
            agent,
            draining: self.draining,
            // A node announces only while it holds its lease.
            fenced: false,
            serves_agent: self.agents.iter().any(|a| a == agent),
            node_protocol: self.protocol,
            host_protocol: CLUSTER_VERSION,
            sessions: self.sessions,
            max_sessions: self.max_sessions,
            load: self.load,
            load_threshold: self.load_threshold,
        })
    }
}

/// Which node holds a live session, in the sessions bucket (written when it starts, removed
/// when it ends): what a host needs to reach a session it did not start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub session_id: String,
    /// The node that holds it.
    pub node: String,
    /// That node's boot.
    pub boot_id: String,
    /// The node's lease when the session started ([`NodeInfo::lease`]).
    #[serde(default)]
    pub lease: u64,
    /// The agent it started with.
    pub agent: String,
    /// Set by a host that found the node lost and wrote `x_node_lost` into the session's
    /// events.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// Whether its node keeps its journal, so that another node can resume it when that node
    /// is lost (docs/cluster.md#moves).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
}

/// What a host may ask for a session it starts on a node: the protocol's, shared with the
/// HTTP server's `POST /v1/sessions`.
pub use colloquy_protocol::StartOptions;

/// A request to start a session, sent to one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PlaceRequest {
    pub(crate) v: u32,
    pub(crate) agent: String,
    pub(crate) options: StartOptions,
    /// The host asking, which holds the session from then on (docs/cluster.md#host-lease);
    /// none from hosts before host leases, whose sessions no node closes for their silence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// The stored session to resume instead of starting one (only nodes that announce
    /// `durable` are asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resume: Option<String>,
    /// Hosts that hold the session besides `host`: a draining node hands its sessions over
    /// with the hosts that held them there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) holders: Vec<String>,
}

/// A node's answer to a [`PlaceRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub(crate) enum PlaceReply {
    /// The session runs there.
    Placed {
        session_id: String,
        node: String,
        boot_id: String,
        #[serde(default)]
        lease: u64,
        /// Whether the node journals it (its record says so too).
        #[serde(default)]
        durable: bool,
        /// The revision of the session's record the node wrote: a host that hears of the
        /// session from two sources keeps the newer placement.
        #[serde(default)]
        revision: u64,
    },
    /// The node will not take it.
    Refused { refusal: Refusal },
    /// The node tried and the session could not start.
    Failed { message: String },
}

/// Why a node will not take a new session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// It is draining.
    #[error("the node is draining")]
    Draining,
    /// It lost its lease (its entry expired, or it could not renew it in time) and has not
    /// registered again yet.
    #[error("the node lost its lease and has not registered again")]
    Fenced,
    /// It has no agent of that name.
    #[error("the node has no agent `{agent}`")]
    UnknownAgent {
        /// The agent asked for.
        agent: String,
    },
    /// Its load is at or above its threshold.
    #[error("load {load:.2} is at or above the threshold {threshold:.2}")]
    OverThreshold {
        /// Its load.
        load: f64,
        /// Its threshold.
        threshold: f64,
    },
    /// It holds its maximum of sessions.
    #[error("{sessions} sessions, the most it holds")]
    Full {
        /// Its sessions.
        sessions: usize,
    },
    /// It speaks another version of the cluster's messages than the host.
    #[error("the node speaks cluster protocol {node}, the host {host}")]
    Version {
        /// The node's [`CLUSTER_VERSION`].
        node: u32,
        /// The host's.
        host: u32,
    },
}

/// What a host writes into the events of a session whose node it found lost, so every reader
/// of the stream meets it in order: `{"type": "x_node_lost", "session_id", "node", "boot_id",
/// "lease"}`. A reader hands it on as [`ClusterError::NodeLost`](crate::ClusterError::NodeLost)
/// and ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub(crate) enum Marker {
    #[serde(rename = "x_node_lost")]
    NodeLost { session_id: String, node: String, boot_id: String, lease: u64 },
}

impl Marker {
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Strings and numbers: serialization cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The marker in `bytes`, if they hold one (an event frame has no `type`).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// What admission looks at.
pub(crate) struct Admission<'a> {
    pub(crate) agent: &'a str,
    pub(crate) draining: bool,
    pub(crate) fenced: bool,
    pub(crate) serves_agent: bool,
    pub(crate) node_protocol: u32,
    pub(crate) host_protocol: u32,
    pub(crate) sessions: usize,
    pub(crate) max_sessions: usize,
    pub(crate) load: f64,
    pub(crate) load_threshold: f64,
}

/// Why a node in this state refuses a new session, if it does. A load function that
/// returns NaN counts as fully loaded.
pub(crate) fn admission(a: &Admission<'_>) -> Option<Refusal> {
    if a.node_protocol != a.host_protocol {
        Some(Refusal::Version { node: a.node_protocol, host: a.host_protocol })
    } else if a.draining {
        Some(Refusal::Draining)
    } else if a.fenced {
        Some(Refusal::Fenced)
    } else if !a.serves_agent {
        Some(Refusal::UnknownAgent { agent: a.agent.to_owned() })
    } else if a.sessions >= a.max_sessions {
        Some(Refusal::Full { sessions: a.sessions })
    } else if a.load.is_nan() || a.load >= a.load_threshold {
        Some(Refusal::OverThreshold { load: a.load, threshold: a.load_threshold })
    } else {
        None
    }
}

/// The nodes that would take a new `agent` session, least loaded first (then fewest sessions,
/// then by name, so the choice is the same on every host).
pub(crate) fn rank<'a>(nodes: &'a [NodeInfo], agent: &str) -> Vec<&'a NodeInfo> {
    let mut fit: Vec<&NodeInfo> = nodes.iter().filter(|n| n.refusal(agent).is_none()).collect();
    fit.sort_by(|a, b| {
        a.load
            .total_cmp(&b.load)
            .then(a.sessions.cmp(&b.sessions))
            .then_with(|| a.name.cmp(&b.name))
    });
    fit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, sessions: usize) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            boot_id: "b".into(),
            lease: 1,
            agents: vec!["support".into()],
            sessions,
            max_sessions: 10,
            load: sessions as f64 / 10.0,
            load_threshold: 0.7,
            version: "0".into(),
            protocol: CLUSTER_VERSION,
            draining: false,
            durable: false,
        }
    }

    #[test]
    fn ranks_the_least_loaded_first_and_drops_those_that_would_refuse() {
        let mut draining = node("d", 0);
        draining.draining = true;
        let mut other = node("o", 0);
        other.agents = vec!["sales".into()];
        let nodes = [node("a", 3), node("b", 1), node("c", 7), draining, other, node("e", 1)];
        let names: Vec<&str> = rank(&nodes, "support").iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["b", "e", "a"]);
    }

    #[test]
    fn refuses_at_the_threshold_when_full_and_on_another_version() {
        assert_eq!(node("a", 6).refusal("support"), None);
        assert!(matches!(node("a", 7).refusal("support"), Some(Refusal::OverThreshold { .. })));
        let mut full = node("a", 10);
        full.load = 0.0;
        assert_eq!(full.refusal("support"), Some(Refusal::Full { sessions: 10 }));
        let mut nan = node("a", 0);
        nan.load = f64::NAN;
        assert!(matches!(nan.refusal("support"), Some(Refusal::OverThreshold { .. })));
        let mut old = node("a", 0);
        old.protocol = CLUSTER_VERSION + 1;
        assert!(matches!(old.refusal("support"), Some(Refusal::Version { .. })));
        assert!(matches!(node("a", 0).refusal("sales"), Some(Refusal::UnknownAgent { .. })));
    }

    #[test]
    fn a_marker_is_told_from_an_event_frame() {
        let marker = Marker::NodeLost {
            session_id: "s1".into(),
            node: "n1".into(),
            boot_id: "b".into(),
            lease: 4,
        };
        let json = String::from_utf8(marker.encode()).unwrap();
        assert!(json.starts_with(r#"{"type":"x_node_lost","session_id":"s1""#), "{json}");
        assert_eq!(Marker::decode(json.as_bytes()), Some(marker));
        let frame = r#"{"session_id":"s1","index":1,"event":{"at_ms":0,"type":"session_closed","reason":"x"}}"#;
        assert_eq!(Marker::decode(frame.as_bytes()), None);
    }

    #[test]
    fn records_and_announcements_without_a_lease_still_read() {
        let record: SessionRecord =
            serde_json::from_str(r#"{"session_id":"s","node":"n","boot_id":"b","agent":"a"}"#)
                .unwrap();
        assert_eq!((record.lease, record.lost), (0, false));
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("lost"), "{json}");
    }
}
