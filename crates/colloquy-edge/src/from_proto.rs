//! The protocol's types as the runtime's, for a host that drives a session elsewhere and hands
//! its answers on as a local session's (the cluster's `RemoteSession`). The protocol's enums
//! are non-exhaustive too: a variant added there falls back as `to_proto` does.

use colloquy_actors as rt;
use colloquy_actors::ractor::ActorId;
use colloquy_llm as llm;
use colloquy_protocol as proto;

/// A snapshot taken elsewhere; its actor ids are all `ActorId::Local(0)`, since ids are local
/// to the process that took it.
pub fn snapshot(snapshot: proto::SessionSnapshot) -> rt::SessionSnapshot {
    rt::SessionSnapshot {
        at_ms: snapshot.at_ms,
        session_id: snapshot.session_id,
        agent: snapshot.agent,
        agent_state: snapshot.agent_state,
        user_state: snapshot.user_state,
        speeches: snapshot.speeches.into_iter().map(speech).collect(),
        replies: snapshot.replies.map(|replies| rt::CoalescerSnapshot {
            pending: replies.pending,
            offered: replies.offered,
        }),
        tree: node(snapshot.tree),
    }
}

fn speech(speech: proto::SpeechSnapshot) -> rt::SpeechSnapshot {
    let status = match speech.status {
        proto::SpeechStatus::Speaking => rt::SpeechStatus::Speaking,
        proto::SpeechStatus::WaitingForTools => rt::SpeechStatus::WaitingForTools,
        proto::SpeechStatus::Queued => rt::SpeechStatus::Queued,
        _ => rt::SpeechStatus::Queued,
    };
    rt::SpeechSnapshot { speech_id: speech.speech_id, status }
}

fn node(node: proto::ActorNode) -> rt::ActorNode {
    rt::ActorNode {
        kind: actor_kind(node.kind),
        id: node.id,
        status: node_status(node.status),
        agent: node.agent,
        scope: node.scope.map(|scope| match scope {
            proto::ToolsetScope::Session => rt::ToolsetScope::Session,
            proto::ToolsetScope::Agent => rt::ToolsetScope::Agent,
        }),
        tools: node.tools,
        call_id: node.call_id,
        name: node.name,
        arguments: node.arguments,
        elapsed_ms: node.elapsed_ms,
        updates: node.updates,
        cancellable: node.cancellable,
        children: node.children.into_iter().map(self::node).collect(),
        actor_id: ActorId::Local(0),
    }
}

/// An actor's kind.
pub fn actor_kind(kind: proto::ActorKind) -> rt::ActorKind {
    match kind {
        proto::ActorKind::Session => rt::ActorKind::Session,
        proto::ActorKind::Coalescer => rt::ActorKind::Coalescer,
        proto::ActorKind::Activity => rt::ActorKind::Activity,
        proto::ActorKind::Toolset => rt::ActorKind::Toolset,
        proto::ActorKind::ToolCall => rt::ActorKind::ToolCall,
        _ => rt::ActorKind::ToolCall,
    }
}

/// What an actor is doing.
pub fn node_status(status: proto::NodeStatus) -> rt::NodeStatus {
    match status {
        proto::NodeStatus::Draining => rt::NodeStatus::Draining,
        proto::NodeStatus::Closing => rt::NodeStatus::Closing,
        proto::NodeStatus::Stopping => rt::NodeStatus::Stopping,
        proto::NodeStatus::AwaitingApproval => rt::NodeStatus::AwaitingApproval,
        proto::NodeStatus::Queued => rt::NodeStatus::Queued,
        proto::NodeStatus::Running => rt::NodeStatus::Running,
        _ => rt::NodeStatus::Running,
    }
}

/// A running call.
pub fn running_call(call: proto::RunningToolCall) -> rt::RunningToolCall {
    rt::RunningToolCall {
        call_id: call.call_id,
        name: call.name,
        arguments: call.arguments,
        cancellable: call.cancellable,
        awaiting_approval: call.awaiting_approval,
    }
}

/// A command's `tool_choice`, as the LLM request takes it.
pub fn tool_choice(choice: proto::ToolChoice) -> llm::ToolChoice {
    match choice {
        proto::ToolChoice::Auto => llm::ToolChoice::Auto,
        proto::ToolChoice::None => llm::ToolChoice::None,
        proto::ToolChoice::Required => llm::ToolChoice::Required,
        proto::ToolChoice::Named(name) => llm::ToolChoice::Named(name),
    }
}
