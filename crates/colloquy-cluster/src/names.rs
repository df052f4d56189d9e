//! Where everything lives on NATS: the subjects, key-value buckets and stream the cluster uses
//! (docs/cluster.md#subjects), and the rules a name must follow to fit in one of them.

use std::time::Duration;

/// The key-value bucket where each node announces itself, key `node.<name>`.
pub const NODES_BUCKET: &str = "colloquy_nodes";
/// How long a node's entry lives without a refresh, by default: a node silent this long is
/// lost (the `lost_after` of [`NodeBuilder`](crate::NodeBuilder::lost_after) and
/// [`ClusterBuilder`](crate::ClusterBuilder::lost_after); the bucket's own `max_age` decides,
/// docs/cluster.md#failure).
pub const NODE_TTL: Duration = Duration::from_secs(3);
/// The shortest `lost_after` a node or host accepts: below it a loaded machine would lose
/// healthy nodes.
pub const MIN_LOST_AFTER: Duration = Duration::from_secs(1);
/// How long the server keeps the marker it writes when an entry expires, so a watcher sees the
/// expiry as an event (needs nats-server 2.11 or later).
pub const NODE_MARKER_TTL: Duration = Duration::from_secs(5);

/// The key-value bucket of live sessions, key `session.<id>`: which node holds each.
pub const SESSIONS_BUCKET: &str = "colloquy_sessions";

/// The JetStream stream every session's events go to.
pub const EVENTS_STREAM: &str = "COLLOQUY_EVENTS";
/// The stream's subjects: one per session.
pub const EVENTS_SUBJECTS: &str = "colloquy.events.*";
/// How long events are kept.
pub const EVENTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How many events are kept per session (the oldest go first).
pub const EVENTS_PER_SESSION: i64 = 100_000;
/// How many bytes the stream keeps in all (the oldest go first).
pub const EVENTS_MAX_BYTES: i64 = 1 << 30;
/// How many readers the events stream takes at once (each `subscribe` is a consumer): the
/// server's default for a stream that sets none is 1,000, fewer than a host's sessions.
pub const EVENTS_MAX_READERS: i32 = 100_000;
/// How long the stream remembers a published event's id, so a publish retried after a lost
/// acknowledgement is stored once.
pub const EVENTS_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The JetStream stream of sessions' journals ([`JetStreamStore`](crate::JetStreamStore)).
pub const JOURNALS_STREAM: &str = "COLLOQUY_JOURNALS";
/// The journals' subjects: one per session.
pub const JOURNAL_SUBJECTS: &str = "colloquy.journal.*";
/// Session `<id>`'s journal is on `colloquy.journal.<id>`.
pub(crate) const JOURNAL_PREFIX: &str = "colloquy.journal.";
/// The bound on each of the journal store's JetStream calls (a write's acknowledgement, a
/// read): past it the call fails, and the session's writer with it.
pub const JOURNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a host tells the nodes it is alive, on `colloquy.host.<host id>.beat`.
pub const HOST_HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a node keeps a session after the last sign of life of every host that holds it,
/// by default ([`NodeBuilder::host_lost_after`](crate::NodeBuilder::host_lost_after)).
pub const HOST_LOST_AFTER: Duration = Duration::from_secs(10);
/// The shortest `host_lost_after` a node accepts: three of a host's beats.
pub const MIN_HOST_LOST_AFTER: Duration = Duration::from_secs(3);
/// Where hosts beat: `colloquy.host.<host id>.beat`, one token per host.
pub(crate) const HOST_BEATS: &str = "colloquy.host.*.beat";
/// The header that names the host a command comes from.
pub(crate) const HOST_HEADER: &str = "Colloquy-Host";
/// The header that carries a session command's id: the session runs it once per id.
pub(crate) const COMMAND_HEADER: &str = "Colloquy-Command-Id";

/// Where host `id` beats.
pub(crate) fn host_beat_subject(id: &str) -> String {
    format!("colloquy.host.{id}.beat")
}

/// The host id in a beat's subject.
pub(crate) fn beat_host(subject: &str) -> Option<&str> {
    subject.strip_prefix("colloquy.host.")?.strip_suffix(".beat").filter(|id| is_valid_name(id))
}

/// The key of node `name` in [`NODES_BUCKET`].
pub(crate) fn node_key(name: &str) -> String {
    format!("node.{name}")
}

/// The key of session `id` in [`SESSIONS_BUCKET`].
pub(crate) fn session_key(id: &str) -> String {
    format!("session.{id}")
}

/// Where node `name` takes placement requests.
pub(crate) fn place_subject(name: &str) -> String {
    format!("colloquy.node.{name}.place")
}

/// Where node `name` takes a drain request.
pub(crate) fn drain_subject(name: &str) -> String {
    format!("colloquy.node.{name}.drain")
}

/// Where session `id` takes commands.
pub(crate) fn command_subject(id: &str) -> String {
    format!("colloquy.session.{id}.cmd")
}

/// The message id of the `x_node_lost` marker in session `id`'s events for its placement on
/// `node` under `lease`: every host that writes it within the duplicate window stores it once,
/// and a session moved since can be lost again.
pub(crate) fn node_lost_id(id: &str, node: &str, lease: u64) -> String {
    format!("{id}:x_node_lost:{node}:{lease}")
}

/// Where session `id`'s events go.
pub(crate) fn events_subject(id: &str) -> String {
    format!("colloquy.events.{id}")
}

/// Whether `name` can be one token of a subject and the tail of a key: letters, digits, `-`
/// and `_` (no `.`, `*`, `>` or space, which would split or widen a subject).
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_subject_tokens() {
        assert!(is_valid_name("worker-1"));
        assert!(is_valid_name("8f0c2b4e-1d2a-4c3b-9e8f-0a1b2c3d4e5f"));
        for bad in ["", "a.b", "a*", ">", "a b", "ü"] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn subjects_put_the_name_in_one_token() {
        assert_eq!(place_subject("n1"), "colloquy.node.n1.place");
        assert_eq!(command_subject("s1"), "colloquy.session.s1.cmd");
        assert_eq!(events_subject("s1"), "colloquy.events.s1");
        assert_eq!(node_key("n1"), "node.n1");
        assert_eq!(beat_host(&host_beat_subject("h-1")), Some("h-1"));
        assert_eq!(beat_host("colloquy.host.a.b.beat"), None);
    }
}
