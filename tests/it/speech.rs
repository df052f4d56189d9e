//! Speeches: say, generate_reply, interruptions, speech sinks and LLM failures, through the
//! public API on the paused clock.

use std::time::Duration;

use crate::common::*;
use colloquy::events::SpeechSource;
use colloquy::llm::{Llm, LlmChunk, LlmRequest, LlmStream, RequestKind};
use colloquy::prelude::*;
use colloquy::speech::PacedSink;

fn speech_events(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SpeechCreated { speech_id, source } => {
                Some(format!("created({speech_id},{source:?})"))
            }
            EventKind::SpeechDone { speech_id, interrupted } => {
                Some(format!("done({speech_id},{interrupted})"))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn say_speaks_a_fixed_text_without_the_llm() {
    let mut h = Harness::start(agent(), vec![]).await;
    h.session.say("Welcome aboard.").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["asst(Welcome aboard.)"]);
    assert_eq!(h.requests().len(), 0);
    assert_eq!(speech_events(h.events()), ["created(s1,Say)", "done(s1,false)"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn generate_reply_sends_its_instructions_for_one_reply_only() {
    let h = Harness::start(agent(), vec![text("Hello! How can I help?")]).await;
    h.session.generate_reply("Greet the user.").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let req = &h.requests()[0];
    assert_eq!(req.kind, RequestKind::GenerateReply);
    assert_eq!(req.instructions.as_deref(), Some("Greet the user."));
    assert!(req.items.is_empty(), "instructions are not part of the context");
    assert_eq!(h.ctx("A").await, ["asst(Hello! How can I help?)"]);
    h.turn("hi").await;
    assert_eq!(h.requests()[1].instructions, None);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn interrupting_while_the_llm_thinks_drops_the_request() {
    let mut h =
        Harness::start(agent(), vec![text("too late").with_latency(Duration::from_millis(500))])
            .await;
    h.session.user_turn("hi").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.session.interrupt().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["user(hi)"]);
    assert_eq!(speech_events(h.events()), ["created(s1,UserTurn)", "done(s1,true)"]);
    assert_eq!(h.agent_states(), ["listening", "thinking", "listening"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_user_turn_interrupts_the_current_speech() {
    let h = Harness::start(
        agent(),
        vec![text("a long answer").with_latency(Duration::from_millis(500)), text("second answer")],
    )
    .await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.turn("two").await;
    assert_eq!(h.ctx("A").await, ["user(one)", "user(two)", "asst(second answer)"]);
    assert_eq!(h.llm.request_count(), 2);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c48_an_interruption_never_cancels_a_tool_body() {
    let pay = sleeper("pay", 300, "paid");
    let mut h = Harness::start(
        agent().tool(pay),
        vec![text("Processing.").with_call(ScriptedCall::new("p1", "pay", "{}"))],
    )
    .await;
    h.session.user_turn("pay").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = tokio::time::Instant::now();
    h.session.interrupt().await.unwrap();
    // The interrupt completes only once the tool has finished (t = 310 ms).
    assert_eq!(before.elapsed(), Duration::from_millis(210));
    let ended = at_ms(h.events(), |k| matches!(k, EventKind::ToolCallEnded { .. }));
    assert_eq!(ended, 310);
    assert_eq!(
        h.ctx("A").await,
        ["user(pay)", "asst(Processing.)", "call(pay#p1 {})", r#"out(#p1,"paid",ok,rr=T)"#]
    );
    assert_eq!(h.llm.request_count(), 1, "no tool reply after an interruption");
    assert_eq!(h.agent_states()[h.agent_states().len() - 2..], ["thinking", "listening"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn c49_speeches_that_disallow_interruptions_play_on() {
    let pay = sleeper("pay", 300, "paid");
    let mut h = Harness::start(
        agent().tool(pay).allow_interruptions(false),
        vec![text("Processing.").with_call(ScriptedCall::new("p1", "pay", "{}"))],
    )
    .await;
    h.session.user_turn("pay").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = tokio::time::Instant::now();
    h.session.interrupt().await.unwrap();
    assert_eq!(before.elapsed(), Duration::ZERO, "resolves at once without interrupting");
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await.last().unwrap(), "asst(reply 1)", "the tool reply runs");
    assert_eq!(speech_events(h.events())[1], "done(s1,false)");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_sink_paces_playout_and_an_interruption_keeps_what_was_played() {
    let builder = Session::builder().speech_sink(PacedSink::new(Duration::from_millis(10)));
    let mut h =
        Harness::start_with(builder, agent(), vec![text("Hello world"), text("Goodbye now")]).await;
    h.turn("hi").await;
    // 10 ms of latency, then 11 characters at 10 ms each.
    assert_eq!(at_ms(h.events(), |k| matches!(k, EventKind::SpeechDone { .. })), 120);
    h.session.user_turn("bye").await.unwrap();
    tokio::time::sleep(Duration::from_millis(55)).await;
    h.session.interrupt().await.unwrap();
    assert_eq!(
        h.ctx("A").await,
        ["user(hi)", "asst(Hello world)", "user(bye)", "asst(Good,interrupted)"]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_broken_llm_stream_ends_the_turn_cleanly() {
    let mut h =
        Harness::start(agent(), vec![ScriptedResponse::error("rate limited"), text("Back.")]).await;
    h.turn("hi").await;
    let errors: Vec<_> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Error { source, message, .. } => Some((*source, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(errors, [(colloquy::events::ErrorSource::Llm, "rate limited".to_string())]);
    assert_eq!(speech_events(h.events()), ["created(s1,UserTurn)", "done(s1,false)"]);
    h.turn("again").await;
    assert_eq!(h.ctx("A").await, ["user(hi)", "user(again)", "asst(Back.)"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn speeches_queue_in_order() {
    let mut h = Harness::start(agent(), vec![text("first"), text("second")]).await;
    h.session.generate_reply("one").await.unwrap();
    h.session.say("in between").await.unwrap();
    h.session.generate_reply("two").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["asst(first)", "asst(in between)", "asst(second)"]);
    let sources: Vec<_> = h
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SpeechCreated { source, .. } => Some(*source),
            _ => None,
        })
        .collect();
    assert_eq!(
        sources,
        [SpeechSource::GenerateReply, SpeechSource::Say, SpeechSource::GenerateReply]
    );
    h.close().await;
}

/// An LLM whose text trickles in: the first piece at once, the rest after a pause.
struct Trickle;

impl Llm for Trickle {
    fn chat(&self, _request: LlmRequest) -> LlmStream {
        use futures_util::StreamExt;
        let first = futures_util::stream::iter([LlmChunk::Text("Hel".into())]);
        let rest = futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            futures_util::stream::iter([LlmChunk::Text("lo.".into()), LlmChunk::End])
        })
        .flatten();
        Box::pin(first.chain(rest))
    }
}

/// The agent speaks from the first piece of text on, not once the answer is complete: the
/// `speaking` state waits for nothing (it rides with the message only when the whole text
/// arrives at once).
#[tokio::test(start_paused = true)]
async fn the_agent_speaks_from_the_first_piece_of_a_slow_answer() {
    let session = Session::builder().llm(Trickle).start(agent()).await.unwrap();
    session.user_turn("hi").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(session.states().await.unwrap().0, AgentState::Speaking);
    session.wait_for_idle().await.unwrap();
    assert_eq!(session.states().await.unwrap().0, AgentState::Listening);
    let said: Vec<String> = session
        .history()
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.as_message().filter(|m| m.role == Role::Assistant))
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(said, ["Hello."]);
    session.close().await.unwrap();
}
