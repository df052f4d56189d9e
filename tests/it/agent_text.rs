//! The agent's text as events (`x_agent_text`, decision 55): off unless a subscriber asks, in
//! order, before the speech's `speech_done`, and concatenated equal to what the history keeps,
//! through the public API on the paused clock.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::common::*;
use colloquy::events::{EventFilter, EventStream, EventType};
use colloquy::llm::{FinishReason, Llm, LlmChunk, LlmRequest, LlmStream};
use colloquy::prelude::*;
use colloquy::session::SessionBuilder;
use colloquy::speech::PacedSink;

/// An LLM whose responses come piece by piece: each chunk after its pause (virtual ms).
struct Pieces(Mutex<VecDeque<Vec<(u64, LlmChunk)>>>);

impl Pieces {
    fn new(responses: impl IntoIterator<Item = Vec<(u64, LlmChunk)>>) -> Self {
        Self(Mutex::new(responses.into_iter().collect()))
    }
}

impl Llm for Pieces {
    fn chat(&self, _request: LlmRequest) -> LlmStream {
        use futures_util::StreamExt;
        let chunks = self.0.lock().unwrap().pop_front().unwrap_or_default();
        Box::pin(futures_util::stream::iter(chunks).then(|(pause, chunk)| async move {
            tokio::time::sleep(ms(pause)).await;
            chunk
        }))
    }
}

fn piece(pause: u64, text: &str) -> (u64, LlmChunk) {
    (pause, LlmChunk::Text(text.into()))
}

/// `(speech, step, delta, at_ms)` of every `x_agent_text`, in order.
fn deltas(events: &[SessionEvent]) -> Vec<(String, u32, String, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentText { speech_id, step, delta } => {
                Some((speech_id.clone(), *step, delta.clone(), e.at_ms))
            }
            _ => None,
        })
        .collect()
}

/// The position of the first event `f` matches.
fn position(events: &[SessionEvent], f: impl Fn(&EventKind) -> bool) -> usize {
    events.iter().position(|e| f(&e.kind)).expect("the event is there")
}

fn last_position(events: &[SessionEvent], f: impl Fn(&EventKind) -> bool) -> usize {
    events.iter().rposition(|e| f(&e.kind)).expect("the event is there")
}

fn is_text(kind: &EventKind) -> bool {
    matches!(kind, EventKind::AgentText { .. })
}

fn is_done(speech: &'static str) -> impl Fn(&EventKind) -> bool {
    move |kind| matches!(kind, EventKind::SpeechDone { speech_id, .. } if speech_id == speech)
}

/// The assistant messages of the history: `(text, interrupted)`.
async fn said(session: &SessionHandle) -> Vec<(String, bool)> {
    let history = session.history().await.unwrap();
    history
        .iter()
        .filter_map(|i| i.as_message().filter(|m| m.role == Role::Assistant))
        .map(|m| (m.text.clone(), m.interrupted))
        .collect()
}

/// Starts `agent` on `builder` with one subscriber that asks for every event, text included.
async fn start(mut builder: SessionBuilder, agent: Agent) -> (SessionHandle, EventStream) {
    let events = builder.subscribe_to(EventFilter::ALL);
    (builder.start(agent).await.unwrap(), events)
}

/// Closes the session and returns every event the stream got.
async fn close(session: SessionHandle, mut events: EventStream) -> Vec<SessionEvent> {
    session.close().await.unwrap();
    let mut all = Vec::new();
    while let Some(e) = events.recv().await {
        all.push(e);
    }
    all
}

