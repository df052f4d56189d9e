//! The runtime's types as the protocol sends them: snapshots, running calls, errors and the
//! LLM's `tool_choice`, field for field. The runtime's enums are non-exhaustive, so a variant
//! it adds later needs its counterpart in the protocol and an arm here; until then it travels
//! as the fallback its function names (the tests check every variant known today).

use colloquy_actors as rt;
use colloquy_llm as llm;
use colloquy_protocol as proto;
use colloquy_protocol::{ErrorKind, ProtocolError};

/// A snapshot as it travels (the actor ids stay behind: they are local to this process).
pub fn snapshot(snapshot: rt::SessionSnapshot) -> proto::SessionSnapshot {
    proto::SessionSnapshot {
        at_ms: snapshot.at_ms,
        session_id: snapshot.session_id,
        agent: snapshot.agent,
        agent_state: snapshot.agent_state,
        user_state: snapshot.user_state,
        speeches: snapshot.speeches.into_iter().map(speech).collect(),
        replies: snapshot.replies.map(|replies| proto::CoalescerSnapshot {
            pending: replies.pending,
            offered: replies.offered,
        }),
        tree: node(snapshot.tree),
    }
}

fn speech(speech: rt::SpeechSnapshot) -> proto::SpeechSnapshot {
    let status = match speech.status {
        rt::SpeechStatus::Speaking => proto::SpeechStatus::Speaking,
        rt::SpeechStatus::WaitingForTools => proto::SpeechStatus::WaitingForTools,
        rt::SpeechStatus::Queued => proto::SpeechStatus::Queued,
        // A status added later: queued is the one that claims least.
        _ => proto::SpeechStatus::Queued,
    };
    proto::SpeechSnapshot { speech_id: speech.speech_id, status }
}

fn node(node: rt::ActorNode) -> proto::ActorNode {
    proto::ActorNode {
        kind: actor_kind(node.kind),
        id: node.id,
        status: node_status(node.status),
        agent: node.agent,
        scope: node.scope.map(|scope| match scope {
            rt::ToolsetScope::Session => proto::ToolsetScope::Session,
            rt::ToolsetScope::Agent => proto::ToolsetScope::Agent,
        }),
        tools: node.tools,
        call_id: node.call_id,
        name: node.name,
        arguments: node.arguments,
        elapsed_ms: node.elapsed_ms,
        updates: node.updates,
        cancellable: node.cancellable,
        children: node.children.into_iter().map(self::node).collect(),
    }
}

/// An actor's kind; a kind added later travels as `tool_call`, the leaf a client already
/// draws without children of its own.
pub fn actor_kind(kind: rt::ActorKind) -> proto::ActorKind {
    match kind {
        rt::ActorKind::Session => proto::ActorKind::Session,
        rt::ActorKind::Coalescer => proto::ActorKind::Coalescer,
        rt::ActorKind::Activity => proto::ActorKind::Activity,
        rt::ActorKind::Toolset => proto::ActorKind::Toolset,
        rt::ActorKind::ToolCall => proto::ActorKind::ToolCall,
        _ => proto::ActorKind::ToolCall,
    }
}

/// What an actor is doing; a status added later travels as `running`.
pub fn node_status(status: rt::NodeStatus) -> proto::NodeStatus {
    match status {
        rt::NodeStatus::Draining => proto::NodeStatus::Draining,
        rt::NodeStatus::Closing => proto::NodeStatus::Closing,
        rt::NodeStatus::Stopping => proto::NodeStatus::Stopping,
        rt::NodeStatus::AwaitingApproval => proto::NodeStatus::AwaitingApproval,
        rt::NodeStatus::Queued => proto::NodeStatus::Queued,
        rt::NodeStatus::Running => proto::NodeStatus::Running,
        _ => proto::NodeStatus::Running,
    }
}

/// A running call as it travels.
pub fn running_call(call: rt::RunningToolCall) -> proto::RunningToolCall {
    proto::RunningToolCall {
        call_id: call.call_id,
        name: call.name,
        arguments: call.arguments,
        cancellable: call.cancellable,
        awaiting_approval: call.awaiting_approval,
    }
}

/// A `tool_choice` as a command carries it.
pub fn tool_choice(choice: llm::ToolChoice) -> proto::ToolChoice {
    match choice {
        llm::ToolChoice::Auto => proto::ToolChoice::Auto,
        llm::ToolChoice::None => proto::ToolChoice::None,
        llm::ToolChoice::Required => proto::ToolChoice::Required,
        llm::ToolChoice::Named(name) => proto::ToolChoice::Named(name),
    }
}

/// A session's refusal, with the message the local error displays.
pub fn session_error(e: rt::SessionError) -> ProtocolError {
    let kind = match &e {
        rt::SessionError::Closed => ErrorKind::Closed,
        rt::SessionError::NestedRun => ErrorKind::NestedRun,
        rt::SessionError::RunFailed(_) => ErrorKind::RunFailed,
        rt::SessionError::Config(_) => ErrorKind::Config,
        // Spawn, and whatever a later version adds: the message says what it was.
        _ => ErrorKind::Spawn,
    };
    ProtocolError::new(kind, e.to_string())
}

/// Why a cancel did nothing, with the message the local error displays.
pub fn cancel_error(e: rt::CancelError) -> ProtocolError {
    let kind = match &e {
        rt::CancelError::NotFound(_) => ErrorKind::NotFound,
        rt::CancelError::NotCancellable(_) => ErrorKind::NotCancellable,
        rt::CancelError::InterruptionsDisallowed(_) => ErrorKind::InterruptionsDisallowed,
        _ => ErrorKind::Closed,
    };
    ProtocolError::new(kind, e.to_string())
}

/// Why an approval or a rejection did nothing, with the message the local error displays.
pub fn approval_error(e: rt::ApprovalError) -> ProtocolError {
    let kind = match &e {
        rt::ApprovalError::NotFound(_) => ErrorKind::NotFound,
        rt::ApprovalError::NotAwaiting(_) => ErrorKind::NotAwaiting,
        _ => ErrorKind::Closed,
    };
    ProtocolError::new(kind, e.to_string())
}
