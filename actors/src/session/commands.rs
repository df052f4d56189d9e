//! A host's command sent with an id (docs/durability.md#commands): run once per id. One the
//! session took (in this process, or before a resume, from its journal) is answered `Ok`
//! without running again; any other runs as it would without an id, and is taken if it did
//! something (parts/commands.rs decides when, from the facts its run decides).

use std::sync::Arc;

use super::state::SessionState;
use crate::messages::{HostMsg, SessionMsg, ToolMsg};

impl SessionState {
    pub(super) fn on_once(&mut self, id: Arc<str>, message: SessionMsg) {
        if self.host.commands.is_taken(&id) {
            return answer_taken(message);
        }
        // A cancel or an answer is the call's Toolset's to carry out: taken if the call runs.
        let call = match &message {
            SessionMsg::Tool(
                ToolMsg::CancelCall { call_id, .. } | ToolMsg::AnswerApproval { call_id, .. },
            ) if self.tools.calls.get(call_id).is_some() => Some(call_id.clone()),
            _ => None,
        };
        self.host.commands.begin(id, call.as_deref());
        match message {
            SessionMsg::Host(message) => self.on_host(message),
            SessionMsg::Tool(message) => self.on_tool(message),
            // The handle puts an id on host commands only.
            _ => {
                let session = &self.link.id;
                tracing::warn!(%session, "a command id on a message that is not one");
            }
        }
        self.host.commands.end();
    }
}

/// Answers a command taken already as the first run was: it did something, so it succeeded.
fn answer_taken(message: SessionMsg) {
    match message {
        SessionMsg::Host(
            HostMsg::UserTurn { reply, .. }
            | HostMsg::UserInput { reply, .. }
            | HostMsg::GenerateReply { reply, .. }
            | HostMsg::Say { reply, .. },
        ) => drop(reply.send(Ok(()))),
        SessionMsg::Tool(ToolMsg::CancelCall { reply, .. }) => drop(reply.send(Ok(()))),
        SessionMsg::Tool(ToolMsg::AnswerApproval { reply, .. }) => drop(reply.send(Ok(()))),
        // Only those carry an id (`SessionHandle::with_command_id`); any other is dropped.
        _ => {}
    }
}
