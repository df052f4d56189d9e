//! The protocol against a real session: each request read from the JSON a client sends, run
//! with `execute`, and its reply read back as a client would; and the conversions, which keep
//! every field and the words the runtime's own serialization writes.

use colloquy_actors::{Session, SessionHandle};
use colloquy_edge::{execute, from_proto, to_proto};
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, AgentState, ChatItem, FunctionTool, RunContext, ToolError};
use colloquy_protocol::{ErrorKind, EventFrame, ProtocolError, Reply, Request};

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
    let json = serde_json::to_value(&*snapshot).unwrap();
    assert_eq!(json, serde_json::to_value(&local).unwrap(), "the runtime's own serialization");
    let back = from_proto::snapshot(*snapshot);
    assert_eq!(back.tree.to_string(), local.tree.to_string(), "the same tree, read back");
    let local_calls = session.running_tool_calls().await.expect("calls");
    assert_eq!(calls.into_iter().map(from_proto::running_call).collect::<Vec<_>>(), local_calls);
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
fn every_variant_keeps_its_word_both_ways() {
    use colloquy_actors::{ActorKind, NodeStatus, SpeechStatus, ToolsetScope};
    use colloquy_llm::ToolChoice;

    fn word(value: &impl serde::Serialize) -> serde_json::Value {
        serde_json::to_value(value).unwrap()
    }
    let kinds = [
        ActorKind::Session,
        ActorKind::Coalescer,
        ActorKind::Activity,
        ActorKind::Toolset,
        ActorKind::ToolCall,
    ];
    for kind in kinds {
        assert_eq!(word(&to_proto::actor_kind(kind)), word(&kind));
        assert_eq!(from_proto::actor_kind(to_proto::actor_kind(kind)), kind);
    }
    let statuses = [
        NodeStatus::Running,
        NodeStatus::Draining,
        NodeStatus::Closing,
        NodeStatus::Stopping,
        NodeStatus::AwaitingApproval,
        NodeStatus::Queued,
    ];
    for status in statuses {
        assert_eq!(word(&to_proto::node_status(status)), word(&status));
        assert_eq!(from_proto::node_status(to_proto::node_status(status)), status);
    }
    for status in [SpeechStatus::Speaking, SpeechStatus::WaitingForTools, SpeechStatus::Queued] {
        let speech = colloquy_actors::SpeechSnapshot { speech_id: "s1".into(), status };
        let travelled = to_proto::snapshot(snapshot_with(vec![speech.clone()])).speeches;
        assert_eq!(word(&travelled[0]), word(&speech));
        let back = from_proto::snapshot(to_proto::snapshot(snapshot_with(vec![speech.clone()])));
        assert_eq!(back.speeches, [speech]);
    }
    for scope in [ToolsetScope::Session, ToolsetScope::Agent] {
        let mut snapshot = snapshot_with(Vec::new());
        snapshot.tree.scope = Some(scope);
        let travelled = to_proto::snapshot(snapshot.clone());
        assert_eq!(word(&travelled), word(&snapshot));
        assert_eq!(from_proto::snapshot(travelled), snapshot);
    }
    let choices =
        [ToolChoice::Auto, ToolChoice::None, ToolChoice::Required, ToolChoice::Named("x".into())];
    for choice in choices {
        assert_eq!(word(&to_proto::tool_choice(choice.clone())), word(&choice));
        assert_eq!(from_proto::tool_choice(to_proto::tool_choice(choice.clone())), choice);
    }
}

/// A snapshot of a session alone, every optional field of its node set.
fn snapshot_with(
    speeches: Vec<colloquy_actors::SpeechSnapshot>,
) -> colloquy_actors::SessionSnapshot {
    use colloquy_actors::{ActorKind, ActorNode, CoalescerSnapshot, NodeStatus, SessionSnapshot};
    use colloquy_model::UserState;

    let tree = ActorNode {
        kind: ActorKind::Session,
        id: "session".into(),
        status: NodeStatus::Running,
        agent: Some("desk".into()),
        scope: None,
        tools: Some(vec!["slow".into()]),
        call_id: Some("c1".into()),
        name: Some("slow".into()),
        arguments: Some("{}".into()),
        elapsed_ms: Some(1200),
        updates: Some(2),
        cancellable: Some(true),
        children: Vec::new(),
        actor_id: colloquy_actors::ractor::ActorId::Local(0),
    };
    SessionSnapshot {
        at_ms: 5,
        session_id: "s".into(),
        agent: "desk".into(),
        agent_state: AgentState::Listening,
        user_state: UserState::Listening,
        speeches,
        replies: Some(CoalescerSnapshot { pending: vec!["c1_update_1".into()], offered: true }),
        tree,
    }
}
