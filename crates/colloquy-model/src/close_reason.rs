//! Why a session closed: every reason the runtime, the server and the cluster close a session
//! for, by name, and a host's own. Events, metrics and the wire carry it as its string
//! (`session_closed {reason}`), which is what [`CloseReason::as_str`] gives and
//! [`CloseReason::parse`] reads.

use std::fmt;

/// Why a session closed.
///
/// ```
/// use colloquy_model::CloseReason;
/// assert_eq!(CloseReason::NodeLost.as_str(), "node_lost");
/// assert_eq!(CloseReason::parse("node_lost"), CloseReason::NodeLost);
/// assert_eq!(CloseReason::parse("shift_over"), CloseReason::Other("shift_over".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CloseReason {
    /// The host closed it (`SessionHandle::close`).
    Close,
    /// A session without a `Host` whose handles were all dropped.
    HandlesDropped,
    /// The agent ended the call (`EndCallTool`).
    EndCall,
    /// A client deleted it (`DELETE /v1/sessions/{id}`).
    ClientClosed,
    /// It stayed without a client past the server's idle bound.
    ClientGone,
    /// The server shut down.
    ServerShutdown,
    /// Its event stream ended before it closed (a backend that lost it).
    EventsEnded,
    /// The server could not carry it on (a backend's failure).
    ServerError,
    /// Its cluster node drained.
    NodeDraining,
    /// Its cluster node was lost.
    NodeLost,
    /// Its node could not store its events.
    EventsUnstored,
    /// Every host that held it went silent past the node's bound.
    HostLost,
    /// It stopped in this process and stays open in its store, to be resumed
    /// (`SessionHandle::suspend`).
    Suspended,
    /// Its store could not keep its journal: it stopped rather than go on as if it were
    /// durable (docs/durability.md).
    StoreFailed,
    /// Another process took its store's lease over (docs/durability.md#leases): this one may
    /// no longer write its journal, so it stopped.
    LeaseLost,
    /// A host's own reason (`SessionHandle::close_with_reason`).
    Other(String),
}

impl CloseReason {
    /// Every reason the runtime, the server and the cluster name.
    pub const KNOWN: [CloseReason; 15] = [
        Self::Close,
        Self::HandlesDropped,
        Self::EndCall,
        Self::ClientClosed,
        Self::ClientGone,
        Self::ServerShutdown,
        Self::EventsEnded,
        Self::ServerError,
        Self::NodeDraining,
        Self::NodeLost,
        Self::EventsUnstored,
        Self::HostLost,
        Self::Suspended,
        Self::StoreFailed,
        Self::LeaseLost,
    ];

    /// The reason as events and the wire spell it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Other(reason) => reason,
            known => known.name(),
        }
    }

    /// The name of a known reason (`""` for a host's own): usable in constants.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Close => "close",
            Self::HandlesDropped => "handles_dropped",
            Self::EndCall => "end_call",
            Self::ClientClosed => "client_closed",
            Self::ClientGone => "client_gone",
            Self::ServerShutdown => "server_shutdown",
            Self::EventsEnded => "events_ended",
            Self::ServerError => "server_error",
            Self::NodeDraining => "node_draining",
            Self::NodeLost => "node_lost",
            Self::EventsUnstored => "events_unstored",
            Self::HostLost => "host_lost",
            Self::Suspended => "suspended",
            Self::StoreFailed => "store_failed",
            Self::LeaseLost => "lease_lost",
            Self::Other(_) => "",
        }
    }

    /// The reason `reason` spells: a known one, else a host's own.
    pub fn parse(reason: &str) -> Self {
        Self::KNOWN
            .into_iter()
            .find(|known| known.name() == reason)
            .unwrap_or_else(|| Self::Other(reason.to_owned()))
    }

    /// Whether the runtime, the server or the cluster named it (not a host's own).
    pub fn is_known(&self) -> bool {
        !matches!(self, Self::Other(_))
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CloseReason> for String {
    fn from(reason: CloseReason) -> Self {
        match reason {
            CloseReason::Other(reason) => reason,
            known => known.name().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_reason_reads_back_as_itself_and_others_stay_a_hosts() {
        for known in CloseReason::KNOWN {
            assert!(known.is_known());
            assert_eq!(CloseReason::parse(known.as_str()), known);
        }
        let names: std::collections::HashSet<&str> =
            CloseReason::KNOWN.iter().map(CloseReason::name).collect();
        assert_eq!(names.len(), CloseReason::KNOWN.len(), "each name once");
        assert_eq!(CloseReason::parse("").as_str(), "");
        assert!(!CloseReason::parse("shift_over").is_known());
    }
}
