//! Shared by the provider tests: recorded wire streams (`tests/it/wire/<provider>/*.sse`), a
//! session on a provider pointed at a local replay server, and checkers of each provider's
//! rules for a request body, written from the providers' API references (docs/providers.md),
//! independently of the mappings they check.

#![allow(dead_code)]

pub(crate) mod cases;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use colloquy::events::{ErrorSource, EventStream};
use colloquy::llm::http::HttpOptions;
use colloquy::llm::{Llm, LlmErrorKind};
use colloquy::prelude::*;
use colloquy_replay::{Received, ReplayServer, Reply};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// The key the tests send; it must never show in an event or error.
pub(crate) const KEY: &str = "sk-test-4f9a2c-do-not-print";

/// Short timeouts and backoffs: these tests run on the real clock.
pub(crate) fn options() -> HttpOptions {
    HttpOptions {
        connect_timeout: Duration::from_secs(2),
        first_token_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(5),
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_secs(1),
    }
}

/// Bounds a test on the real clock: a hang fails it instead of stalling the suite.
pub(crate) async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(20), test).await.expect("the test took over 20 s");
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct City {
    /// The city.
    pub city: String,
}

/// `get_weather(city)`: "sunny in CITY".
pub(crate) fn weather() -> FunctionTool {
    FunctionTool::new("get_weather", "Current weather.", |_ctx: RunContext, a: City| async move {
        Ok::<_, ToolError>(format!("sunny in {}", a.city))
    })
}

/// `book_flight(city)`: posts an update, works 100 ms, answers "Booked FL-1".
pub(crate) fn book_flight() -> FunctionTool {
    FunctionTool::new("book_flight", "Book.", |ctx: RunContext, a: City| async move {
        ctx.update(format!("Looking up flights to {}", a.city)).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, ToolError>("Booked FL-1")
    })
}

/// What a provider's tests share: where its requests go and what its rules are.
pub(crate) struct Provider {
    /// The recordings' folder under tests/wire.
    pub name: &'static str,
    /// The path every request goes to.
    pub path: &'static str,
    /// What the provider's base URL adds to the server's address (`/v1` for OpenAI).
    pub base_path: &'static str,
    /// The rule checker.
    pub check: fn(&Value) -> Result<(), String>,
    /// The model for this base URL (`http://127.0.0.1:PORT` and `base_path`), sending [`KEY`].
    pub llm: fn(String, HttpOptions) -> Arc<dyn Llm>,
    /// The bodies of a 400 saying a request is over the model's context, as the servers
    /// speaking this API send them.
    pub overflows: &'static [&'static str],
}

/// A session on a provider whose server replays recordings.
pub(crate) struct Chat {
    pub server: ReplayServer,
    pub session: SessionHandle,
    pub events: EventStream,
    pub provider: &'static Provider,
}

impl Chat {
    /// Starts the server with `replies`, then a session on the provider's model for it.
    pub(crate) async fn start(
        provider: &'static Provider,
        agent: Agent,
        replies: Vec<Reply>,
        options: HttpOptions,
    ) -> Chat {
        Chat::start_at(provider, agent, replies, options, std::string::ToString::to_string).await
    }

    /// [`Chat::start`] with the base URL the model is given made from the server's own
    /// (`http://127.0.0.1:PORT` and the provider's base path) by `base`.
    pub(crate) async fn start_at(
        provider: &'static Provider,
        agent: Agent,
        replies: Vec<Reply>,
        options: HttpOptions,
        base: impl FnOnce(&str) -> String,
    ) -> Chat {
        let server = ReplayServer::start(replies).await.expect("the replay server starts");
        let url = base(&format!("{}{}", server.base_url(), provider.base_path));
        let mut builder = Session::builder().llm((provider.llm)(url, options));
        let events = builder.subscribe();
        let session = builder.start(agent).await.expect("the session starts");
        Chat { server, session, events, provider }
    }

