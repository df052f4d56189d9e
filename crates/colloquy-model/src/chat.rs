//! Chat items and the timestamp-ordered chat context (§0).
//!
//! Both the session history and every agent's chat context are [`ChatContext`]s. Inserting an
//! item places it after the last item whose `created_at` is less than or equal to its own, so
//! list position follows timestamps, not arrival order: an assistant message stamped when its
//! speech started playing lands before the tool outputs that finished while it played.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time::Timestamp;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// Developer instructions (kept distinct for providers that support it).
    Developer,
    /// The human.
    User,
    /// The agent.
    Assistant,
}

/// A text message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Message {
    /// Item id (`item_…`).
    pub id: String,
    /// Author.
    pub role: Role,
    /// The text (for an interrupted assistant message: the text actually played).
    pub text: String,
    /// True when an assistant message was cut short by an interruption.
    #[serde(default)]
    pub interrupted: bool,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FunctionCall {
    /// Item id (`<generation id>/fnc_<index>`).
    pub id: String,
    /// The call id the model gave.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Argument text: canonical (§5.1) when it parsed, otherwise as the model sent it.
    pub arguments: String,
    /// Free-form extra data (e.g. provider metadata).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// Creation time: when execution started, or stream time for calls never executed.
    pub created_at: Timestamp,
}

/// The result of a tool call, as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FunctionCallOutput {
    /// Item id.
    pub id: String,
    /// The call id this answers.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Output text.
    pub output: String,
    /// True when the output reports an error.
    pub is_error: bool,
    /// False when this output asks for no reply from the model.
    pub reply_required: bool,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A change of agent (the first one of a session has no old agent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AgentHandoff {
    /// Item id.
    pub id: String,
    /// The agent handed off from.
    pub old_agent: Option<String>,
    /// The agent handed off to.
    pub new_agent: String,
    /// Creation time.
    pub created_at: Timestamp,
}

/// One entry of a chat context or of the session history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChatItem {
    /// A text message.
    Message(Message),
    /// A tool call.
    FunctionCall(FunctionCall),
    /// A tool call's output.
    FunctionCallOutput(FunctionCallOutput),
    /// A change of agent.
    AgentHandoff(AgentHandoff),
}

impl ChatItem {
    /// The item's creation time.
    pub fn created_at(&self) -> Timestamp {
        match self {
            ChatItem::Message(m) => m.created_at,
            ChatItem::FunctionCall(c) => c.created_at,
            ChatItem::FunctionCallOutput(o) => o.created_at,
            ChatItem::AgentHandoff(h) => h.created_at,
        }
    }

    /// The item's id.
    pub fn id(&self) -> &str {
        match self {
            ChatItem::Message(m) => &m.id,
            ChatItem::FunctionCall(c) => &c.id,
            ChatItem::FunctionCallOutput(o) => &o.id,
            ChatItem::AgentHandoff(h) => &h.id,
        }
    }

    /// The message, if this is one.
    pub fn as_message(&self) -> Option<&Message> {
        match self {
            ChatItem::Message(m) => Some(m),
            _ => None,
        }
    }

    /// The function call, if this is one.
    pub fn as_function_call(&self) -> Option<&FunctionCall> {
        match self {
            ChatItem::FunctionCall(c) => Some(c),
            _ => None,
        }
    }

    /// The function call output, if this is one.
    pub fn as_function_call_output(&self) -> Option<&FunctionCallOutput> {
        match self {
            ChatItem::FunctionCallOutput(o) => Some(o),
            _ => None,
        }
    }
}

