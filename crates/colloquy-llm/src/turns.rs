//! The chat context regrouped into provider turns: the pure first half of every provider's
//! request mapping (docs/providers.md "From history to request").
//!
//! The runtime's history is ordered by timestamp, so a call's output can land after later
//! messages (a background tool's `<id>_final` pair, a reply stamped before its calls ended).
//! Providers want each assistant message that calls tools followed at once by the answers.
//! [`turns`] groups what one LLM step produced (its message, id `<step>`, and its calls, ids
//! `<step>/fnc_<n>`) into one assistant turn, placed where the step's first item stands, and
//! emits each call together with its output; anything else — a synthetic `<id>_update_<n>`
//! pair, a `say` — is a turn of its own, never attached to text another step wrote (the way
//! LiveKit Agents groups items, docs/decisions.md#request-turns). A call with no output
//! anywhere and an output with no call are left out (neither can be sent valid); handoff
//! items carry nothing for the model.

use std::collections::{HashMap, HashSet};

use colloquy_model::{ChatItem, FunctionCall, FunctionCallOutput, Role};
use serde_json::{Map, Value};

/// One turn of a conversation as a provider sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn<'a> {
    /// A user message.
    User(&'a str),
    /// A system or developer message inside the conversation.
    System(&'a str),
    /// What the assistant said in one LLM step and the calls it made, each with its output.
    Assistant {
        /// The step's text, if any (two messages under one step id joined by a space).
        text: Option<String>,
        /// The calls, in order, each answered.
        calls: Vec<AnsweredCall<'a>>,
    },
}

/// A call and its output.
pub type AnsweredCall<'a> = (&'a FunctionCall, &'a FunctionCallOutput);

/// The LLM step an item id belongs to: the id up to its first `/` (a step's calls are
/// `<step>/fnc_<n>`, its message `<step>`). An empty id belongs to no step.
pub fn step_of(item_id: &str) -> Option<&str> {
    let step = item_id.split('/').next().unwrap_or_default();
    (!step.is_empty()).then_some(step)
}

/// Regroups `items` (in context order) into turns; see the module comment.
///
/// ```
/// use colloquy_llm::turns::{turns, Turn};
/// assert_eq!(turns(std::iter::empty()), Vec::<Turn>::new());
/// ```
pub fn turns<'a>(items: impl IntoIterator<Item = &'a ChatItem>) -> Vec<Turn<'a>> {
    let items: Vec<&ChatItem> = items.into_iter().collect();
    let mut outputs: HashMap<&str, &FunctionCallOutput> = HashMap::new();
    for item in items.iter().copied() {
        if let ChatItem::FunctionCallOutput(o) = item {
            outputs.entry(o.call_id.as_str()).or_insert(o);
        }
    }
    let mut answered: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    // Each step's assistant turn, by step id: where it stands in `out`.
    let mut steps: HashMap<&str, usize> = HashMap::new();
    for item in items {
        match item {
            ChatItem::Message(m) if m.role == Role::Assistant => {
                if m.text.is_empty() {
                    continue;
                }
                if let Turn::Assistant { text, .. } = step_turn(&mut out, &mut steps, &m.id) {
                    match text {
                        Some(t) => {
                            t.push(' ');
                            t.push_str(&m.text);
                        }
                        None => *text = Some(m.text.clone()),
                    }
                }
            }
            ChatItem::Message(m) => out.push(match m.role {
                Role::User => Turn::User(&m.text),
                _ => Turn::System(&m.text),
            }),
            ChatItem::FunctionCall(c) => {
                let Some(output) = outputs.get(c.call_id.as_str()) else { continue };
                if !answered.insert(c.call_id.as_str()) {
                    continue; // a second call under one id cannot be answered twice
                }
                if let Turn::Assistant { calls, .. } = step_turn(&mut out, &mut steps, &c.id) {
                    calls.push((c, output));
                }
            }
            // Outputs travel with their calls; handoffs and kinds a provider has no turn for
            // are not sent.
            _ => {}
        }
    }
    out
}

/// The assistant turn of the step `item_id` belongs to, opened where it first appears.
fn step_turn<'a, 'b>(
    out: &'b mut Vec<Turn<'a>>,
    steps: &mut HashMap<&'a str, usize>,
    item_id: &'a str,
) -> &'b mut Turn<'a> {
    let opened = Turn::Assistant { text: None, calls: Vec::new() };
    let at = match step_of(item_id) {
        Some(step) => *steps.entry(step).or_insert_with(|| {
            out.push(opened);
            out.len() - 1
        }),
        None => {
            out.push(opened);
            out.len() - 1
        }
    };
    &mut out[at]
}

/// A call's arguments as a provider can take them back: the JSON object the model sent, `{}`
/// for nothing, and anything else — cut by `length`, garbled, not an object — wrapped as
/// `{"_invalid_arguments": "<text>"}`, so the model sees what it sent beside the error, and the
/// provider never refuses the request (the history keeps the text as sent).
///
/// ```
/// use colloquy_llm::turns::sendable_arguments;
/// use serde_json::json;
/// assert_eq!(sendable_arguments(r#"{"a":1}"#), json!({"a": 1}));
/// assert_eq!(sendable_arguments(" "), json!({}));
/// assert_eq!(sendable_arguments("{"), json!({"_invalid_arguments": "{"}));
/// assert_eq!(sendable_arguments("[1]"), json!({"_invalid_arguments": "[1]"}));
/// ```
pub fn sendable_arguments(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ if arguments.trim().is_empty() => Value::Object(Map::new()),
        _ => {
            let mut wrapped = Map::new();
            wrapped.insert("_invalid_arguments".into(), arguments.into());
            Value::Object(wrapped)
        }
    }
}

