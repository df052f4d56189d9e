//! The conversation: the session history, every agent's chat context, and the queued user
//! inputs whose messages wait to be committed (docs/decisions.md#queued-user-input).
//!
//! Invariant: every committed item is in the history, in timestamp order; an agent's context
//! holds the items committed to that agent except handoff markers, which only the history
//! keeps. Contexts are shared with in-flight LLM requests (copy on write), so a request sees
//! the context as it was when it started. Every queued input is taken exactly once.
//!
//! Applies: `Committed`, `AgentEntered`, `PairMoved`, `InputQueued`, `InputTaken`.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{ChatContext, ChatItem};

use super::fact::Fact;
use crate::messages::ClosedSession;

pub(crate) struct Conversation {
    history: ChatContext,
    contexts: BTreeMap<String, Arc<ChatContext>>,
    /// Accepted inputs waiting for their reply speech to begin: that speech's id and the
    /// text, in the order accepted.
    inputs: Vec<(String, String)>,
}

impl Conversation {
    pub(crate) fn new(history: ChatContext, contexts: BTreeMap<String, Arc<ChatContext>>) -> Self {
        Self { history, contexts, inputs: Vec::new() }
    }

    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        match fact {
            Fact::Committed { agent, items, .. } => self.commit(agent, items),
            Fact::AgentEntered { item } => {
                self.history.insert(Arc::clone(item));
                if let ChatItem::AgentHandoff(entered) = &**item {
                    self.contexts.entry(entered.new_agent.clone()).or_default();
                }
            }
            Fact::PairMoved { from, to, update_id } => self.move_pair(from, to, update_id),
            Fact::InputQueued { speech_id, text } => {
                self.inputs.push((speech_id.to_string(), text.to_string()));
            }
            Fact::InputTaken { speech_id } => self.inputs.retain(|(id, _)| id != speech_id),
            _ => {}
        }
    }

    /// The text of the input speech `speech_id` replies to, if it still waits.
    pub(crate) fn input(&self, speech_id: &str) -> Option<&str> {
        self.inputs.iter().find(|(id, _)| id == speech_id).map(|(_, text)| text.as_str())
    }

    /// The inputs still waiting, in the order accepted: their speech ids and texts.
    pub(crate) fn inputs(&self) -> &[(String, String)] {
        &self.inputs
    }

    /// The history's items, in order.
    pub(crate) fn history_items(&self) -> Vec<ChatItem> {
        self.history.to_items()
    }

    /// `agent`'s context, shared.
    pub(crate) fn context(&self, agent: &str) -> Option<&Arc<ChatContext>> {
        self.contexts.get(agent)
    }

    /// `agent`'s context, to change (copied first if a request still shares it).
    fn context_mut(&mut self, agent: &str) -> &mut ChatContext {
        Arc::make_mut(self.contexts.entry(agent.to_string()).or_default())
    }

    /// Commits items to `agent`'s context and the history.
    fn commit(&mut self, agent: &str, items: &[Arc<ChatItem>]) {
        let context = match self.contexts.get_mut(agent) {
            Some(context) => Arc::make_mut(context),
            None => Arc::make_mut(self.contexts.entry(agent.to_string()).or_default()),
        };
        for item in items {
            if !matches!(**item, ChatItem::AgentHandoff(_)) {
                context.insert(Arc::clone(item));
            }
            self.history.insert(Arc::clone(item));
        }
    }

    /// Copies the call and output of pair `update_id` from `from`'s context into `to`'s
    /// (decision 4: a pair received by an agent that is gone is persisted into the context of
    /// the agent delivering its reply).
    fn move_pair(&mut self, from: &str, to: &str, update_id: &str) {
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
    pub(crate) fn is_last(&self, agent: &str, item_id: &str) -> bool {
        self.contexts
            .get(agent)
            .and_then(|ctx| ctx.items().last())
            .is_some_and(|item| item.id() == item_id)
    }

    /// What the session held, for `ClosedSession`.
    pub(crate) fn closed(&self, reason: String) -> ClosedSession {
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

#[cfg(test)]
mod tests {
    use colloquy_model::chat::AgentHandoff;
    use colloquy_model::{FunctionCall, FunctionCallOutput, Message, Role, Timestamp};

    use super::*;

    fn at(seq: u64) -> Timestamp {
        Timestamp { micros: seq, seq }
    }

    fn said(id: &str, seq: u64) -> Arc<ChatItem> {
        let (id, text) = (id.to_string(), "hi".to_string());
        let message =
            Message { id, role: Role::User, text, interrupted: false, created_at: at(seq) };
        Arc::new(ChatItem::Message(message))
    }

    fn pair(call_id: &str, seq: u64) -> Vec<Arc<ChatItem>> {
        let call = FunctionCall {
            id: format!("{call_id}/call"),
            call_id: call_id.into(),
            name: "lookup".into(),
            arguments: "{}".into(),
            extra: Default::default(),
            created_at: at(seq),
        };
        let output = FunctionCallOutput {
            id: format!("{call_id}/output"),
            call_id: call_id.into(),
            name: "lookup".into(),
            output: "42".into(),
            is_error: false,
            reply_required: true,
            created_at: at(seq + 1),
        };
        vec![Arc::new(ChatItem::FunctionCall(call)), Arc::new(ChatItem::FunctionCallOutput(output))]
    }

    fn committed<'a>(agent: &'a str, items: &'a [Arc<ChatItem>]) -> Fact<'a> {
        Fact::Committed { agent, speech_id: None, items }
    }

    fn ids(context: &ChatContext) -> Vec<&str> {
        context.iter().map(ChatItem::id).collect()
    }

    /// The facts of a handoff, applied in order, give what the Session kept before them: the
    /// marker in the history only, the new agent's context open, a moved pair in both contexts.
    #[test]
    fn facts_rebuild_the_history_and_every_context() {
        let mut conversation = Conversation::new(ChatContext::default(), BTreeMap::new());
        conversation.apply(committed("triage", &[said("m1", 1)]));
        conversation.apply(committed("triage", &pair("c1", 2)));
        let marker = AgentHandoff {
            id: "h1".into(),
            old_agent: Some("triage".into()),
            new_agent: "billing".into(),
            created_at: at(4),
        };
        let item = Arc::new(ChatItem::AgentHandoff(marker));
        conversation.apply(Fact::AgentEntered { item: &item });
        assert!(conversation.context("billing").is_some_and(|c| c.items().is_empty()));
        conversation.apply(Fact::PairMoved { from: "triage", to: "billing", update_id: "c1" });

        let history = conversation.history_items();
        let history: Vec<&str> = history.iter().map(ChatItem::id).collect();
        assert_eq!(history, ["m1", "c1/call", "c1/output", "h1"]);
        let triage = conversation.context("triage").expect("triage's context");
        assert_eq!(ids(triage), ["m1", "c1/call", "c1/output"]);
        let billing = conversation.context("billing").expect("billing's context");
        assert_eq!(ids(billing), ["c1/call", "c1/output"]);
        assert!(conversation.is_last("triage", "c1/output"));
    }

    /// A queued input waits from `InputQueued` to `InputTaken`, each taken once, in order.
    #[test]
    fn an_input_waits_until_taken() {
        let mut conversation = Conversation::new(ChatContext::default(), BTreeMap::new());
        for (speech_id, text) in [("s2", "first"), ("s3", "second")] {
            conversation.apply(Fact::InputQueued { speech_id, text });
        }
        assert_eq!(conversation.input("s3"), Some("second"));
        conversation.apply(Fact::InputTaken { speech_id: "s2" });
        assert_eq!(conversation.input("s2"), None);
        let waiting: Vec<&str> = conversation.inputs().iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(waiting, ["s3"]);
    }
}
