//! Sessions on colloquy cluster nodes (feature `cluster`): each `POST /v1/sessions` is placed
//! on the least loaded node that serves the agent (`Cluster::start_session`), its requests go
//! to that node over NATS, and its events come from the cluster's event stream, read from the
//! session's first event. The agents offered are those the live nodes announce.

use std::sync::Arc;

use colloquy_cluster::{Cluster, ClusterError, RemoteSession};
use colloquy_protocol::{
    AgentList, ErrorCode, ErrorKind, ProtocolError, Reply, Request, ServerError, StartOptions,
};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};

use crate::backend::{Backend, SessionDriver, StartedSession, StreamItem};

/// A [`Backend`] that places sessions on the nodes of a cluster.
#[derive(Clone)]
pub struct ClusterBackend {
    cluster: Cluster,
    default: Option<String>,
}

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend").field("default", &self.default).finish_non_exhaustive()
    }
}

impl ClusterBackend {
    /// Places sessions through `cluster`; a start without an agent asks for `default`, or the
    /// first agent the nodes announce.
    pub fn new(cluster: Cluster, default: Option<String>) -> Self {
        Self { cluster, default }
    }
}

/// A cluster's failure as a refusal of the server's: a start NATS cannot carry is
/// `too_large` (413), which no retry mends, not `unavailable`.
fn refusal(e: &ClusterError) -> ServerError {
    let code = match e {
        ClusterError::NoNode { .. } => ErrorCode::TooManySessions,
        ClusterError::TooLarge { .. } => ErrorCode::TooLarge,
        ClusterError::Timeout { .. } | ClusterError::Nats(_) | ClusterError::Connect { .. } => {
            ErrorCode::Unavailable
        }
        _ => ErrorCode::StartFailed,
    };
    ServerError::new(code, e.to_string())
}

impl Backend for ClusterBackend {
    fn agents(&self) -> BoxFuture<'static, Result<AgentList, ServerError>> {
        let (cluster, default) = (self.cluster.clone(), self.default.clone());
        async move {
            let nodes = cluster.nodes().await.map_err(|e| refusal(&e))?;
            let mut agents: Vec<String> = Vec::new();
            for agent in nodes.iter().flat_map(|node| node.agents.iter()) {
                if !agents.contains(agent) {
                    agents.push(agent.clone());
                }
            }
            let default = default.or_else(|| agents.first().cloned());
            Ok(AgentList { agents, default })
        }
        .boxed()
    }

    fn start(
        &self,
        agent: String,
        options: StartOptions,
    ) -> BoxFuture<'static, Result<StartedSession, ServerError>> {
        let backend = self.clone();
        async move {
            let offered = backend.agents().await?;
            if !offered.agents.contains(&agent) {
                let message = format!("no live node serves an agent `{agent}`");
                return Err(ServerError::new(ErrorCode::UnknownAgent, message));
            }
            let session =
                backend.cluster.start_session(&agent, options).await.map_err(|e| refusal(&e))?;
            let events = match session.subscribe().await {
                Ok(events) => events,
                Err(e) => {
                    let _ = session
                        .close_with_reason(colloquy_model::CloseReason::ServerError.name())
                        .await;
                    return Err(refusal(&e));
                }
            };
            let id = session.id().to_owned();
            // The stream ends after `session_closed`, or after an error that ends it (the node
            // lost); events dropped by the stream's retention are counted, so their numbers
            // are skipped and clients get a `gap` for them.
            let events = events
                .scan(false, move |ended, item| {
                    let next = match item {
                        _ if *ended => None,
                        Ok(event) => Some(Some(StreamItem::Event(event.event))),
                        Err(ClusterError::EventsLost { first, last, .. }) => {
                            tracing::warn!(session = %id, first, last, "events lost by the stream");
                            let count = last.saturating_sub(first).saturating_add(1);
                            Some(Some(StreamItem::Lost { count }))
                        }
                        Err(e) => {
                            tracing::warn!(session = %id, error = %e, "the session's events end");
                            *ended = true;
                            None
                        }
                    };
                    std::future::ready(next)
                })
                .filter_map(std::future::ready)
                .boxed();
            Ok(StartedSession {
                session_id: session.id().to_owned(),
                agent,
                node: Some(session.node()),
                driver: Arc::new(Remote(session)),
                events,
            })
        }
        .boxed()
    }
}

/// A session on a node: each request runs there as it came.
struct Remote(RemoteSession);

impl SessionDriver for Remote {
    fn execute(&self, request: Request) -> BoxFuture<'static, Reply> {
        let session = self.0.clone();
        async move {
            match session.execute(request.command).await {
                Ok(reply) => reply,
                // Under way when its node was lost, and the session moved on: it may have run
                // there, and the session goes on (docs/cluster.md#moves).
                Err(e @ ClusterError::NodeLost { .. }) if !session.is_node_lost() => {
                    Reply::Error(ProtocolError::new(ErrorKind::Unavailable, e.to_string()))
                }
                Err(e) => Reply::Error(error(e)),
            }
        }
        .boxed()
    }
}

/// A cluster's failure as the protocol's error: the session's own answer as it came, a lost
/// node as a closed session, the transport's failures as `unavailable`.
fn error(e: ClusterError) -> ProtocolError {
    match e {
        ClusterError::Session(e) => e,
        e @ (ClusterError::NodeLost { .. } | ClusterError::NotFound(_)) => {
            ProtocolError::new(ErrorKind::Closed, e.to_string())
        }
        e @ ClusterError::TooLarge { .. } => ProtocolError::new(ErrorKind::TooLarge, e.to_string()),
        e => ProtocolError::new(ErrorKind::Unavailable, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_nats_cannot_carry_is_too_large_not_unavailable() {
        let e = ClusterError::TooLarge { what: "a start".into(), size: 2_000_000, limit: 1 << 20 };
        assert_eq!(refusal(&e).code, ErrorCode::TooLarge);
        assert_eq!(error(e).kind, ErrorKind::TooLarge);
        let timeout = ClusterError::Timeout { what: "placement".into(), after: Default::default() };
        assert_eq!(refusal(&timeout).code, ErrorCode::Unavailable);
    }
}
