//! How a session's own actors and tasks talk to it: events, commits and state changes, all
//! through the Session's mailbox so their order is the order they were sent in.

use std::sync::Arc;

use colloquy_core::{AgentState, ChatContext, ChatItem, EventKind, SessionEvent};
use ractor::ActorRef;

use super::messages::SessionMsg;
use crate::clock::SessionClock;
use crate::lifecycle::LifecycleSink;

/// A session's address plus its clock. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SessionLink {
    pub actor: ActorRef<SessionMsg>,
    pub clock: SessionClock,
    /// The session's id (for handles given to tools).
    pub id: Arc<str>,
    /// Where actors report their lifecycle.
    pub lifecycle: LifecycleSink,
    /// The session's `tracing` span: turn, speech and tool-call spans descend from it.
    pub span: Arc<tracing::Span>,
    /// How the session closed, once it has (shared with every handle).
    pub closed: Arc<std::sync::OnceLock<super::messages::ClosedSession>>,
}

impl SessionLink {
    /// Emits an event stamped now. A closed session drops it (nobody is listening).
    pub fn emit(&self, kind: EventKind) {
        let event = SessionEvent { at_ms: self.clock.elapsed_ms(), kind };
        let _ = self.actor.cast(SessionMsg::Emit(event));
    }

    /// Commits items a speech produced to `agent`'s context and the history.
    pub fn commit(&self, agent: &str, speech_id: &str, items: Vec<ChatItem>) {
        if items.is_empty() {
            return;
        }
        let (agent, speech_id) = (agent.to_string(), Some(speech_id.to_string()));
        let _ = self.actor.cast(SessionMsg::Commit { agent, speech_id, items, awaits_reply: None });
    }

    /// Reports an agent state.
    pub fn set_agent_state(&self, state: AgentState) {
        let _ = self.actor.cast(SessionMsg::SetAgentState(state));
    }

    /// The agent's current chat context for an LLM request (a shared snapshot, with
    /// placeholders for running calls it does not mention), or `None` once the session is gone.
    pub async fn request_context(&self, agent: &str) -> Option<Arc<ChatContext>> {
        let agent = agent.to_string();
        match self.actor.call(|reply| SessionMsg::RequestContext { agent, reply }, None).await {
            Ok(ractor::rpc::CallResult::Success(ctx)) => ctx,
            _ => None,
        }
    }
}
