//! EndCallTool (docs/scenarios.md C-74, C-75, C-78): the session ends only after the goodbye has
//! played out, with reason `end_call`, through an event and the host's close callback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use colloquy::events::EventStream;
use colloquy::llm::RecordedRequest;
use colloquy::prelude::*;
use colloquy::speech::PacedSink;
use colloquy::toolsets::EndCallTool;
use colloquy_actors::END_CALL_DESCRIPTION;

struct Ended {
    events: Vec<SessionEvent>,
    requests: Vec<RecordedRequest>,
    closed_by_host: Vec<String>,
}

/// Starts `agent` with a paced sink (10 ms per character), sends `turn`, and collects every
/// event until the session has closed.
async fn talk(agent: Agent, script: Vec<ScriptedResponse>, sink: Option<PacedSink>) -> Ended {
    let llm = ScriptedLlm::new(script).recording();
    let closed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&closed);
    let mut builder = Session::builder()
        .llm(llm.clone())
        .on_close(move |reason| seen.lock().unwrap().push(reason.to_string()));
    if let Some(sink) = sink {
        builder = builder.speech_sink(sink);
    }
    let mut events: EventStream = builder.subscribe();
    let session = builder.start(agent).await.unwrap();
    session.user_turn("that's all, bye").await.unwrap();
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    assert!(!session.is_running());
    let closed_by_host = closed.lock().unwrap().clone();
    Ended { events: all, requests: llm.requests(), closed_by_host }
}

fn at(events: &[SessionEvent], f: impl Fn(&EventKind) -> bool) -> u64 {
    events.iter().find(|e| f(&e.kind)).map(|e| e.at_ms).expect("the event happened")
}

