//! The timeline's model: what the page draws, gathered from the session's events in one pass
//! (calls with their updates and ends, speeches, the user's messages and speaking spells, the
//! replies that carried updates, handoffs, errors). The drawing is `mod.rs`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::chat::{ChatItem, Role};
use crate::event::{EventKind, ReplyStatus, SessionEvent, ToolCallStatus, UserState};

/// One tool call's lane.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) call_id: String,
    pub(super) name: String,
    pub(super) start: u64,
    pub(super) end: Option<(u64, ToolCallStatus, Option<String>)>,
    /// (update id, at, message)
    pub(super) updates: Vec<(String, u64, String)>,
}

#[derive(Debug)]
pub(super) struct Speech {
    pub(super) speech_id: String,
    pub(super) source: String,
    pub(super) start: u64,
    pub(super) end: Option<(u64, bool)>,
}

/// What the page draws, gathered from the events.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) end_ms: u64,
    pub(super) user_messages: Vec<(u64, String)>,
    /// Spells of user speech (start, end).
    pub(super) user_speaking: Vec<(u64, Option<u64>)>,
    pub(super) speeches: Vec<Speech>,
    pub(super) calls: Vec<Call>,
    /// (update id, speech id) for each pair a scheduled deferred reply carries.
    pub(super) replies: Vec<(String, String)>,
    /// (at, old agent, new agent) for handoffs after the first agent.
    pub(super) handoffs: Vec<(u64, String, String)>,
    pub(super) errors: Vec<(u64, String, String)>,
    pub(super) first_agent: Option<String>,
}

pub(super) fn name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Model {
    pub(super) fn build(events: &[SessionEvent]) -> Self {
        let mut m = Model::default();
        let mut calls: BTreeMap<String, usize> = BTreeMap::new();
        let mut speeches: BTreeMap<String, usize> = BTreeMap::new();
        for event in events {
            let at = event.at_ms;
            m.end_ms = m.end_ms.max(at);
            match &event.kind {
                EventKind::ConversationItemAdded { item } => {
                    if let ChatItem::Message(msg) = &**item
                        && msg.role == Role::User
                    {
                        m.user_messages.push((at, msg.text.clone()));
                    }
                }
                EventKind::UserState { state } => match state {
                    UserState::Speaking => m.user_speaking.push((at, None)),
                    _ => {
                        if let Some(last) = m.user_speaking.last_mut()
                            && last.1.is_none()
                        {
                            last.1 = Some(at);
                        }
                    }
                },
                EventKind::SpeechCreated { speech_id, source } => {
                    speeches.insert(speech_id.clone(), m.speeches.len());
                    m.speeches.push(Speech {
                        speech_id: speech_id.clone(),
                        source: name(source),
                        start: at,
                        end: None,
                    });
                }
                EventKind::SpeechDone { speech_id, interrupted } => {
                    if let Some(&i) = speeches.get(speech_id) {
                        m.speeches[i].end = Some((at, *interrupted));
                    }
                }
                EventKind::ToolCallStarted { call_id, name } => {
                    calls.insert(call_id.clone(), m.calls.len());
                    m.calls.push(Call {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        start: at,
                        end: None,
                        updates: Vec::new(),
                    });
                }
                EventKind::ToolCallUpdated { id, call_id, message, .. } => {
                    if let Some(&i) = calls.get(call_id) {
                        m.calls[i].updates.push((id.clone(), at, message.clone()));
                    }
                }
                EventKind::ToolCallEnded { call_id, status, message, .. } => {
                    if let Some(&i) = calls.get(call_id) {
                        m.calls[i].end = Some((at, *status, message.clone()));
                    }
                }
                EventKind::ToolReplyUpdated { update_ids, status, speech_id, .. }
                    if *status == ReplyStatus::Scheduled =>
                {
                    for id in update_ids {
                        m.replies.push((id.clone(), speech_id.clone()));
                    }
                }
                EventKind::AgentHandoff { old_agent, new_agent } => match old_agent {
                    Some(old) => m.handoffs.push((at, old.clone(), new_agent.clone())),
                    None => m.first_agent = Some(new_agent.clone()),
                },
                EventKind::Error { source, message, .. } => {
                    m.errors.push((at, name(source), message.clone()));
                }
                _ => {}
            }
        }
        m.end_ms = m.end_ms.max(1);
        m
    }
}
