//! The registry of a host's agents against real sessions: which agent a name starts, the
//! default, and the order a start applies the model, the session hook, the client's history and
//! the agent in.

use std::sync::{Arc, Mutex};

use colloquy_actors::Session;
use colloquy_edge::SessionStart;
use colloquy_edge::hosting::{Agents, StartError};
use colloquy_llm::{ScriptedLlm, ScriptedResponse};
use colloquy_model::{Agent, ChatItem, EventFilter, EventKind, Message, Role, Timestamp};

fn said(text: &str) -> ChatItem {
    ChatItem::Message(Message {
        id: format!("item_{text}"),
        role: Role::User,
        text: text.to_owned(),
        interrupted: false,
        created_at: Timestamp::new(1_000, 0),
    })
}

fn texts(items: &[ChatItem]) -> Vec<&str> {
    items.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect()
}

#[test]
fn the_first_name_is_the_default_and_a_name_registered_again_keeps_its_place() {
    let agents = Agents::new()
        .agent("support", || Agent::new("support", "You help."))
        .agent("sales", || Agent::new("sales", "You sell."))
        .agent("support", || Agent::new("support-2", "You help better."));
    assert_eq!(agents.names().collect::<Vec<_>>(), ["support", "sales"]);
    assert_eq!(agents.default_agent(), Some("support"));
    assert!(agents.offers("sales") && !agents.offers("support-2"));
    let known: Vec<String> = agents.known().into_iter().collect();
    assert_eq!(known, ["sales", "support", "support-2"]);
    assert!(Agents::new().is_empty() && Agents::new().default_agent().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_unknown_agent_is_refused_before_any_hook_runs() {
    let hooked = Arc::new(Mutex::new(0));
    let count = Arc::clone(&hooked);
    let agents = Agents::new().agent("support", || Agent::new("support", "You help.")).session(
        move |builder, _| {
            *count.lock().unwrap() += 1;
            builder
        },
    );
    let start = SessionStart::new("ghost", serde_json::Value::Null);
    let refused = agents.start(Session::builder(), start, Vec::new(), EventFilter::ALL).await;
    let Err(e @ StartError::UnknownAgent(_)) = refused else { panic!("refused") };
    assert_eq!(e.to_string(), "no agent `ghost`");
    assert_eq!(*hooked.lock().unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_start_sets_the_model_then_runs_the_hook_then_sets_the_history() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (hooked, started) = (Arc::clone(&seen), Arc::clone(&seen));
    let agents = Agents::new()
        .agent("support", || Agent::new("support", "You help."))
        .llm(ScriptedLlm::new([ScriptedResponse::text("the registry's model")]))
        .session(move |builder, start| {
            hooked.lock().unwrap().push(format!("hook {} {}", start.agent, start.metadata));
            // The hook's model replaces the registry's; its history gives way to the client's.
            builder
                .llm(ScriptedLlm::new([ScriptedResponse::text("the hook's model")]))
                .history(vec![said("from the hook")])
        })
        .on_session(move |session, start| {
            assert!(!session.id().is_empty());
            started.lock().unwrap().push(format!("started {}", start.agent));
        });
    let start = SessionStart::new("support", serde_json::json!({"customer": "c-42"}));
    let history = vec![said("from the client")];
    let hosted = agents.start(Session::builder(), start, history, EventFilter::ALL).await.unwrap();
    let hook = r#"hook support {"customer":"c-42"}"#;
    assert_eq!(*seen.lock().unwrap(), [hook, "started support"]);
    let session = hosted.session;
    session.user_turn("hi").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    assert_eq!(texts(&history), ["from the client", "hi", "the hook's model"]);
    // The subscription was taken before the start: it holds the session's first event.
    let mut events = hosted.events;
    let first = events.recv().await.expect("a first event");
    let EventKind::AgentHandoff { old_agent: None, new_agent } = first.kind else {
        panic!("the first agent's entry first: {first:?}")
    };
    assert_eq!(new_agent, "support");
}
