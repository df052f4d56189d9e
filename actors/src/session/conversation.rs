//! The session history and every agent's chat context; committing items to them, and the
//! context an LLM request sees.
//!
//! Invariant: every committed item is in the history, in timestamp order; an agent's context
//! holds the items committed to that agent except handoff markers, which only the history
//! keeps. Contexts are shared with in-flight LLM requests (copy on write), so a request sees
//! the context as it was when it started.
//!
//! Reads: `current` (its catalog), `events` (who listens), `calls` (placeholders). Writes:
//! `conversation`, `replies` (a reply speech said something), `testing` (the run's items).
//! Emits `conversation_item_added`.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{ChatContext, ChatItem, EventKind, EventType};

use super::state::SessionState;
use crate::messages::ClosedSession;

pub(super) struct Conversation {
    history: ChatContext,
    contexts: BTreeMap<String, Arc<ChatContext>>,
}

impl Conversation {
    pub(super) fn new(history: ChatContext, contexts: BTreeMap<String, Arc<ChatContext>>) -> Self {
        Self { history, contexts }
    }

    /// The history's items, in order.
    pub(super) fn history_items(&self) -> Vec<ChatItem> {
        self.history.to_items()
    }

    /// `agent`'s context, shared.
    pub(super) fn context(&self, agent: &str) -> Option<&Arc<ChatContext>> {
        self.contexts.get(agent)
    }

    /// Makes sure `agent` has a context (an agent entering for the first time).
    pub(super) fn open(&mut self, agent: &str) {
        self.contexts.entry(agent.to_string()).or_default();
    }

    /// `agent`'s context, to change (copied first if a request still shares it).
    fn context_mut(&mut self, agent: &str) -> &mut ChatContext {
        Arc::make_mut(self.contexts.entry(agent.to_string()).or_default())
    }

    /// Commits items to `agent`'s context and the history; returns them shared when `keep`
    /// (for `conversation_item_added` events).
    pub(super) fn commit(
        &mut self,
        agent: &str,
        items: Vec<ChatItem>,
        keep: bool,
    ) -> Vec<Arc<ChatItem>> {
        let context = match self.contexts.get_mut(agent) {
            Some(context) => Arc::make_mut(context),
            None => Arc::make_mut(self.contexts.entry(agent.to_string()).or_default()),
        };
        let mut added = Vec::new();
        for item in items {
            let item = Arc::new(item);
            if !matches!(*item, ChatItem::AgentHandoff(_)) {
                context.insert(Arc::clone(&item));
            }
            if keep {
                added.push(Arc::clone(&item));
            }
            self.history.insert(item);
        }
        added
    }

    /// Records a handoff marker: the history only.
    pub(super) fn mark_handoff(&mut self, item: ChatItem) -> Arc<ChatItem> {
        let item = Arc::new(item);
        self.history.insert(Arc::clone(&item));
        item
    }

    /// Copies the call and output of pair `update_id` from `from`'s context into `to`'s
    /// (decision 4: a pair received by an agent that is gone is persisted into the context of
    /// the agent delivering its reply).
    pub(super) fn move_pair(&mut self, from: &str, to: &str, update_id: &str) {
        let Some(source) = self.contexts.get(from) else { return };
        let moved: Vec<Arc<ChatItem>> = source
            .items()
            .iter()
            .filter(|item| match &***item {
                ChatItem::FunctionCall(c) => c.call_id == update_id,
                ChatItem::FunctionCallOutput(o) => o.call_id == update_id,
                _ => false,
            })
            .cloned()
            .collect();
        if moved.is_empty() {
            return;
        }
        let context = self.context_mut(to);
        for item in moved {
            context.insert(item);
        }
    }

    /// Whether `item_id` is still the last item of `agent`'s context.
    pub(super) fn is_last(&self, agent: &str, item_id: &str) -> bool {
        self.contexts
            .get(agent)
            .and_then(|ctx| ctx.items().last())
            .is_some_and(|item| item.id() == item_id)
    }

    /// What the session held, for `ClosedSession`.
    pub(super) fn closed(&self, reason: String) -> ClosedSession {
        ClosedSession {
            reason,
            history: self.history.clone(),
            contexts: self
                .contexts
                .iter()
                .map(|(k, v)| (k.clone(), ChatContext::clone(v)))
                .collect(),
        }
    }
}

impl SessionState {
    /// Commits items a speech (`speech_id`) or a toolset produced to `agent`'s context and
    /// the history.
    pub(super) fn commit(&mut self, agent: &str, speech_id: Option<&str>, items: Vec<ChatItem>) {
        if let Some(speech_id) = speech_id {
            self.replies.said(speech_id);
            if self.testing.watches(speech_id) {
                let catalog = (agent == self.current.id()).then_some(&**self.current.catalog());
                self.testing.record(&items, catalog);
            }
        }
        let notify = self.events.wants(EventType::ConversationItemAdded);
        for item in self.conversation.commit(agent, items, notify) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
    }

    /// `agent`'s context for an LLM request, with a placeholder pair for every running call
    /// it does not mention (§16).
    pub(super) fn request_context(&self, agent: &str) -> Option<Arc<ChatContext>> {
        self.conversation.context(agent).map(|context| self.calls.with_placeholders(context))
    }
}
