//! The trace a scenario produces (docs/scenario-format.md "Trace"): keys in the order the format
//! lists them, absent optional fields omitted.

use std::collections::BTreeMap;

use colloquy::chat::{ChatItem, Role};
use colloquy::events::{EventKind, SessionEvent};
use colloquy::llm::RecordedRequest;
use serde::Serialize;

/// The whole trace.
#[derive(Clone, Debug, Serialize)]
pub struct Trace {
    /// The session history (starts with the first handoff).
    pub history: Vec<TraceItem>,
    /// Each agent's final chat context.
    pub contexts: BTreeMap<String, Vec<TraceItem>>,
    /// Events in emission order (the runner's own `x_` records among them).
    pub events: Vec<serde_json::Value>,
    /// Every LLM request.
    pub llm_requests: Vec<TraceRequest>,
    /// Actor-tree snapshots (`inspect` steps).
    pub snapshots: Vec<serde_json::Value>,
    /// Every event the session emitted (the `x_` ones too), for the timeline view; not part of
    /// the trace file.
    #[serde(skip)]
    pub session_events: Vec<SessionEvent>,
    /// Every LLM request as the model received it (whole items, ids and times), for tests of
    /// the provider mappings; not part of the trace file.
    #[serde(skip)]
    pub recorded_requests: Vec<RecordedRequest>,
}

/// A snapshot in the format's shape: `{ "at_ms", "tree": NODE }`, NODE with `kind`, `id`,
/// `status`, the kind-specific fields the format lists, and `children` (sorted by kind, then
/// id). colloquy's extra fields (a toolset's `tools`, a call's `arguments`) are left out.
pub fn snapshot(snapshot: &colloquy::session::SessionSnapshot) -> serde_json::Value {
    fn node(n: &colloquy::session::ActorNode) -> serde_json::Value {
        let mut value = serde_json::to_value(n).expect("nodes serialize");
        if let Some(object) = value.as_object_mut() {
            object.shift_remove("tools");
            object.shift_remove("arguments");
            let children = n.children.iter().map(node).collect();
            object.insert("children".into(), serde_json::Value::Array(children));
        }
        value
    }
    serde_json::json!({ "at_ms": snapshot.at_ms, "tree": node(&snapshot.tree) })
}

impl Trace {
    /// The session drawn as a self-contained HTML page (see [`colloquy::timeline`]).
    pub fn timeline_html(&self, title: &str) -> String {
        colloquy::timeline::render_html(&self.session_events, title)
    }

    /// The trace as pretty JSON with a trailing newline, byte-identical for the same run.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("traces serialize");
        text.push('\n');
        text
    }
}

/// An item in trace form.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceItem {
    /// A message.
    Message {
        /// `user` or `assistant`.
        role: &'static str,
        /// The text.
        text: String,
        /// Assistant messages only.
        #[serde(skip_serializing_if = "Option::is_none")]
        interrupted: Option<bool>,
    },
    /// A function call.
    FunctionCall {
        /// Tool name.
        name: String,
        /// Call id.
        call_id: String,
        /// Argument text.
        arguments: String,
    },
    /// A function call output.
    FunctionCallOutput {
        /// Tool name.
        name: String,
        /// Call id.
        call_id: String,
        /// Output text.
        output: String,
        /// Error flag.
        is_error: bool,
        /// Reply flag.
        reply_required: bool,
    },
    /// An agent handoff.
    AgentHandoff {
        /// Previous agent (null for the first).
        old_agent: Option<String>,
        /// New agent.
        new_agent: String,
    },
}

impl TraceItem {
    /// The trace form of an item; `None` for a kind of item the format has no entry for.
    pub fn of(item: &ChatItem) -> Option<Self> {
        Some(match item {
            ChatItem::Message(m) => {
                let role = match m.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::System => "system",
                    Role::Developer => "developer",
                };
                let interrupted = (m.role == Role::Assistant).then_some(m.interrupted);
                TraceItem::Message { role, text: m.text.clone(), interrupted }
            }
            ChatItem::FunctionCall(c) => TraceItem::FunctionCall {
                name: c.name.clone(),
                call_id: c.call_id.clone(),
                arguments: c.arguments.clone(),
            },
            ChatItem::FunctionCallOutput(o) => TraceItem::FunctionCallOutput {
                name: o.name.clone(),
                call_id: o.call_id.clone(),
                output: o.output.clone(),
                is_error: o.is_error,
                reply_required: o.reply_required,
            },
            ChatItem::AgentHandoff(h) => TraceItem::AgentHandoff {
                old_agent: h.old_agent.clone(),
                new_agent: h.new_agent.clone(),
            },
            _ => return None,
        })
    }
}

/// Items in trace form, without system messages (instructions never appear in traces).
pub fn items<'a>(items: impl IntoIterator<Item = &'a ChatItem>) -> Vec<TraceItem> {
    items
        .into_iter()
        .filter(|i| {
            !i.as_message().is_some_and(|m| matches!(m.role, Role::System | Role::Developer))
        })
        .filter_map(TraceItem::of)
        .collect()
}

/// An LLM request in trace form: the recorded request with its items as a trace shows them
/// (its index is not serialized).
pub type TraceRequest = RecordedRequest<TraceItem>;

/// `request` in trace form.
pub fn trace_request(request: &RecordedRequest) -> TraceRequest {
    request.map_items(|sent| items(sent))
}

/// Whether an event belongs in a trace (colloquy's own `x_` events do not).
pub fn traced(event: &SessionEvent) -> bool {
    !matches!(event.kind, EventKind::ConversationItemAdded { .. })
}

/// An event in trace form.
pub(crate) trait ToValue {
    fn to_value(&self) -> serde_json::Value;
}

impl ToValue for SessionEvent {
    fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
