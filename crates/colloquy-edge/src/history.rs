//! What a start's history may hold (docs/protocol.md#history). A client's history is prompt
//! content: the model reads it as the conversation so far, so a host takes from a client only
//! what a session of its own could have written, and says which item is not. The server checks
//! a start before it reaches a session; a cluster node checks again what only it knows, the
//! agents a handoff may name.

use std::collections::{BTreeSet, HashMap};

use colloquy_model::{ChatItem, Role, Timestamp};

/// The latest session time an item of a history may carry: ten years, in microseconds. A
/// session's clock starts after its history's latest item, so a larger one would bring the
/// new session's clock near its end (and its items would no longer sort after the history's).
pub const MAX_HISTORY_MICROS: u64 = 10 * 36_525 * 24 * 3_600 * 1_000_000 / 100;

/// What a host takes in a history besides the conversation itself.
pub struct Rules<'a> {
    /// `system` and `developer` messages (instructions to the model), refused unless the
    /// host allows them.
    pub instructions: bool,
    /// The agents a handoff may name; `None` where the host cannot tell (handoffs are then
    /// not checked).
    pub agents: Option<&'a BTreeSet<String>>,
}

/// Checks `items` against `rules`: the first problem, naming its item, as a message for the
/// client.
pub fn check(items: &[ChatItem], rules: &Rules<'_>) -> Result<(), String> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut calls: HashMap<&str, usize> = HashMap::new();
    let mut outputs: HashMap<&str, usize> = HashMap::new();
    let mut previous: Option<Timestamp> = None;
    for (at, item) in items.iter().enumerate() {
        let wrong = |why: String| Err(format!("{}: {why}", name(items, at)));
        if let Some(first) = ids.insert(item.id(), at) {
            return wrong(format!("its id is also {}'s: ids are unique", name(items, first)));
        }
        let created = item.created_at();
        if created.micros > MAX_HISTORY_MICROS {
            return wrong(format!(
                "created_at.micros {} is past {MAX_HISTORY_MICROS} (ten years of session time): \
                 a history's times are those of the session it comes from",
                created.micros
            ));
        }
        if previous.is_some_and(|previous| created < previous) {
            return wrong(
                "its created_at is before the previous item's: a history lists its items in \
                 the order they were created"
                    .into(),
            );
        }
        previous = Some(created);
        match item {
            ChatItem::Message(m)
                if matches!(m.role, Role::System | Role::Developer) && !rules.instructions =>
            {
                let role = if m.role == Role::System { "system" } else { "developer" };
                return wrong(format!(
                    "a `{role}` message is an instruction to the model, and this server takes \
                     none from a client's history"
                ));
            }
            ChatItem::FunctionCall(call) => {
                if let Some(first) = calls.insert(&call.call_id, at) {
                    return wrong(format!(
                        "its call_id `{}` is also {}'s",
                        call.call_id,
                        name(items, first)
                    ));
                }
            }
            ChatItem::FunctionCallOutput(output) => {
                if let Some(first) = outputs.insert(&output.call_id, at) {
                    return wrong(format!(
                        "the call `{}` already has its output in {}",
                        output.call_id,
                        name(items, first)
                    ));
                }
            }
            ChatItem::AgentHandoff(handoff)
                if rules.agents.is_some_and(|agents| !agents.contains(&handoff.new_agent)) =>
            {
                return wrong(format!(
                    "a handoff to `{}`, an agent this host does not offer",
                    handoff.new_agent
                ));
            }
            _ => {}
        }
    }
    let unpaired = items.iter().enumerate().find_map(|(at, item)| match item {
        ChatItem::FunctionCall(c) if !outputs.contains_key(c.call_id.as_str()) => {
            Some((at, "a function call without its output"))
        }
        ChatItem::FunctionCallOutput(o) if !calls.contains_key(o.call_id.as_str()) => {
            Some((at, "a function call output without its call"))
        }
        _ => None,
    });
    match unpaired {
        Some((at, why)) => Err(format!(
            "{}: {why} (a call and its output share a call_id, and both are in the history)",
            name(items, at)
        )),
        None => Ok(()),
    }
}

/// How a message names item `at`.
fn name(items: &[ChatItem], at: usize) -> String {
    format!("options.history[{at}] (id `{}`)", items[at].id())
}
