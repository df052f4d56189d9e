//! The chat context regrouped into provider turns: the pure first half of every provider's
//! request mapping (docs/providers.md "From history to request").
//!
//! The runtime's history is ordered by timestamp, so a call's output can land after later
//! messages (a background tool's `<id>_final` pair, a reply stamped before its calls ended).
//! Providers want each assistant message that calls tools followed at once by the answers.
//! [`turns`] walks the items once and emits each call together with its output, attached to
//! the assistant turn that made it; a call with no output anywhere and an output with no call
//! are left out (neither can be sent valid); handoff items carry nothing for the model.

use std::collections::{HashMap, HashSet};

use colloquy_core::{ChatItem, FunctionCall, FunctionCallOutput, Role};

/// One turn of a conversation as a provider sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn<'a> {
    /// A user message.
    User(&'a str),
    /// A system or developer message inside the conversation.
    System(&'a str),
    /// What the assistant said and the calls it made, each with its output.
    Assistant {
        /// The text (several messages of one turn joined by a space), if any.
        text: Option<String>,
        /// The calls, in order, each answered.
        calls: Vec<AnsweredCall<'a>>,
    },
}

/// A call and its output.
pub type AnsweredCall<'a> = (&'a FunctionCall, &'a FunctionCallOutput);

/// The assistant turn being gathered: its text and its calls.
type OpenTurn<'a> = (Option<String>, Vec<AnsweredCall<'a>>);

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
    let mut open: Option<OpenTurn> = None;
    for item in items {
        match item {
            ChatItem::Message(m) if m.role == Role::Assistant => {
                if m.text.is_empty() {
                    continue;
                }
                // Text after calls belongs to the next turn (the model spoke again).
                if open.as_ref().is_some_and(|(_, calls)| !calls.is_empty()) {
                    close(&mut out, open.take());
                }
                let (text, _) = open.get_or_insert((None, Vec::new()));
                match text {
                    Some(t) => {
                        t.push(' ');
                        t.push_str(&m.text);
                    }
                    None => *text = Some(m.text.clone()),
                }
            }
            ChatItem::Message(m) => {
                close(&mut out, open.take());
                out.push(match m.role {
                    Role::User => Turn::User(&m.text),
                    _ => Turn::System(&m.text),
                });
            }
            ChatItem::FunctionCall(c) => {
                let Some(output) = outputs.get(c.call_id.as_str()) else { continue };
                if !answered.insert(c.call_id.as_str()) {
                    continue; // a second call under one id cannot be answered twice
                }
                open.get_or_insert((None, Vec::new())).1.push((c, output));
            }
            // Outputs travel with their calls; handoffs and kinds a provider has no turn for
            // are not sent.
            _ => {}
        }
    }
    close(&mut out, open);
    out
}

fn close<'a>(out: &mut Vec<Turn<'a>>, open: Option<OpenTurn<'a>>) {
    if let Some((text, calls)) = open {
        out.push(Turn::Assistant { text, calls });
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
    use colloquy_core::{Message, Timestamp};

    fn msg(role: Role, text: &str) -> ChatItem {
        ChatItem::Message(Message {
            id: text.into(),
            role,
            text: text.into(),
            interrupted: false,
            created_at: Timestamp::new(0, 0),
        })
    }

    fn call(id: &str) -> ChatItem {
        ChatItem::FunctionCall(FunctionCall {
            id: format!("item_{id}"),
            call_id: id.into(),
            name: "f".into(),
            arguments: "{}".into(),
            extra: Default::default(),
            created_at: Timestamp::new(0, 0),
        })
    }

    fn output(id: &str) -> ChatItem {
        ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: format!("out_{id}"),
            call_id: id.into(),
            name: "f".into(),
            output: "ok".into(),
            is_error: false,
            reply_required: true,
            created_at: Timestamp::new(0, 0),
        })
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
            msg(Role::User, "hi"),
            msg(Role::Assistant, "checking"),
            call("a"),
            call("b"),
            output("b"),
            msg(Role::User, "still there?"),
            msg(Role::Assistant, "yes"),
            output("a"),
            output("orphan"),
            call("unanswered"),
        ];
        let turns = turns(items.iter());
        assert_eq!(
            shape(&turns),
            ["user:hi", "assistant:checking:a,b", "user:still there?", "assistant:yes:"]
        );
    }

    #[test]
    fn text_after_calls_starts_a_new_assistant_turn_and_texts_join() {
        let items = [
            msg(Role::Assistant, "one"),
            msg(Role::Assistant, "two"),
            call("a"),
            output("a"),
            msg(Role::Assistant, "three"),
            call("a"),
        ];
        assert_eq!(shape(&turns(items.iter())), ["assistant:one two:a", "assistant:three:"]);
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