/// The id a provider gets for a call id: the id itself when it is at most `max_len` long and
/// every character passes `allowed`; otherwise its allowed characters (others become `_`),
/// cut to leave room for `_` and 16 hex digits of a hash of the whole id. Pure, so one id maps
/// the same way in every request of a session.
///
/// ```
/// use colloquy_llm::turns::provider_call_id;
/// let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
/// assert_eq!(provider_call_id("call_1", 40, ok), "call_1");
/// let long = "call_abcdefghijklmnopqrstuvwxyz_update_12_final";
/// let short = provider_call_id(long, 40, ok);
/// assert_eq!(short.len(), 40);
/// assert_eq!(short, provider_call_id(long, 40, ok));
/// assert!(provider_call_id("fc:1", 40, ok).starts_with("fc_1_"));
/// ```
pub fn provider_call_id(id: &str, max_len: usize, allowed: impl Fn(char) -> bool) -> String {
    if !id.is_empty() && id.len() <= max_len && id.chars().all(&allowed) {
        return id.to_string();
    }
    let keep = max_len.saturating_sub(17);
    let mut short: String =
        id.chars().map(|c| if allowed(c) { c } else { '_' }).take(keep).collect();
    while short.len() > keep {
        short.pop(); // `allowed` let multi-byte characters through
    }
    format!("{short}_{:016x}", fnv1a(id.as_bytes()))
}

/// FNV-1a, 64 bits: stable across processes and versions (std's hasher is neither).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{call, msg};

    fn output(call_id: &str) -> ChatItem {
        crate::fixtures::output(call_id, "ok")
    }

    fn shape(turns: &[Turn]) -> Vec<String> {
        turns
            .iter()
            .map(|t| match t {
                Turn::User(t) => format!("user:{t}"),
                Turn::System(t) => format!("system:{t}"),
                Turn::Assistant { text, calls } => {
                    let ids: Vec<&str> = calls.iter().map(|(c, _)| c.call_id.as_str()).collect();
                    format!("assistant:{}:{}", text.as_deref().unwrap_or("-"), ids.join(","))
                }
            })
            .collect()
    }

    #[test]
    fn late_outputs_join_their_calls_and_orphans_are_left_out() {
        let items = [
            msg("u1", Role::User, "hi"),
            msg("s1", Role::Assistant, "checking"),
            call("s1/fnc_0", "a"),
            call("s1/fnc_1", "b"),
            output("b"),
            msg("u2", Role::User, "still there?"),
            msg("s2", Role::Assistant, "yes"),
            output("a"),
            output("orphan"),
            call("s2/fnc_0", "unanswered"),
        ];
        let turns = turns(items.iter());
        assert_eq!(
            shape(&turns),
            ["user:hi", "assistant:checking:a,b", "user:still there?", "assistant:yes:"]
        );
    }

    #[test]
    fn each_step_is_one_turn_with_its_own_calls() {
        // Three sequential steps, each calling once, are three turns, not one with three
        // parallel calls; a step's second call under a used id is left out.
        let items = [
            msg("s1", Role::Assistant, "one"),
            call("s1/fnc_0", "a"),
            output("a"),
            call("s2/fnc_0", "b"),
            output("b"),
            msg("s3", Role::Assistant, "three"),
            call("s3/fnc_0", "c"),
            call("s3/fnc_1", "a"),
            output("c"),
        ];
        assert_eq!(
            shape(&turns(items.iter())),
            ["assistant:one:a", "assistant:-:b", "assistant:three:c"]
        );
    }

    #[test]
    fn a_synthetic_pair_is_never_attached_to_another_steps_text() {
        // A background call's `_final` pair lands between a step's text and its calls, and
        // after a reply's text: each pair is a turn of its own.
        let items = [
            msg("s1", Role::Assistant, "booking"),
            call("p1", "bk_update_1"),
            output("bk_update_1"),
            call("s1/fnc_0", "c"),
            output("c"),
            msg("s2", Role::Assistant, "all done"),
            call("p2", "bk_final"),
            output("bk_final"),
            call("", "hand_made"),
            output("hand_made"),
        ];
        assert_eq!(
            shape(&turns(items.iter())),
            [
                "assistant:booking:c",
                "assistant:-:bk_update_1",
                "assistant:all done:",
                "assistant:-:bk_final",
                "assistant:-:hand_made",
            ]
        );
    }

    #[test]
    fn ids_are_kept_or_shortened_stably() {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        assert_eq!(provider_call_id("", 40, ok).len(), 17);
        let a = provider_call_id(&"x".repeat(41), 40, ok);
        let b = provider_call_id(&"x".repeat(42), 40, ok);
        assert_ne!(a, b);
        assert_eq!((a.len(), b.len()), (40, 40));
        assert!(provider_call_id("é".repeat(30).as_str(), 40, |_| true).len() <= 40);
    }
}
