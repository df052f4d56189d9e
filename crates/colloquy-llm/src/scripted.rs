//! The scripted LLM: answers requests in order from a script, optionally recording them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy_model::ChatItem;
use futures_util::{StreamExt, stream};

use crate::{
    Llm, LlmChunk, LlmError, LlmRequest, LlmStream, RequestKind, ToolCallDelta, ToolChoice,
};

/// Latency of a scripted response unless it says otherwise (docs/scenario-format.md's default).
pub(crate) const DEFAULT_LATENCY: Duration = Duration::from_millis(10);

/// One tool call in a scripted response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedCall {
    /// The call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// The raw argument text the model sends (may be invalid JSON on purpose).
    pub arguments: String,
}

impl ScriptedCall {
    /// A call with raw argument text.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self { id: id.into(), name: name.into(), arguments: arguments.into() }
    }
}

/// One scripted answer: text and/or tool calls after a latency, or an error.
///
/// ```
/// use colloquy_llm::{ScriptedCall, ScriptedResponse};
/// use std::time::Duration;
/// let r = ScriptedResponse::text("Let me check.")
///     .with_call(ScriptedCall::new("c1", "lookup", "{}"))
///     .with_latency(Duration::from_millis(50));
/// assert_eq!(r.calls.len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedResponse {
    /// Reply text (may be empty).
    pub text: String,
    /// Tool calls, in order.
    pub calls: Vec<ScriptedCall>,
    /// Time until the whole response arrives.
    pub latency: Duration,
    /// When set, the stream fails with this message after the latency, once the response's
    /// text has streamed (a stream cut off mid-reply when there is text).
    pub error: Option<String>,
}

impl ScriptedResponse {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), calls: Vec::new(), latency: DEFAULT_LATENCY, error: None }
    }

    /// An answer made of tool calls only.
    pub fn calls(calls: impl IntoIterator<Item = ScriptedCall>) -> Self {
        Self { calls: calls.into_iter().collect(), ..Self::text("") }
    }

    /// A failing request.
    pub fn error(message: impl Into<String>) -> Self {
        Self { error: Some(message.into()), ..Self::text("") }
    }

    /// A stream cut off: `text` arrives, then the stream fails with `message` (a connection
    /// lost mid-reply).
    pub fn cut(text: impl Into<String>, message: impl Into<String>) -> Self {
        Self { error: Some(message.into()), ..Self::text(text) }
    }

    /// Adds a tool call.
    pub fn with_call(mut self, call: ScriptedCall) -> Self {
        self.calls.push(call);
        self
    }

    /// Sets the latency.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    fn into_chunks(self) -> Vec<LlmChunk> {
        // Text arrives in small pieces (8 characters), as a real stream would deliver it; each
        // call's arguments in two halves.
        let pieces = self.text.chars().count().div_ceil(8);
        let mut chunks = Vec::with_capacity(pieces + 2 * self.calls.len() + 1);
        let mut rest = self.text.as_str();
        while !rest.is_empty() {
            let at = rest.char_indices().nth(8).map_or(rest.len(), |(at, _)| at);
            let (piece, tail) = rest.split_at(at);
            chunks.push(LlmChunk::Text(piece.to_string()));
            rest = tail;
        }
        if let Some(message) = self.error {
            chunks.push(LlmChunk::Error(LlmError::Provider { message }));
            return chunks;
        }
        for (index, call) in self.calls.into_iter().enumerate() {
            let ScriptedCall { id, name, mut arguments } = call;
            let half = arguments.chars().count() / 2;
            let at = arguments.char_indices().nth(half).map_or(arguments.len(), |(at, _)| at);
            let tail = arguments.split_off(at);
            chunks.push(LlmChunk::ToolCall(ToolCallDelta {
                index,
                id: Some(id),
                name: Some(name),
                arguments,
            }));
            if !tail.is_empty() {
                let delta = ToolCallDelta { index, id: None, name: None, arguments: tail };
                chunks.push(LlmChunk::ToolCall(delta));
            }
        }
        chunks.push(LlmChunk::End);
        chunks
    }
}

/// A request as the scripted LLM recorded it; with other items (`I`), the same request in
/// another form (a scenario trace's, which serializes it without its index).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RecordedRequest<I = ChatItem> {
    /// Index of the request (0-based).
    #[serde(skip)]
    pub index: usize,
    /// Why it was made.
    pub kind: RequestKind,
    /// The agent.
    pub agent: String,
    /// The speech.
    pub speech_id: String,
    /// Visible tool names, in order.
    pub tools: Vec<String>,
    /// `None` = unset.
    pub tool_choice: Option<ToolChoice>,
    /// Extra instructions of this reply.
    pub instructions: Option<String>,
    /// The context items sent.
    pub items: Vec<I>,
}

impl<I> RecordedRequest<I> {
    /// The same request with its items as `items` makes them.
    pub fn map_items<J>(&self, items: impl FnOnce(&[I]) -> Vec<J>) -> RecordedRequest<J> {
        RecordedRequest {
            index: self.index,
            kind: self.kind,
            agent: self.agent.clone(),
            speech_id: self.speech_id.clone(),
            tools: self.tools.clone(),
            tool_choice: self.tool_choice.clone(),
            instructions: self.instructions.clone(),
            items: items(&self.items),
        }
    }
}

type Responder = dyn Fn(usize, &LlmRequest) -> ScriptedResponse + Send + Sync;

struct Inner {
    script: Vec<ScriptedResponse>,
    next: AtomicUsize,
    record: bool,
    requests: Mutex<Vec<RecordedRequest>>,
    fallback: Option<Arc<Responder>>,
}

