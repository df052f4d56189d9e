//! The `Host`: a supervisor the host app owns. It lists its sessions, forgets the ones that
//! end, streams every actor's lifecycle (with stop reasons), and closes its sessions when dropped.

use std::time::Duration;

use crate::common::*;
use colloquy::prelude::*;
use colloquy::session::{Host, Lifecycle};

fn llm(script: Vec<ScriptedResponse>) -> ScriptedLlm {
    ScriptedLlm::new(script)
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_host_lists_its_sessions_and_streams_their_lifecycle() {
    let host = Host::new().await.unwrap();
    let mut lifecycle = host.lifecycle_events();
    let script = vec![call("c1", "slow", "{}"), text("Done.")];
    let a = Session::builder()
        .host(&host)
        .llm(llm(script))
        .start(Agent::new("A", "inst").tool(sleeper("slow", 100, "ok")))
        .await
        .unwrap();
    let b = Session::builder()
        .host(&host)
        .llm(llm(vec![]))
        .start(Agent::new("B", "inst"))
        .await
        .unwrap();
    let mut ids: Vec<String> = vec![a.id().to_string(), b.id().to_string()];
    ids.sort();
    let listed: Vec<String> = host.sessions().iter().map(|s| s.id().to_string()).collect();
    assert_eq!(listed, ids, "listed by id");
    assert!(host.session(a.id()).is_some());

    a.user_turn("go").await.unwrap();
    a.wait_for_idle().await.unwrap();
    a.close().await.unwrap();
    settle().await;
    assert_eq!(host.sessions().len(), 1, "a closed session leaves the host");
    assert!(host.session(a.id()).is_none());

    let records = drain_lifecycle(&mut lifecycle);
    let of_a: Vec<(&str, Lifecycle, Option<&str>)> = records
        .iter()
        .filter(|r| r.session_id == a.id())
        .map(|r| (r.id.as_str(), r.what, r.reason.as_deref()))
        .collect();
    // Every actor of A started and stopped gracefully, children before parents, with reasons.
    assert!(of_a.contains(&("tool_call:c1", Lifecycle::Started, None)), "{of_a:?}");
    assert!(of_a.contains(&("tool_call:c1", Lifecycle::Stopped, Some("finished"))), "{of_a:?}");
    assert!(of_a.contains(&("activity:A", Lifecycle::Stopped, Some("close"))), "{of_a:?}");
    assert_eq!(of_a.last(), Some(&("session", Lifecycle::Stopped, Some("close"))));
    for (id, what, _) in &of_a {
        if *what == Lifecycle::Started {
            let stops = of_a.iter().filter(|(i, w, _)| i == id && *w == Lifecycle::Stopped);
            assert_eq!(stops.count(), 1, "{id} stops exactly once");
        }
    }
    // B's actors report too, tagged with B's id, and B still runs.
    assert!(records.iter().any(|r| r.session_id == b.id() && r.id == "activity:B"));
    assert!(b.is_running());
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_the_host_closes_its_sessions() {
    let host = Host::new().await.unwrap();
    let mut lifecycle = host.lifecycle_events();
    let mut builder = Session::builder().host(&host).llm(llm(vec![]));
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("A", "inst")).await.unwrap();
    drop(host);
    let mut closed = None;
    while let Some(event) = events.recv().await {
        if let EventKind::SessionClosed { reason } = event.kind {
            closed = Some(reason);
        }
    }
    assert_eq!(closed.as_deref(), Some("host stopped"));
    settle().await;
    assert!(!session.is_running());
    let last = drain_lifecycle(&mut lifecycle).pop().unwrap();
    assert_eq!((last.id.as_str(), last.reason.as_deref()), ("session", Some("host stopped")));
}

#[tokio::test(start_paused = true)]
async fn close_all_closes_every_session_with_the_reason() {
    let host = Host::new().await.unwrap();
    let mut sessions = Vec::new();
    for i in 0..3 {
        let agent = Agent::new(format!("A{i}"), "inst");
        sessions.push(Session::builder().host(&host).llm(llm(vec![])).start(agent).await.unwrap());
    }
    assert_eq!(host.sessions().len(), 3);
    host.close_all("maintenance").await;
    settle().await;
    assert!(host.sessions().is_empty());
    assert!(sessions.iter().all(|s| !s.is_running()));
    // Two hosts never see each other's sessions.
    let other = Host::new().await.unwrap();
    let s = Session::builder().host(&other).llm(llm(vec![])).start(Agent::new("X", "i")).await;
    assert_eq!(other.sessions().len(), 1);
    assert!(host.sessions().is_empty());
    s.unwrap().close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_session_is_reported_and_forgotten_and_the_others_run_on() {
    let host = Host::new().await.unwrap();
    let mut lifecycle = host.lifecycle_events();
    let start = |name: &'static str| {
        Session::builder().host(&host).llm(llm(vec![text("hi")])).start(Agent::new(name, "inst"))
    };
    let (a, b) = (start("A").await.unwrap(), start("B").await.unwrap());
    a.inject_failure("session");
    settle().await;
    assert!(!a.is_running());
    let listed: Vec<String> = host.sessions().iter().map(|s| s.id().to_string()).collect();
    assert_eq!(listed, [b.id().to_string()]);
    let records = drain_lifecycle(&mut lifecycle);
    let failed: Vec<_> = records.iter().filter(|r| r.what == Lifecycle::Failed).collect();
    assert_eq!(failed.len(), 1, "{records:?}");
    assert_eq!((failed[0].session_id.as_str(), failed[0].id.as_str()), (a.id(), "session"));
    assert!(failed[0].reason.as_deref().unwrap().contains("injected failure"));
    // Its children died with it and say so; nothing of A is left running.
    let killed: Vec<&str> = records
        .iter()
        .filter(|r| r.session_id == a.id() && r.reason.as_deref() == Some("killed"))
        .map(|r| r.id.as_str())
        .collect();
    assert!(killed.contains(&"activity:A"), "{records:?}");
    assert!(matches!(a.user_turn("anyone?").await, Err(SessionError::Closed)));
    b.user_turn("still here?").await.unwrap();
    b.wait_for_idle().await.unwrap();
    b.close().await.unwrap();
}