    /// One user turn, waited for until the session is idle; the events it caused.
    pub(crate) async fn turn(&mut self, text: &str) -> Vec<EventKind> {
        self.session.user_turn(text).await.unwrap();
        self.session.wait_for_idle().await.unwrap();
        let mut events = Vec::new();
        while let Some(event) = self.events.try_recv() {
            events.push(event.kind);
        }
        events
    }

    /// Every request sent so far, each checked against the provider's rules.
    pub(crate) fn requests(&self) -> Vec<Received> {
        let received = self.server.received();
        for (i, r) in received.iter().enumerate() {
            assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", self.provider.path));
            if let Err(e) = (self.provider.check)(&r.body) {
                panic!("request {i} breaks the API's rules: {e}\n{:#}", r.body);
            }
        }
        received
    }

    /// The assistant messages of the history: text and whether it was cut.
    pub(crate) async fn assistant_messages(&self) -> Vec<(String, bool)> {
        let history = self.session.history().await.unwrap();
        history
            .iter()
            .filter_map(|i| i.as_message().filter(|m| m.role == Role::Assistant))
            .map(|m| (m.text.clone(), m.interrupted))
            .collect()
    }

    /// A recorded stream of this provider.
    pub(crate) fn recorded(&self, name: &str) -> Reply {
        Reply::sse(&recording(self.provider.name, name))
    }
}

/// Log lines written on this thread while it lives (a `#[tokio::test]` runs every task on
/// its own thread, the transport's included).
pub(crate) struct Logs {
    buffer: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Logs {
    /// Captures everything from `trace` up.
    pub(crate) fn capture() -> Logs {
        let buffer = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&writer)))
            .finish();
        Logs { buffer, _guard: tracing::subscriber::set_default(subscriber) }
    }

    /// What was written so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self.buffer.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