#[tokio::test(start_paused = true)]
async fn c74_the_session_ends_after_the_goodbye_has_played() {
    let agent = Agent::new("A", "inst").toolset(EndCallTool::new().toolset());
    let script = vec![call("e1", "end_call", "{}"), text("Goodbye!")];
    let ended = talk(agent, script, Some(PacedSink::new(Duration::from_millis(10)))).await;
    // The tool list and description.
    assert_eq!(ended.requests[0].tools, ["end_call"]);
    // The goodbye is the tool reply of the same speech.
    let items = show(&ended.requests[1].items);
    assert_eq!(items[2], r#"out(#e1,"say goodbye to the user",ok,rr=T)"#);
    let speech_done = at(&ended.events, |k| matches!(k, EventKind::SpeechDone { .. }));
    let closed = at(&ended.events, |k| matches!(k, EventKind::SessionClosed { .. }));
    // "Goodbye!" is 8 characters at 10 ms each, after the two 10 ms LLM latencies.
    assert_eq!(speech_done, 100);
    assert!(closed >= speech_done);
    match &ended.events.last().unwrap().kind {
        EventKind::SessionClosed { reason } => assert_eq!(reason, "end_call"),
        other => panic!("the last event is session_closed, not {other:?}"),
    }
    assert_eq!(ended.closed_by_host, ["end_call"]);
    let speeches =
        ended.events.iter().filter(|e| matches!(e.kind, EventKind::SpeechCreated { .. })).count();
    assert_eq!(speeches, 1, "the goodbye is said in the same speech");
}

#[tokio::test]
async fn the_description_is_the_fixed_text_then_the_extra() {
    let tool = EndCallTool::new().extra_description("Not during payments.").tool();
    assert_eq!(tool.description(), format!("{END_CALL_DESCRIPTION}\nNot during payments."));
    assert_eq!(EndCallTool::new().tool().description(), format!("{END_CALL_DESCRIPTION}\n"));
    assert!(
        tool.schema().parameters["properties"].as_object().is_none_or(serde_json::Map::is_empty)
    );
}

#[tokio::test(start_paused = true)]
async fn c75_callbacks_see_the_call_and_may_replace_the_output() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (called, completed) = (Arc::clone(&log), Arc::clone(&log));
    let tool = EndCallTool::new()
        .on_tool_called(move |ctx: RunContext| {
            called.lock().unwrap().push(format!("called {}", ctx.call_id()));
            async { Ok(()) }
        })
        .on_tool_completed(move |_ctx, output| {
            completed.lock().unwrap().push(format!("completed {output:?}"));
            async { Ok(Some("tell the user the call is over".to_string())) }
        });
    let agent = Agent::new("A", "inst").toolset(tool.toolset());
    let ended = talk(agent, vec![call("e1", "end_call", "{}"), text("It's over.")], None).await;
    assert_eq!(*log.lock().unwrap(), ["called e1", r#"completed Some("say goodbye to the user")"#]);
    assert_eq!(
        show(&ended.requests[1].items)[2],
        r#"out(#e1,"tell the user the call is over",ok,rr=T)"#
    );
    assert!(
        tool_events(&ended.events)
            .contains(&r#"E(e1,done,"tell the user the call is over")"#.to_string())
    );
    assert_eq!(ended.closed_by_host, ["end_call"]);
}

#[tokio::test(start_paused = true)]
async fn a_failing_callback_still_ends_the_call() {
    let tool =
        EndCallTool::new().on_tool_called(|_ctx| async { Err(ToolError::new("the CRM is down")) });
    let agent = Agent::new("A", "inst").toolset(tool.toolset());
    let ended = talk(agent, vec![call("e1", "end_call", "{}"), text("Sorry, bye.")], None).await;
    assert_eq!(show(&ended.requests[1].items)[2], r#"out(#e1,"the CRM is down",ERR,rr=T)"#);
    assert_eq!(ended.closed_by_host, ["end_call"]);

    let panicking = EndCallTool::new().on_tool_completed(|_ctx, _out| async { panic!("boom") });
    let agent = Agent::new("A", "inst").toolset(panicking.toolset());
    let ended = talk(agent, vec![call("e1", "end_call", "{}"), text("Bye.")], None).await;
    assert_eq!(ended.closed_by_host, ["end_call"]);
}

#[tokio::test(start_paused = true)]
async fn without_end_instructions_the_call_ends_without_a_goodbye() {
    let tool = EndCallTool::new().end_instructions(None);
    let agent = Agent::new("A", "inst").toolset(tool.toolset());
    let ended = talk(agent, vec![call("e1", "end_call", "{}"), text("never said")], None).await;
    assert_eq!(ended.requests.len(), 1, "no tool reply is generated");
    assert_eq!(ended.closed_by_host, ["end_call"]);
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_ends_the_call_if_the_goodbye_never_completes() {
    let tool = EndCallTool::new().watchdog(Some(Duration::from_secs(3)));
    let llm = ScriptedLlm::new(vec![call("e1", "end_call", "{}"), text("Goodbye!")]);
    let mut builder = Session::builder()
        .llm(llm)
        .speech_sink(SilentSink::default())
        .playout_timeout(Some(Duration::from_secs(10)));
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("A", "inst").toolset(tool.toolset())).await.unwrap();
    session.user_turn("bye").await.unwrap();
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    // At 3 s the end-call watchdog starts the close, which interrupts the goodbye; the silent
    // sink does not answer that either, so the playout watchdog ends it 10 s later.
    let closed = at(&all, |k| matches!(k, EventKind::SessionClosed { .. }));
    assert!((13_000..13_100).contains(&closed), "closed at {closed} ms");
    assert!(all.iter().any(|e| matches!(&e.kind,
        EventKind::Error { message, .. } if message.contains("never finished"))));
}

#[tokio::test(start_paused = true)]
async fn c78_ignore_on_enter_hides_end_call_from_the_greeting() {
    let keep = sleeper("keep", 0, "kept");
    let agent = Agent::new("A", "inst")
        .on_enter_reply("greet the user")
        .tool(keep)
        .toolset(EndCallTool::new().ignore_on_enter(true).toolset());
    let script = vec![call("k1", "keep", "{}"), text("Hello!"), text("How can I help?")];
    let h = Harness::start(agent, script).await;
    h.session.wait_for_idle().await.unwrap();
    h.turn("hi").await;
    let reqs = h.requests();
    assert_eq!(reqs[0].tools, ["keep"], "the greeting");
    assert_eq!(reqs[1].tools, ["keep"], "its nested tool reply");
    assert_eq!(reqs[2].tools, ["keep", "end_call"], "a user turn");
    h.close().await;
}
