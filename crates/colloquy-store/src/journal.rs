//! A session's journal read back: what a resume starts from.

use std::collections::BTreeMap;

use colloquy_model::{ChatItem, FunctionCall};

use crate::record::{Entry, Record};

/// A call that had started and had not ended at the journal's last record: it was running
/// when its process ended, and may or may not have done its work.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallInDoubt {
    /// The call, as the model made it.
    pub call: FunctionCall,
    /// Whether it could be cancelled.
    pub cancellable: bool,
    /// Whether its body may have begun: false for a call that waited (for approval, for a
    /// place) and was not let through, which may run as it would have.
    pub started: bool,
}

/// A pair inserted for a deferred reply that no reply had taken at the journal's last record:
/// a resume owes the model that reply.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OwedReply {
    /// The pair's call id (`<id>_update_<n>` or `<id>_final`).
    pub update_id: String,
    /// The agent whose context holds it.
    pub agent: String,
    /// The id of its output item.
    pub output_item_id: String,
}

/// A remembered result ([`Record::ResultRemembered`]), as a resume seeds it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RememberedResult {
    /// What the model read.
    pub output: String,
    /// Whether it asked for a reply.
    pub reply_required: bool,
    /// The `tool_call_ended` message.
    pub message: Option<String>,
    /// When it is forgotten (wall-clock milliseconds).
    pub until_unix_ms: u64,
}

impl RememberedResult {
    /// `output` (asking for a reply or not, ended with `message`), remembered until
    /// `until_unix_ms`.
    pub fn new(
        output: impl Into<String>,
        reply_required: bool,
        message: Option<String>,
        until_unix_ms: u64,
    ) -> Self {
        Self { output: output.into(), reply_required, message, until_unix_ms }
    }
}

/// How many of its newest command ids a session keeps (and a resume reads back): a host
/// resends a command within seconds, so a thousand covers any burst of commands between a
/// send and its resend.
pub const COMMANDS_KEPT: usize = 1024;

/// What a session's entries add up to.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Journal {
    /// The session history, in order (handoff markers included).
    pub history: Vec<ChatItem>,
    /// Each agent's chat context, in order (no handoff markers).
    pub contexts: BTreeMap<String, Vec<ChatItem>>,
    /// The agent the session was on last.
    pub agent: Option<String>,
    /// The calls running at the last record, in the order they started.
    pub running: Vec<CallInDoubt>,
    /// The pairs still waiting for their deferred reply, in the order inserted.
    pub unreplied: Vec<String>,
    /// Why the session closed, if it began to.
    pub closed: Option<String>,
    /// The results `idempotent` tools remembered, by result key (the last of each).
    pub remembered: BTreeMap<String, RememberedResult>,
    /// The ids of the commands it took ([`Record::CommandTaken`]), oldest first: the newest
    /// [`COMMANDS_KEPT`].
    pub commands: Vec<String>,
    /// The number of the last entry (0 for none).
    pub last_seq: u64,
}

impl Journal {
    /// The replies still owed, in the order their pairs were inserted (a pair whose output is
    /// in no context is skipped: nothing could reply to it).
    pub fn owed_replies(&self) -> Vec<OwedReply> {
        let mut owed = Vec::new();
        for update_id in &self.unreplied {
            let found = self.contexts.iter().find_map(|(agent, items)| {
                items.iter().find_map(|item| match item {
                    ChatItem::FunctionCallOutput(o) if o.call_id == *update_id => {
                        Some((agent.clone(), o.id.clone()))
                    }
                    _ => None,
                })
            });
            if let Some((agent, output_item_id)) = found
                && !owed.iter().any(|o: &OwedReply| o.update_id == *update_id)
            {
                owed.push(OwedReply { update_id: update_id.clone(), agent, output_item_id });
            }
        }
        owed
    }

    /// Applies `entries`, in order, to an empty journal.
    pub fn fold(entries: &[Entry]) -> Self {
        let mut journal = Self::default();
        for entry in entries {
            journal.apply(&entry.record);
            journal.last_seq = entry.seq;
        }
        // As a live context keeps them: by time, items of one time in the order committed (a
        // message committed while a blocking call ran sorts before that call's items).
        journal.history.sort_by_key(ChatItem::created_at);
        let over = journal.commands.len().saturating_sub(COMMANDS_KEPT);
        journal.commands.drain(..over);
        for items in journal.contexts.values_mut() {
            items.sort_by_key(ChatItem::created_at);
        }
        journal
    }

    fn set_started(&mut self, call_id: &str, started: bool) {
        if let Some(call) = self.running.iter_mut().find(|r| r.call.call_id == call_id) {
            call.started = started;
        }
    }

    fn apply(&mut self, record: &Record) {
        match record {
            Record::ItemsCommitted { agent, items } => {
                for item in items {
                    if !matches!(**item, ChatItem::AgentHandoff(_)) {
                        self.contexts.entry(agent.clone()).or_default().push(ChatItem::clone(item));
                    }
                    self.history.push(ChatItem::clone(item));
                }
            }
            Record::AgentEntered { item } => {
                if let ChatItem::AgentHandoff(entered) = &**item {
                    self.contexts.entry(entered.new_agent.clone()).or_default();
                    self.agent = Some(entered.new_agent.clone());
                }
                self.history.push(ChatItem::clone(item));
            }
            Record::PairMoved { from, to, update_id } => {
                let moved: Vec<ChatItem> = self
                    .contexts
                    .get(from)
                    .into_iter()
                    .flatten()
                    .filter(|item| call_id(item) == Some(update_id))
                    .cloned()
                    .collect();
                self.contexts.entry(to.clone()).or_default().extend(moved);
            }
            Record::CallStarted { call, cancellable } => {
                let (call, cancellable) = (call.clone(), *cancellable);
                self.running.retain(|r| r.call.call_id != call.call_id);
                self.running.push(CallInDoubt { call, cancellable, started: true });
            }
            Record::CallWaiting { call_id } => self.set_started(call_id, false),
            Record::ResultRemembered { key, output, reply_required, message, until_unix_ms } => {
                let result = RememberedResult {
                    output: output.clone(),
                    reply_required: *reply_required,
                    message: message.clone(),
                    until_unix_ms: *until_unix_ms,
                };
                self.remembered.insert(key.clone(), result);
            }
            Record::CallLetThrough { call_id } => self.set_started(call_id, true),
            Record::CallEnded { call_id } => self.running.retain(|r| r.call.call_id != *call_id),
            Record::ReplyAwaited { update_id } => self.unreplied.push(update_id.clone()),
            Record::RepliesTaken { update_ids } => {
                self.unreplied.retain(|u| !update_ids.contains(u));
            }
            Record::CloseBegan { reason } => {
                self.closed.get_or_insert_with(|| reason.clone());
            }
            Record::CommandTaken { id } => self.commands.push(id.clone()),
            // A call that runs again stays in doubt until it ends: a crash before its run
            // starts finds it again (docs/durability.md#on-interrupted).
            Record::Resumed { in_doubt } => {
                let failed =
                    |id: &str| in_doubt.iter().any(|d| d.call_id == id && d.outcome == "failed");
                self.running.retain(|r| !failed(&r.call.call_id));
            }
        }
    }
}

fn call_id(item: &ChatItem) -> Option<&String> {
    match item {
        ChatItem::FunctionCall(c) => Some(&c.call_id),
        ChatItem::FunctionCallOutput(o) => Some(&o.call_id),
        _ => None,
    }
}