struct LogWriter(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The LLM error events among `events`: kind and message.
pub(crate) fn errors(events: &[EventKind]) -> Vec<(Option<LlmErrorKind>, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Error { source: ErrorSource::Llm, message, llm_error } => {
                Some((*llm_error, message.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The call ids of the `tool_call_started` events.
pub(crate) fn started(events: &[EventKind]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::ToolCallStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect()
}

/// A recorded stream.
pub(crate) fn recording(provider: &str, name: &str) -> String {
    let path = format!("{}/tests/it/wire/{provider}/{name}.sse", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// OpenAI Chat Completions: roles known; every assistant `tool_calls` entry answered by the
/// `tool` messages right after it (all of them, in any order, nothing else in between);
/// every `tool` message answers such an entry; call ids unique and at most 40 characters;
/// an assistant message has content or tool calls; `tool_choice` names a sent tool.
pub(crate) fn check_openai(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("messages is not an array")?;
    let mut seen_ids = HashSet::new();
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        let role = m["role"].as_str().ok_or(format!("messages[{i}] has no role"))?;
        match role {
            "system" | "developer" | "user" => {
                m["content"].as_str().ok_or(format!("messages[{i}] ({role}) has no text"))?;
            }
            "tool" => return Err(format!("messages[{i}]: a tool message answers no tool call")),
            "assistant" => {
                let calls = m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
                if m["content"].as_str().is_none_or(str::is_empty) && calls.is_empty() {
                    return Err(format!("messages[{i}]: an empty assistant message"));
                }
                let mut open: HashSet<&str> = HashSet::new();
                for call in calls {
                    let id =
                        call["id"].as_str().ok_or(format!("messages[{i}]: call without id"))?;
                    if id.is_empty() || id.len() > 40 {
                        return Err(format!("messages[{i}]: call id `{id}` is empty or over 40"));
                    }
                    if !seen_ids.insert(id.to_string()) || !open.insert(id) {
                        return Err(format!("messages[{i}]: call id `{id}` used twice"));
                    }
                    if call["type"] != "function" || call["function"]["name"].as_str().is_none() {
                        return Err(format!("messages[{i}]: call `{id}` is not a function call"));
                    }
                    let arguments = call["function"]["arguments"]
                        .as_str()
                        .ok_or(format!("messages[{i}]: call `{id}` has no argument text"))?;
                    // llama.cpp's server refuses the whole request otherwise.
                    if !serde_json::from_str::<Value>(arguments).is_ok_and(|a| a.is_object()) {
                        return Err(format!("messages[{i}]: call `{id}` arguments not an object"));
                    }
                }
                while !open.is_empty() {
                    i += 1;
                    let answer = messages.get(i).ok_or("a tool call is never answered")?;
                    if answer["role"] != "tool" {
                        return Err(format!("messages[{i}]: calls {open:?} are not answered"));
                    }
                    let id = answer["tool_call_id"].as_str().unwrap_or_default();
                    if !open.remove(id) {
                        return Err(format!("messages[{i}]: tool message for unknown `{id}`"));
                    }
                    answer["content"].as_str().ok_or(format!("messages[{i}]: no content"))?;
                }
            }
            other => return Err(format!("messages[{i}]: unknown role `{other}`")),
        }
        i += 1;
    }
    let names: Vec<&str> = body["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["function"]["name"].as_str()).collect())
        .unwrap_or_default();
    if let Some(name) = body["tool_choice"]["function"]["name"].as_str()
        && !names.contains(&name)
    {
        return Err(format!("tool_choice names `{name}`, which is not sent"));
    }
    Ok(())
}

/// Anthropic Messages: roles alternate starting with `user`; no empty text block; every
/// `tool_use` block of an assistant turn answered by a `tool_result` block in the user turn
/// right after it, those results first in that turn; ids unique and `[A-Za-z0-9_-]+`; the
/// last turn is the user's; `tool_choice` names a sent tool.
pub(crate) fn check_anthropic(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("messages is not an array")?;
    if messages.is_empty() {
        return Err("no messages".into());
    }
    let mut seen = HashSet::new();
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            return Err(format!("messages[{i}] is `{role}`, expected `{expected}`"));
        }
        let blocks = m["content"].as_array().ok_or(format!("messages[{i}]: content blocks"))?;
        if blocks.is_empty() {
            return Err(format!("messages[{i}]: no content"));
        }
        let mut results_done = false;
        let mut answered = Vec::new();
        for block in blocks {
            match block["type"].as_str().unwrap_or_default() {
                "text" => {
                    if block["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                        return Err(format!("messages[{i}]: an empty text block"));
                    }
                    results_done = true;
                }
                "tool_use" if role == "assistant" => {
                    let id = block["id"].as_str().unwrap_or_default();
                    let valid = !id.is_empty()
                        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !valid || !seen.insert(id.to_string()) {
                        return Err(format!("messages[{i}]: bad or reused tool_use id `{id}`"));
                    }
                    if !block["input"].is_object() {
                        return Err(format!("messages[{i}]: tool_use `{id}` input not an object"));
                    }
                    open.push(id.to_string());
                }
                "tool_result" if role == "user" => {
                    if results_done {
                        return Err(format!("messages[{i}]: a tool_result after other content"));
                    }
                    answered.push(block["tool_use_id"].as_str().unwrap_or_default().to_string());
                }
                other => return Err(format!("messages[{i}]: `{other}` block in a {role} turn")),
            }
        }
        if role == "user" {
            let mut expected = std::mem::take(&mut open);
            expected.sort();
            answered.sort();
            if expected != answered {
                return Err(format!(
                    "messages[{i}]: answers {answered:?}, calls were {expected:?}"
                ));
            }
        }
    }
    if !open.is_empty() || messages.len() % 2 == 0 {
        return Err("the conversation does not end on a user turn".into());
    }
    let names: Vec<&str> = body["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    if let Some(name) = body["tool_choice"]["name"].as_str()
        && !names.contains(&name)
    {
        return Err(format!("tool_choice names `{name}`, which is not sent"));
    }
    Ok(())
}