/// An ordered list of chat items, kept in timestamp order.
///
/// ```
/// use colloquy_model::{ChatContext, ChatItem, Message, Role, Timestamp};
/// let msg = |text: &str, micros| ChatItem::Message(Message {
///     id: text.into(), role: Role::User, text: text.into(), interrupted: false,
///     created_at: Timestamp::new(micros, micros),
/// });
/// let mut ctx = ChatContext::default();
/// ctx.insert(msg("b", 20));
/// ctx.insert(msg("a", 10)); // stamped earlier, arrives later: lands first
/// assert_eq!(ctx.items()[0].id(), "a");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChatContext {
    // Shared items: the session's history, each agent's context, an in-flight request's copy
    // and the `ConversationItemAdded` event all point at one allocation per item, so copying a
    // context copies pointers, never the conversation.
    items: Vec<Arc<ChatItem>>,
}

impl ChatContext {
    /// A context holding `items` as given (assumed already in timestamp order).
    pub fn from_items(items: Vec<ChatItem>) -> Self {
        Self { items: items.into_iter().map(Arc::new).collect() }
    }

    /// A context holding shared `items` as given (assumed already in timestamp order): a
    /// subset of another context, copying no item.
    pub fn from_shared(items: Vec<Arc<ChatItem>>) -> Self {
        Self { items }
    }

    /// Inserts after the last item whose timestamp is less than or equal to the new one's,
    /// scanning from the end (appends are O(1)). Returns the position. Takes a `ChatItem` or
    /// an `Arc<ChatItem>` (shared, not copied).
    pub fn insert(&mut self, item: impl Into<Arc<ChatItem>>) -> usize {
        let item = item.into();
        let at = item.created_at();
        let pos = self
            .items
            .iter()
            .rposition(|existing| existing.created_at() <= at)
            .map_or(0, |p| p + 1);
        self.items.insert(pos, item);
        pos
    }

    /// The items, in order (shared; they deref to [`ChatItem`]).
    pub fn items(&self) -> &[Arc<ChatItem>] {
        &self.items
    }

    /// The items, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &ChatItem> + ExactSizeIterator {
        self.items.iter().map(|item| &**item)
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The latest timestamp in the context, if any.
    pub fn last_timestamp(&self) -> Option<Timestamp> {
        self.items.iter().map(|item| item.created_at()).max()
    }

    /// Consumes the context, returning its items (copied only where still shared).
    pub fn into_items(self) -> Vec<ChatItem> {
        self.items.into_iter().map(Arc::unwrap_or_clone).collect()
    }

    /// The items as owned values (each one copied).
    pub fn to_items(&self) -> Vec<ChatItem> {
        self.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, micros: u64, seq: u64) -> ChatItem {
        ChatItem::Message(Message {
            id: id.into(),
            role: Role::User,
            text: id.into(),
            interrupted: false,
            created_at: Timestamp::new(micros, seq),
        })
    }

    fn ids(ctx: &ChatContext) -> Vec<&str> {
        ctx.iter().map(ChatItem::id).collect()
    }

    #[test]
    fn insertion_follows_timestamps_not_arrival() {
        let mut ctx = ChatContext::default();
        ctx.insert(msg("user", 0, 1));
        ctx.insert(msg("call", 10, 3));
        ctx.insert(msg("asst", 5, 2));
        ctx.insert(msg("out", 20, 4));
        assert_eq!(ids(&ctx), ["user", "asst", "call", "out"]);
    }

    #[test]
    fn equal_timestamps_keep_arrival_order() {
        let mut ctx = ChatContext::default();
        ctx.insert(msg("a", 5, 1));
        ctx.insert(msg("b", 5, 1));
        ctx.insert(msg("c", 1, 0));
        assert_eq!(ids(&ctx), ["c", "a", "b"]);
    }

    #[test]
    fn items_round_trip_through_json() {
        let item = ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: "item_1".into(),
            call_id: "c1".into(),
            name: "get_weather".into(),
            output: "sunny".into(),
            is_error: false,
            reply_required: true,
            created_at: Timestamp::new(1, 2),
        });
        let text = serde_json::to_string(&item).unwrap();
        assert!(text.starts_with(r#"{"type":"function_call_output","id":"item_1""#));
        let back: ChatItem = serde_json::from_str(&text).unwrap();
        assert_eq!(back, item);
    }
}
