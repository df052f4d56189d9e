//! The workload of docs/benchmarks.md, as both the in-process harness (`colloquy-bench`) and
//! the cluster bench (`cluster-bench`) run it: the agent with its background tool, the scripted
//! model, and what every session must show once its turns are done.

use std::collections::BTreeSet;
use std::time::Duration;

use colloquy::chat::ChatItem;
use colloquy::events::{EventFilter, EventType, ReplyStatus};
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The agent's name (a node registers it under this name).
pub const AGENT: &str = "bench";

#[derive(Deserialize, JsonSchema)]
struct Task {
    turn: u32,
}

/// The agent: one background tool, `progress_task`, which updates, sleeps `tool_ms`, updates
/// again and returns a small JSON object.
pub fn agent(tool_ms: u64) -> Agent {
    Agent::new(AGENT, "Run tasks.").tool(progress_task(tool_ms))
}

fn progress_task(tool_ms: u64) -> FunctionTool {
    FunctionTool::new(
        "progress_task",
        "Works in two steps.",
        move |ctx: RunContext, t: Task| async move {
            ctx.update("step 1 of 2").await?;
            if tool_ms > 0 {
                tokio::time::sleep(Duration::from_millis(tool_ms)).await;
            }
            ctx.update("step 2 of 2").await?;
            Ok::<_, ToolError>(Json(json!({"turn": t.turn, "ok": true})))
        },
    )
}

/// The scripted model: for the user's message `turn N`, a call `tN` of `progress_task`; a
/// short text for anything else, all at zero latency.
pub fn llm() -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(|_, request| {
        let user = request
            .items
            .items()
            .last()
            .and_then(|i| i.as_message())
            .filter(|m| m.role == Role::User);
        match (request.kind, user) {
            (RequestKind::UserTurn, Some(message)) => {
                let turn = message.text.trim_start_matches("turn ").to_string();
                let call = ScriptedCall::new(
                    format!("t{turn}"),
                    "progress_task",
                    format!(r#"{{"turn":{turn}}}"#),
                );
                ScriptedResponse::calls([call]).with_latency(Duration::ZERO)
            }
            _ => ScriptedResponse::text("noted").with_latency(Duration::ZERO),
        }
    })
}

/// The user's message of turn `turn`, the one [`llm`] answers with call `t<turn>`.
pub fn user_text(turn: u32) -> String {
    format!("turn {turn}")
}

/// What a host of the workload listens to (the peer's `session.on("tool_execution_updated")`
/// and `on("error")`): a session sends such a subscriber nothing else.
pub fn event_filter() -> EventFilter {
    EventFilter::tool_execution().with(EventType::Error)
}

/// The id of turn `turn`'s final output, whose delivery ends the turn.
pub fn final_id(turn: u32) -> String {
    format!("t{turn}_final")
}

/// Whether `event` completes the reply that delivers the output `final_id` ([`final_id`]).
pub fn delivers(event: &SessionEvent, final_id: &str) -> bool {
    matches!(
        &event.kind,
        EventKind::ToolReplyUpdated { update_ids, status: ReplyStatus::Completed, .. }
            if update_ids.iter().any(|id| id == final_id)
    )
}

/// What one session's events showed: per turn, how often its call (`t<turn>`) started, was
/// updated and ended; how many deferred replies were scheduled and completed; any event about
/// a call the workload never makes. Counted as the events arrive, without building a key per
/// event (the bench is the host here, and its bookkeeping is part of the measured run).
#[derive(Default)]
pub struct Seen {
    calls: Vec<[u32; 3]>,
    unknown_calls: Vec<String>,
    errors: Vec<String>,
    scheduled: u32,
    completed: u32,
}

impl Seen {
    const STARTED: usize = 0;
    const UPDATED: usize = 1;
    const ENDED: usize = 2;

    /// Counts one event (events of other types are passed over).
    pub fn count(&mut self, event: &SessionEvent) {
        match &event.kind {
            EventKind::ToolCallStarted { call_id, .. } => self.call(call_id, Self::STARTED),
            EventKind::ToolCallUpdated { call_id, .. } => self.call(call_id, Self::UPDATED),
            EventKind::ToolCallEnded { call_id, .. } => self.call(call_id, Self::ENDED),
            EventKind::ToolReplyUpdated { status: ReplyStatus::Scheduled, .. } => {
                self.scheduled += 1;
            }
            EventKind::ToolReplyUpdated { status: ReplyStatus::Completed, .. } => {
                self.completed += 1;
            }
            EventKind::Error { source, message, .. } => {
                self.errors.push(format!("{source:?}: {message}"));
            }
            _ => {}
        }
    }

    /// Deferred replies completed.
    pub fn completed_replies(&self) -> u32 {
        self.completed
    }

    fn call(&mut self, call_id: &str, what: usize) {
        match call_id.strip_prefix('t').and_then(|n| n.parse::<usize>().ok()) {
            Some(turn) => {
                if self.calls.len() <= turn {
                    self.calls.resize(turn + 1, [0; 3]);
                }
                self.calls[turn][what] += 1;
            }
            None => self.unknown_calls.push(call_id.to_string()),
        }
    }

    /// The checks of a closed session after `turns` turns, given every event it sent and its
    /// final `history`: every call started, updated twice and ended; every reply completed;
    /// each call's three outputs in history. One line per problem; none when it passed.
    pub fn problems<'a>(
        &self,
        history: impl IntoIterator<Item = &'a ChatItem>,
        turns: u32,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for id in &self.unknown_calls {
            problems.push(format!("{id}: events of a call the workload never made"));
        }
        for error in &self.errors {
            problems.push(format!("session error event: {error}"));
        }
        if self.calls.len() > turns as usize {
            problems.push(format!("calls of {} turns, expected {turns}", self.calls.len()));
        }
        // Every output's call id, once (the history is checked in one pass, not once per item).
        let outputs: BTreeSet<&str> = history
            .into_iter()
            .filter_map(|i| i.as_function_call_output().map(|o| o.call_id.as_str()))
            .collect();
        for turn in 0..turns {
            let id = format!("t{turn}");
            let counts = self.calls.get(turn as usize).copied().unwrap_or_default();
            for (what, index, want) in [
                ("started", Self::STARTED, 1),
                ("updated", Self::UPDATED, 2),
                ("ended", Self::ENDED, 1),
            ] {
                let got = counts[index];
                if got != want {
                    problems.push(format!("{id}: {what} {got} times, expected {want}"));
                }
            }
            for item in [id.clone(), format!("{id}_update_1"), format!("{id}_final")] {
                if !outputs.contains(item.as_str()) {
                    problems.push(format!("{item}: missing from history"));
                }
            }
        }
        let (scheduled, completed) = (self.scheduled, self.completed);
        if scheduled != completed {
            problems.push(format!("{scheduled} replies scheduled, {completed} completed"));
        }
        problems
    }
}
