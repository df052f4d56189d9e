//! The protocol against a real session: each request read from the JSON a client sends, run
//! with `execute`, and its reply read back as a client would.

use colloquy_actors::{Session, SessionHandle};
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, AgentState, ChatItem, FunctionTool, RunContext, ToolError};
use colloquy_protocol::{
    Command, ErrorKind, EventFrame, PROTOCOL_VERSION, ProtocolError, Reply, Request, execute,
};

/// Sends `json` as a client would and reads the reply back from its bytes.
async fn ask(session: &SessionHandle, json: &str) -> Reply {
    let reply = match Request::decode(json.as_bytes()) {
        Ok(request) => execute(session, request).await,
        Err(e) => Reply::Error(e),
    };
    Reply::decode(&reply.encode()).expect("a reply reads back")
}

fn error_kind(reply: Reply) -> ErrorKind {
    match reply {
        Reply::Error(ProtocolError { kind, .. }) => kind,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn session(responses: Vec<ScriptedResponse>) -> SessionHandle {
    let slow = FunctionTool::new("slow", "Takes a while.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        Ok::<_, ToolError>("done")
    });
    Session::builder()
        .llm(ScriptedLlm::new(responses))
        .start(Agent::new("desk", "You help.").tool(slow))
        .await
        .expect("session starts")
}

#[tokio::test(start_paused = true)]
async fn a_turn_driven_through_the_protocol_lands_in_the_history() {
    let session = session(vec![ScriptedResponse::text("Hello there.")]).await;
    let mut events = session.subscribe();
    let turn = ask(&session, r#"{"v": 1, "type": "user_turn", "text": "hi"}"#).await;
    assert_eq!(turn, Reply::Ok);
    assert_eq!(ask(&session, r#"{"v": 1, "type": "wait_for_idle"}"#).await, Reply::Ok);
    let Reply::History { items } = ask(&session, r#"{"v": 1, "type": "history"}"#).await else {
        panic!("a history reply");
    };
    let texts: Vec<&str> =
        items.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["hi", "Hello there."]);
    let Reply::States { agent, .. } = ask(&session, r#"{"v": 1, "type": "states"}"#).await else {
        panic!("a states reply");
    };
    assert_eq!(agent, AgentState::Listening);
    let Reply::Closed { history } =
        ask(&session, r#"{"v": 1, "type": "close", "reason": "done"}"#).await
    else {
        panic!("a closed reply");
    };
    assert_eq!(history, items);
    let after = ask(&session, r#"{"v": 1, "type": "say", "text": "still there?"}"#).await;
    assert_eq!(error_kind(after), ErrorKind::Closed);
    // Every event of the turn travels as a frame and reads back the same.
    let mut index = 0;
    while let Some(event) = events.recv().await {
        index += 1;
        let frame = EventFrame { session_id: session.id().to_string(), index, event };
        assert_eq!(EventFrame::decode(&frame.encode()).expect("a frame reads back"), frame);
    }
    assert!(index > 5, "the turn's events: {index}");
}

#[tokio::test(start_paused = true)]
async fn a_queued_input_waits_for_the_reply_under_way_then_is_answered() {
    let slow = ScriptedResponse::text("First.").with_latency(std::time::Duration::from_millis(500));
    let session = session(vec![slow, ScriptedResponse::text("Second.")]).await;
    assert_eq!(ask(&session, r#"{"v": 1, "type": "user_turn", "text": "one"}"#).await, Reply::Ok);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let queued = ask(&session, r#"{"v": 1, "type": "user_input", "text": "two"}"#).await;
    assert_eq!(queued, Reply::Ok);
    assert_eq!(ask(&session, r#"{"v": 1, "type": "wait_for_idle"}"#).await, Reply::Ok);
    let Reply::History { items } = ask(&session, r#"{"v": 1, "type": "history"}"#).await else {
        panic!("a history reply");
    };
    let texts: Vec<&str> =
        items.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["one", "First.", "two", "Second."], "the first reply played out");
    let empty = ask(&session, r#"{"v": 1, "type": "user_input"}"#).await;
    assert_eq!(error_kind(empty), ErrorKind::BadRequest);
}

#[tokio::test(start_paused = true)]
async fn running_calls_and_snapshots_travel_and_read_back() {
    let call = ScriptedCall::new("c1", "slow", "{}");
    let session =
        session(vec![ScriptedResponse::calls([call]), ScriptedResponse::text("Working on it.")])
            .await;
    assert_eq!(ask(&session, r#"{"v": 1, "type": "user_turn", "text": "go"}"#).await, Reply::Ok);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let Reply::Calls { calls } = ask(&session, r#"{"v": 1, "type": "running_tool_calls"}"#).await
    else {
        panic!("a calls reply");
    };
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].call_id.as_str(), calls[0].name.as_str()), ("c1", "slow"));
    let Reply::Snapshot { snapshot } = ask(&session, r#"{"v": 1, "type": "inspect"}"#).await else {
        panic!("a snapshot reply");
    };
    let local = session.inspect().await.expect("inspect");
    assert_eq!(snapshot.session_id, local.session_id);
    assert_eq!(snapshot.tree.to_string(), local.tree.to_string(), "the same tree, read back");
    let approve = ask(&session, r#"{"v": 1, "type": "approve", "call_id": "c1"}"#).await;
    assert_eq!(error_kind(approve), ErrorKind::NotAwaiting);
    let cancel = ask(&session, r#"{"v": 1, "type": "cancel_tool_call", "call_id": "c1"}"#).await;
    assert_eq!(error_kind(cancel), ErrorKind::NotCancellable);
    let unknown = ask(&session, r#"{"v": 1, "type": "cancel_tool_call", "call_id": "c9"}"#).await;
    assert_eq!(error_kind(unknown), ErrorKind::NotFound);
    session.close().await.expect("close");
}

#[tokio::test(start_paused = true)]
async fn bad_requests_get_a_clear_error_and_change_nothing() {
    let session = session(vec![]).await;
    let cases = [
        (r#"{"v": 2, "type": "history"}"#, ErrorKind::UnsupportedVersion),
        (r#"{"v": 1, "type": "dance"}"#, ErrorKind::BadRequest),
        (r#"{"v": 1, "type": "user_turn"}"#, ErrorKind::BadRequest),
        (r#"{"type": "history"}"#, ErrorKind::BadRequest),
        ("not json", ErrorKind::BadRequest),
    ];
    for (json, kind) in cases {
        let reply = ask(&session, json).await;
        let Reply::Error(error) = reply else { panic!("{json}: expected an error") };
        assert_eq!(error.kind, kind, "{json}: {}", error.message);
        assert!(!error.message.is_empty());
    }
    let Reply::History { items } = ask(&session, r#"{"v": 1, "type": "history"}"#).await else {
        panic!("a history reply");
    };
    assert!(items.iter().all(|i| i.as_message().is_none()), "no message was added: {items:?}");
    session.close().await.expect("close");
}

#[test]
fn requests_and_event_frames_round_trip() {
    let request = Request::new(Command::Reject { call_id: "c1".into(), reason: "no".into() });
    assert_eq!(request.v, PROTOCOL_VERSION);
    let json: serde_json::Value = serde_json::from_slice(&request.encode()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"v": 1, "type": "reject", "call_id": "c1", "reason": "no"})
    );
    assert_eq!(Request::decode(&request.encode()).unwrap(), request);
    assert_eq!(request.command.name(), "reject");

    assert_eq!(EventFrame::decode(b"{}").unwrap_err().kind, ErrorKind::BadReply);
    assert_eq!(Reply::decode(b"[]").unwrap_err().kind, ErrorKind::BadReply);
    assert_eq!(Reply::Ok.unexpected("history").kind, ErrorKind::BadReply);
}
