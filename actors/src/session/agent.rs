//! The first agent's entry, and an entering agent's greeting.
//!
//! Decides `AgentEntered` for the first agent; emits `agent_handoff` and its item; sets the
//! agent state and starts the greeting.

use std::sync::Arc;

use colloquy_llm::RequestKind;
use colloquy_model::chat::AgentHandoff;
use colloquy_model::{AgentState, ChatItem, EventKind, SpeechSource};

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::SpeechContent;

impl SessionState {
    /// Records the first agent's entry and moves to listening.
    pub(super) fn start(&mut self) {
        if self.host.journal.is_some() && self.agent.current.greets() {
            let seeded = self.conversation.history_items();
            if !seeded.is_empty() {
                let agent = self.agent.current.id().to_string();
                self.apply(Fact::HistorySeeded { agent: &agent, items: &seeded });
            }
        }
        let previous_agent = self.agent.current.previous().map(str::to_string);
        let new_agent = self.agent.current.id().to_string();
        let item = Arc::new(ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: previous_agent.clone(),
            new_agent: new_agent.clone(),
            created_at: self.link.clock.now(),
        }));
        self.apply(Fact::AgentEntered { item: &item });
        self.emit_now(EventKind::AgentHandoff { old_agent: previous_agent, new_agent });
        self.emit_now(EventKind::ConversationItemAdded { item });
        self.set_agent_state(AgentState::Listening);
        let current = &self.agent.current;
        if let Some(instructions) =
            current.agent().on_enter_instructions().filter(|_| current.greets())
        {
            self.start_on_enter(instructions.to_string());
        }
    }

    /// The entering agent's greeting (`Agent::on_enter_reply`).
    pub(super) fn start_on_enter(&mut self, instructions: String) {
        let content = SpeechContent::Reply {
            kind: RequestKind::OnEnter,
            extra_instructions: Some(instructions),
            tool_choice: None,
        };
        let _ = self.create_speech(SpeechSource::OnEnter, content);
    }
}
