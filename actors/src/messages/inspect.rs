//! Assembling a snapshot ([`SessionHandle::inspect`]): the Session's part names its children,
//! then each is asked for its own from the caller's task, never from inside a handler.
//!
//! [`SessionHandle::inspect`]: crate::SessionHandle::inspect

use ractor::{ActorCell, ActorRef};

use crate::messages::{ActivityMsg, CoalescerMsg, SessionPart, ToolsetMsg};
use crate::types::lifecycle::ActorKind;
use crate::types::snapshot::{ActorNode, NodeStatus, SessionSnapshot};

/// Asks `actor` with `build`; `None` if it has stopped meanwhile.
async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    build: impl FnOnce(ractor::RpcReplyPort<T>) -> M,
) -> Option<T> {
    match actor.call(build, None).await {
        Ok(ractor::rpc::CallResult::Success(value)) => Some(value),
        _ => None,
    }
}

async fn toolsets(refs: &[ActorRef<ToolsetMsg>]) -> Vec<ActorNode> {
    let mut out = Vec::with_capacity(refs.len());
    for toolset in refs {
        out.extend(ask(toolset, ToolsetMsg::Inspect).await);
    }
    out
}

/// Builds the snapshot from the Session's answer by asking its children.
pub(crate) async fn assemble(session: &ActorCell, part: SessionPart) -> SessionSnapshot {
    let status = if part.closing { NodeStatus::Closing } else { NodeStatus::Running };
    let mut root = ActorNode::new(ActorKind::Session, "session".into(), status, session);
    let mut replies = None;
    if let Some(coalescer) = &part.coalescer
        && let Some(state) = ask(coalescer, CoalescerMsg::Inspect).await
    {
        let node = ActorNode::new(
            ActorKind::Coalescer,
            "coalescer".into(),
            NodeStatus::Running,
            &coalescer.get_cell(),
        );
        root.children.push(node);
        replies = Some(state);
    }
    let mut speeches = Vec::new();
    if let Some(activity) = ask(&part.activity, ActivityMsg::Inspect).await {
        let mut node = activity.node;
        node.children = toolsets(&activity.toolsets).await;
        node.children.extend(activity.unstarted);
        root.children.push(node);
        speeches = activity.speeches;
    }
    root.children.extend(toolsets(&part.toolsets).await);
    root.sort();
    SessionSnapshot {
        at_ms: part.at_ms,
        session_id: part.session_id,
        agent: part.agent,
        agent_state: part.agent_state,
        user_state: part.user_state,
        speeches,
        replies,
        tree: root,
    }
}
