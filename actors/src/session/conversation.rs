//! Committing items, and the context an LLM request sees.
//!
//! Decides `Committed` (with `RunRecorded` when a run watches the speech); emits
//! `conversation_item_added`.

use std::sync::Arc;

use colloquy_model::{ChatContext, ChatItem, EventKind, EventType};

use super::parts::fact::Fact;
use super::parts::testing::validated;
use super::state::SessionState;

impl SessionState {
    /// Commits items a speech (`speech_id`) or a toolset produced to `agent`'s context and
    /// the history.
    pub(super) fn commit(
        &mut self,
        agent: Arc<str>,
        speech_id: Option<String>,
        items: Vec<ChatItem>,
    ) {
        let items: Vec<Arc<ChatItem>> = items.into_iter().map(Arc::new).collect();
        if let Some(speech_id) = &speech_id
            && self.host.testing.watches(speech_id)
        {
            let current = &self.agent.current;
            let validated = match *agent == *current.id() {
                true => validated(&items, current.catalog()),
                false => Vec::new(),
            };
            self.apply(Fact::RunRecorded { items: &items, validated: &validated });
        }
        let notify = self.host.events.wants(EventType::ConversationItemAdded);
        self.apply(Fact::Committed {
            agent: &agent,
            speech_id: speech_id.as_deref(),
            items: &items,
        });
        if notify {
            for item in items {
                self.emit_now(EventKind::ConversationItemAdded { item });
            }
        }
    }

    /// `agent`'s context for an LLM request, with a placeholder pair for every running call
    /// it does not mention (§16).
    pub(super) fn request_context(&self, agent: &str) -> Option<Arc<ChatContext>> {
        let calls = &self.tools.calls;
        self.conversation.context(agent).map(|context| calls.with_placeholders(context))
    }
}