#[tokio::test(start_paused = true)]
async fn a_streamed_reply_arrives_as_text_events_before_its_speech_done() {
    let llm = Pieces::new([vec![
        piece(0, "It's "),
        piece(300, "sunny "),
        piece(300, "in Paris."),
        (0, LlmChunk::Finish(FinishReason::Stop)),
        (0, LlmChunk::End),
    ]]);
    let (session, events) = start(Session::builder().llm(llm), agent()).await;
    session.user_turn("Weather?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = said(&session).await;
    let events = close(session, events).await;

    // Each piece when it arrived, not once the answer was complete.
    let text = deltas(&events);
    let s1 = |delta: &str, at| ("s1".to_string(), 1, delta.to_string(), at);
    assert_eq!(text, [s1("It's ", 0), s1("sunny ", 300), s1("in Paris.", 600)]);
    let whole: String = text.iter().map(|(_, _, delta, _)| delta.as_str()).collect();
    assert_eq!(history, [(whole, false)]);
    // The agent speaks first; the step's end and the speech's end come after the text.
    let speaking =
        position(&events, |k| matches!(k, EventKind::AgentState { state: AgentState::Speaking }));
    assert!(speaking < position(&events, is_text));
    let step_end = position(&events, |k| matches!(k, EventKind::LlmStepEnded { .. }));
    assert!(last_position(&events, is_text) < step_end);
    assert!(step_end < position(&events, is_done("s1")));
}

#[tokio::test(start_paused = true)]
async fn each_step_of_a_reply_with_tool_calls_streams_its_own_text() {
    let llm = ScriptedLlm::new([
        text("Let me check.").with_call(ScriptedCall::new("c1", "lookup", "{}")),
        text("It's sunny in Paris."),
    ]);
    let agent = Agent::new("A", "inst").tool(sleeper("lookup", 100, "sunny"));
    let (session, events) = start(Session::builder().llm(llm), agent).await;
    session.user_turn("Weather?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = said(&session).await;
    let events = close(session, events).await;

    let text = deltas(&events);
    assert_eq!(
        text,
        [
            // The scripted model answers after 10 ms; the tool takes 100.
            ("s1".to_string(), 1, "Let me check.".to_string(), 10),
            ("s1".to_string(), 2, "It's sunny in Paris.".to_string(), 120),
        ]
    );
    // One message per step: the deltas of a step, concatenated, are its message.
    let by_step: Vec<(String, bool)> =
        text.iter().map(|(_, _, delta, _)| (delta.clone(), false)).collect();
    assert_eq!(history, by_step);
    // The first step's text before its call, the second after its output, all before the end.
    let started = position(&events, |k| matches!(k, EventKind::ToolCallStarted { .. }));
    let ended = position(&events, |k| matches!(k, EventKind::ToolCallEnded { .. }));
    assert!(position(&events, is_text) < started);
    assert!(ended < last_position(&events, is_text));
    assert!(last_position(&events, is_text) < position(&events, is_done("s1")));
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_reply_keeps_the_text_it_streamed() {
    let llm = Pieces::new([vec![
        piece(0, "Let me "),
        piece(300, "think "),
        piece(300, "about it."),
        (0, LlmChunk::End),
    ]]);
    let (session, events) = start(Session::builder().llm(llm), agent()).await;
    session.user_turn("Hmm?").await.unwrap();
    tokio::time::sleep(ms(400)).await;
    session.interrupt().await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = said(&session).await;
    let events = close(session, events).await;

    let text = deltas(&events);
    let pieces: Vec<&str> = text.iter().map(|(_, _, delta, _)| delta.as_str()).collect();
    assert_eq!(pieces, ["Let me ", "think "], "nothing streams after the interruption");
    // Without a sink, text counts as heard as it arrives: the cut message is the deltas.
    assert_eq!(history, [("Let me think ".to_string(), true)]);
    let done = position(&events, is_done("s1"));
    assert!(last_position(&events, is_text) < done);
    assert!(
        matches!(&events[done].kind, EventKind::SpeechDone { interrupted: true, .. }),
        "speech_done says the text was cut: {:?}",
        events[done]
    );
}

/// With a sink, deltas are the model's text as it is generated; an interruption keeps what the
/// sink played, a prefix of them, and the committed message says so.
#[tokio::test(start_paused = true)]
async fn with_a_sink_an_interrupted_message_is_a_prefix_of_the_deltas() {
    let llm = ScriptedLlm::new([text("Hello there, traveller.")]);
    let builder = Session::builder().llm(llm).speech_sink(PacedSink::new(ms(10)));
    let (session, events) = start(builder, agent()).await;
    session.user_turn("Hi").await.unwrap();
    tokio::time::sleep(ms(65)).await; // the text at 10 ms, then five characters played
    session.interrupt().await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = said(&session).await;
    let events = close(session, events).await;

    let text = deltas(&events);
    assert_eq!(text, [("s1".to_string(), 1, "Hello there, traveller.".to_string(), 10)]);
    assert_eq!(history, [("Hello".to_string(), true)]);
    assert!(last_position(&events, is_text) < position(&events, is_done("s1")));
}

#[tokio::test(start_paused = true)]
async fn say_is_one_delta_with_its_whole_text() {
    let (session, events) = start(Session::builder().llm(ScriptedLlm::new([])), agent()).await;
    session.say("Welcome aboard.").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = said(&session).await;
    let events = close(session, events).await;
    assert_eq!(deltas(&events), [("s1".to_string(), 1, "Welcome aboard.".to_string(), 0)]);
    assert_eq!(history, [("Welcome aboard.".to_string(), false)]);
    assert!(position(&events, is_text) < position(&events, is_done("s1")));
}

/// `subscribe()` and `events()` keep today's set: the text reaches only whoever asked, and a
/// subscriber that did not ask sees the same events in the same order as before.
#[tokio::test(start_paused = true)]
async fn text_events_reach_only_the_subscribers_that_ask() {
    let llm = ScriptedLlm::new([
        text("Let me check.").with_call(ScriptedCall::new("c1", "lookup", "{}")),
        text("Sunny."),
    ]);
    let mut builder = Session::builder().llm(llm);
    let mut plain = builder.subscribe();
    let mut tools = builder.subscribe_to(EventFilter::tool_execution());
    let agent = Agent::new("A", "inst").tool(sleeper("lookup", 100, "sunny"));
    let (session, all) = start(builder, agent).await;
    let mut broadcast = session.events();
    session.user_turn("Weather?").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let all = close(session, all).await;
    let mut default = Vec::new();
    while let Some(e) = plain.recv().await {
        default.push(e);
    }
    let mut broadcast_types = Vec::new();
    while let Ok(e) = broadcast.recv().await {
        broadcast_types.push(e.kind.event_type());
    }

    assert_eq!(deltas(&all).len(), 2);
    let without_text: Vec<SessionEvent> =
        all.iter().filter(|e| !is_text(&e.kind)).cloned().collect();
    assert_eq!(default, without_text, "the default stream is unchanged");
    assert!(!broadcast_types.is_empty());
    assert!(!broadcast_types.contains(&EventType::AgentText));
    while let Some(e) = tools.recv().await {
        assert!(!is_text(&e.kind), "{e:?}");
    }
}

/// A host can ask once the session runs: the speeches after its subscription stream to it.
#[tokio::test(start_paused = true)]
async fn a_late_subscriber_gets_the_text_of_the_next_speeches() {
    let session = Session::builder().llm(ScriptedLlm::new([])).start(agent()).await.unwrap();
    session.say("One.").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let chat = session.subscribe_to(EventFilter::agent_text());
    session.say("Two.").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let events = close(session, chat).await;
    let shown: Vec<String> = events
        .iter()
        .map(|e| match &e.kind {
            EventKind::SpeechCreated { speech_id, .. } => format!("created({speech_id})"),
            EventKind::AgentText { speech_id, delta, .. } => format!("text({speech_id},{delta})"),
            EventKind::SpeechDone { speech_id, .. } => format!("done({speech_id})"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(shown, ["created(s2)", "text(s2,Two.)", "done(s2)"]);
}