/// An LLM that answers from a script, in request order. A request past the end of the script
/// answers `reply N` (N = the request's index), or asks the fallback responder if one is set.
/// Cloning shares the script and the records.
///
/// ```
/// use colloquy_llm::{ScriptedLlm, ScriptedResponse};
/// let llm = ScriptedLlm::new([ScriptedResponse::text("Hello!")]).recording();
/// assert_eq!(llm.requests().len(), 0);
/// ```
#[derive(Clone)]
pub struct ScriptedLlm {
    inner: Arc<Inner>,
}

impl ScriptedLlm {
    /// A scripted LLM that does not record requests.
    pub fn new(script: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        Self {
            inner: Arc::new(Inner {
                script: script.into_iter().collect(),
                next: AtomicUsize::new(0),
                record: false,
                requests: Mutex::new(Vec::new()),
                fallback: None,
            }),
        }
    }

    /// Builder methods take the script out of a shared handle by copying it, so a clone made
    /// earlier keeps its own counters.
    fn rebuild(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            script: shared.script.clone(),
            next: AtomicUsize::new(shared.next.load(Ordering::SeqCst)),
            record: shared.record,
            requests: Mutex::new(shared.requests.lock().map(|r| r.clone()).unwrap_or_default()),
            fallback: shared.fallback.clone(),
        });
        f(&mut inner);
        Self { inner: Arc::new(inner) }
    }

    /// Records every request (see [`ScriptedLlm::requests`]).
    pub fn recording(self) -> Self {
        self.rebuild(|inner| inner.record = true)
    }

    /// Answers requests past the end of the script with `f(index, request)`.
    pub fn with_fallback(
        self,
        f: impl Fn(usize, &LlmRequest) -> ScriptedResponse + Send + Sync + 'static,
    ) -> Self {
        self.rebuild(|inner| inner.fallback = Some(Arc::new(f)))
    }

    /// The recorded requests, in order (empty unless [`ScriptedLlm::recording`]).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many requests were made.
    pub fn request_count(&self) -> usize {
        self.inner.next.load(Ordering::SeqCst)
    }
}

impl Llm for ScriptedLlm {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let index = self.inner.next.fetch_add(1, Ordering::SeqCst);
        let response = match (self.inner.script.get(index), &self.inner.fallback) {
            (Some(r), _) => r.clone(),
            (None, Some(f)) => f(index, &request),
            (None, None) => ScriptedResponse::text(format!("reply {index}")),
        };
        if self.inner.record {
            let record = RecordedRequest {
                index,
                kind: request.kind,
                agent: request.agent.to_string(),
                speech_id: request.speech_id.to_string(),
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                tool_choice: request.tool_choice.clone(),
                instructions: request.extra_instructions.clone(),
                items: request.items.to_items(),
            };
            if let Ok(mut requests) = self.inner.requests.lock() {
                requests.push(record);
            }
        }
        let latency = response.latency;
        let chunks = response.into_chunks();
        if latency.is_zero() {
            return Box::pin(stream::iter(chunks));
        }
        // The sleep lives inside the stream: dropping the stream cancels the request.
        Box::pin(
            stream::once(async move {
                tokio::time::sleep(latency).await;
                stream::iter(chunks)
            })
            .flatten(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> LlmRequest {
        LlmRequest {
            kind: RequestKind::UserTurn,
            agent: "a".into(),
            speech_id: "s1".into(),
            instructions: Arc::from("inst"),
            extra_instructions: None,
            items: Arc::default(),
            tools: Arc::from(Vec::new()),
            tool_choice: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_stream_sends_its_text_then_fails() {
        let llm = ScriptedLlm::new([ScriptedResponse::cut("Let me che", "connection reset")]);
        let chunks: Vec<_> = llm.chat(request()).collect().await;
        let error = LlmChunk::Error(LlmError::Provider { message: "connection reset".into() });
        assert_eq!(chunks.last(), Some(&error));
        assert_eq!(chunks[0], LlmChunk::Text("Let me c".into()));
        assert!(!chunks.contains(&LlmChunk::End));
    }

    #[tokio::test(start_paused = true)]
    async fn answers_in_order_then_reply_n() {
        let llm = ScriptedLlm::new([ScriptedResponse::text("hello there, traveller")
            .with_call(ScriptedCall::new("c1", "lookup", r#"{"city":"Paris"}"#))])
        .recording();
        let start = tokio::time::Instant::now();
        let chunks: Vec<_> = llm.chat(request()).collect().await;
        assert_eq!(start.elapsed(), DEFAULT_LATENCY);
        let text: String = chunks
            .iter()
            .filter_map(|c| if let LlmChunk::Text(t) = c { Some(t.as_str()) } else { None })
            .collect();
        assert_eq!(text, "hello there, traveller");
        let args: String = chunks
            .iter()
            .filter_map(|c| {
                if let LlmChunk::ToolCall(d) = c { Some(d.arguments.as_str()) } else { None }
            })
            .collect();
        assert_eq!(args, r#"{"city":"Paris"}"#);
        assert_eq!(chunks.last(), Some(&LlmChunk::End));
        let second: Vec<_> = llm.chat(request()).collect().await;
        assert_eq!(second[0], LlmChunk::Text("reply 1".into()));
        assert_eq!(llm.requests().len(), 2);
        assert_eq!(llm.requests()[1].index, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_end_the_stream() {
        let llm = ScriptedLlm::new([ScriptedResponse::error("rate limited")]);
        let chunks: Vec<_> = llm.chat(request()).collect().await;
        let error = LlmError::Provider { message: "rate limited".into() };
        assert_eq!(chunks, [LlmChunk::Error(error)]);
    }
}
