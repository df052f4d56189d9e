//! Test harness: a session on the scripted LLM, with every event recorded, and the compact
//! notation of docs/scenarios.md (`user(x)`, `call(name#id args)`, `out(#id,"text",ok,rr=T)`,
//! `S(id)`, `E(id,status,msg)`, …) so assertions read like the scenarios.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::time::Duration;

use colloquy::events::EventStream;
use colloquy::llm::{RecordedRequest, ToolChoice};
use colloquy::prelude::*;
use colloquy::session::SessionBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

/// Every lifecycle record received so far.
pub(crate) fn drain_lifecycle(
    rx: &mut tokio::sync::mpsc::Receiver<colloquy::session::LifecycleEvent>,
) -> Vec<colloquy::session::LifecycleEvent> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// A speech sink that takes every playout and never reports anything (watchdog tests).
#[derive(Default)]
pub(crate) struct SilentSink(std::sync::Mutex<Vec<colloquy::speech::Playout>>);

impl colloquy::speech::SpeechSink for SilentSink {
    fn play(&self, playout: colloquy::speech::Playout) {
        self.0.lock().unwrap().push(playout);
    }
}

/// Arguments of tools that take none.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

/// The messages of the `error` events among `events`, in order.
pub(crate) fn error_messages(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Error { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// `n` milliseconds.
pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The plain agent most tests start from: `A`, with instructions `inst` and no tools.
pub(crate) fn agent() -> Agent {
    Agent::new("A", "inst")
}

/// A tool that sleeps `ms` of virtual time, then returns `output`.
pub(crate) fn sleeper(name: &'static str, ms: u64, output: &'static str) -> FunctionTool {
    FunctionTool::new(name, "Takes a while.", move |_ctx: RunContext, _a: NoArgs| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, ToolError>(output)
    })
}

/// A started session plus what it needs for assertions.
pub(crate) struct Harness {
    pub session: SessionHandle,
    pub llm: ScriptedLlm,
    events: EventStream,
    seen: Vec<SessionEvent>,
}

impl Harness {
    /// Starts `agent` on a recording scripted LLM answering `script`.
    pub(crate) async fn start(agent: Agent, script: Vec<ScriptedResponse>) -> Self {
        Self::start_with(Session::builder(), agent, script).await
    }

    /// As [`Harness::start`], with a configured builder.
    pub(crate) async fn start_with(
        builder: SessionBuilder,
        agent: Agent,
        script: Vec<ScriptedResponse>,
    ) -> Self {
        let llm = ScriptedLlm::new(script).recording();
        let mut builder = builder.llm(llm.clone());
        let events = builder.subscribe();
        let session = builder.start(agent).await.expect("session starts");
        Self { session, llm, events, seen: Vec::new() }
    }

    /// Runs a user turn and waits until the session is idle.
    pub(crate) async fn turn(&self, text: &str) {
        self.session.user_turn(text).await.expect("turn accepted");
        self.session.wait_for_idle().await.expect("session goes idle");
    }

    /// Every event received so far.
    pub(crate) fn events(&mut self) -> &[SessionEvent] {
        while let Some(e) = self.events.try_recv() {
            self.seen.push(e);
        }
        &self.seen
    }

    /// Closes the session and returns every event, `session_closed` last.
    pub(crate) async fn close(mut self) -> Vec<SessionEvent> {
        self.session.close().await.expect("close");
        while let Some(e) = self.events.recv().await {
            self.seen.push(e);
        }
        self.seen
    }

    /// The tool lifecycle events so far, in the notation of the scenarios.
    pub(crate) fn tool_events(&mut self) -> Vec<String> {
        tool_events(self.events())
    }

    /// The agent states so far (including the initial listening).
    pub(crate) fn agent_states(&mut self) -> Vec<String> {
        self.events()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::AgentState { state } => Some(format!("{state:?}").to_lowercase()),
                _ => None,
            })
            .collect()
    }

    /// The agent's chat context, in notation.
    pub(crate) async fn ctx(&self, agent: &str) -> Vec<String> {
        let items = self.session.chat_context(agent).await.unwrap().expect("agent has a context");
        show(&items)
    }

    /// The session history without its leading handoff, in notation.
    pub(crate) async fn hist(&self) -> Vec<String> {
        let items = self.session.history().await.unwrap();
        assert!(
            matches!(items.first(), Some(ChatItem::AgentHandoff(_))),
            "history starts with a handoff"
        );
        show(&items[1..])
    }

    /// Recorded LLM requests.
    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.llm.requests()
    }
}

/// Items in the notation of docs/scenarios.md H4.
pub(crate) fn show(items: &[ChatItem]) -> Vec<String> {
    items
        .iter()
        .map(|item| match item {
            ChatItem::Message(m) => {
                let role = format!("{:?}", m.role).to_lowercase();
                let role = if role == "assistant" { "asst".to_string() } else { role };
                let cut = if m.interrupted { ",interrupted" } else { "" };
                format!("{role}({}{cut})", m.text)
            }
            ChatItem::FunctionCall(c) => format!("call({}#{} {})", c.name, c.call_id, c.arguments),
            ChatItem::FunctionCallOutput(o) => format!(
                "out(#{},{:?},{},rr={})",
                o.call_id,
                o.output,
                if o.is_error { "ERR" } else { "ok" },
                if o.reply_required { "T" } else { "F" }
            ),
            ChatItem::AgentHandoff(h) => format!("handoff({:?}->{})", h.old_agent, h.new_agent),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Tool lifecycle events in notation: `S(id)`, `E(id,status,msg)`, `FTE[ids]`, `DROP(id)`.
pub(crate) fn tool_events(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStarted { call_id, .. } => Some(format!("S({call_id})")),
            EventKind::ToolCallEnded { id, status, message, .. } => {
                let status = status.as_str();
                let message = message.as_deref().map_or("null".to_string(), |m| format!("{m:?}"));
                Some(format!("E({id},{status},{message})"))
            }
            EventKind::FunctionToolsExecuted { call_ids } => Some(format!("FTE{call_ids:?}")),
            EventKind::ToolCallDropped { call_id, .. } => Some(format!("DROP({call_id})")),
            _ => None,
        })
        .collect()
}

/// The `at_ms` of the first event matching `f`.
pub(crate) fn at_ms(events: &[SessionEvent], f: impl Fn(&EventKind) -> bool) -> u64 {
    events.iter().find(|e| f(&e.kind)).map(|e| e.at_ms).expect("event present")
}

/// `tool_choice` in the notation of the scenarios.
pub(crate) fn choice(r: &RecordedRequest) -> &'static str {
    match &r.tool_choice {
        None => "unset",
        Some(ToolChoice::Auto) => "auto",
        Some(ToolChoice::None) => "none",
        Some(ToolChoice::Required) => "required",
        Some(ToolChoice::Named(_)) => "named",
    }
}

/// A scripted response made of one tool call.
pub(crate) fn call(id: &str, name: &str, args: &str) -> ScriptedResponse {
    ScriptedResponse::calls([ScriptedCall::new(id, name, args)])
}

/// A scripted text response.
pub(crate) fn text(t: &str) -> ScriptedResponse {
    ScriptedResponse::text(t)
}

/// Each `tool_call_ended` so far as `(at_ms, "ID STATUS MESSAGE")`.
pub(crate) fn ended_at(events: &[SessionEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnded { id, status, message, .. } => Some((
                e.at_ms,
                format!("{id} {} {}", status.as_str(), message.as_deref().unwrap_or("")),
            )),
            _ => None,
        })
        .collect()
}
