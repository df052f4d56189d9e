//! A server with a store (`ServerBuilder::store`): its sessions listed by `GET /v1/sessions`
//! behind the token, suspended at a shutdown, resumed once when clients attach to them on a
//! server of the same store, their events numbered on; an unknown or closed one refused with
//! nothing changed. Real sockets, so the real clock: every wait is bounded.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use colloquy_llm::{ScriptedLlm, ScriptedResponse};
use colloquy_model::Agent;
use colloquy_protocol::{ErrorCode, Reply, ServerMessage, SessionList};
use colloquy_server::{Server, ServerBuilder, ServerHandle};
use colloquy_store::{MemoryStore, SessionStore};
use common::{Client, get, http, is_event, seqs, serve, start};

const TOKEN: &str = "s3cret";

/// A fresh directory for one test's event numbers.
fn numbers(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("colloquy-stored-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A server of `demo` (an agent without tools) answering `replies`, on `store`.
fn stored(store: &Arc<MemoryStore>, dir: &Path, replies: &[&str]) -> ServerBuilder {
    let replies = replies.iter().map(|text| ScriptedResponse::text(*text));
    Server::builder()
        .llm(ScriptedLlm::new(replies))
        .agent("demo", || Agent::new("demo", "You help."))
        .store(Arc::clone(store) as Arc<dyn SessionStore>, dir)
        .token(TOKEN)
}

async fn list(server: &ServerHandle) -> SessionList {
    let auth = format!("Bearer {TOKEN}");
    let (status, body) = get(server, "/v1/sessions", &[("authorization", &auth)]).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn connect(server: &ServerHandle, id: &str, after: u64) -> Client {
    let path = format!("/v1/sessions/{id}/ws?after={after}");
    let auth = format!("Bearer {TOKEN}");
    match Client::try_connect(server, &path, &[("authorization", &auth)]).await {
        common::Attempt::Open(client) => *client,
        common::Attempt::Refused(status, body) => panic!("refused: {status} {body}"),
    }
}

/// Sends a turn and waits for idle; every frame read, up to the idle's reply.
async fn turn(client: &mut Client, id: u64, text: &str) -> Vec<ServerMessage> {
    client.send(&format!(r#"{{"v":1,"id":{id},"type":"user_turn","text":"{text}"}}"#)).await;
    let mut frames =
        client.until(|f| matches!(f, ServerMessage::Reply { id: Some(n), .. } if *n == id)).await;
    let wait = id + 1;
    client.send(&format!(r#"{{"v":1,"id":{wait},"type":"wait_for_idle"}}"#)).await;
    let idle =
        |f: &ServerMessage| matches!(f, ServerMessage::Reply { id: Some(n), .. } if *n == wait);
    frames.extend(client.until(idle).await);
    frames
}

/// Starts a session, runs one turn on it and shuts the server down: the session's id and the
/// number of the last event its client read.
async fn one_turn_then_shutdown(server: ServerHandle) -> (String, u64) {
    let (status, body) = common::post(&server, r#"{"v":1}"#, Some(TOKEN)).await;
    assert_eq!(status, 201, "{body}");
    let id = body["session_id"].as_str().unwrap().to_owned();
    let mut client = connect(&server, &id, 0).await;
    let frames = turn(&mut client, 1, "Hello").await;
    let last = *seqs(&frames).last().expect("events");
    server.shutdown().await;
    // The suspension's own events (`session_closed suspended`) came after: count them too.
    let mut last_seen = last;
    while let Some(frame) = client.next().await {
        if let ServerMessage::Event { seq, .. } = frame {
            last_seen = seq;
        }
    }
    (id, last_seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_session_is_listed_and_resumes_on_attach_with_its_numbers_carried_on() {
    let (store, dir) = (Arc::new(MemoryStore::new()), numbers("resume"));
    let first = serve(stored(&store, &dir, &["Hi there."])).await;
    let (id, last) = one_turn_then_shutdown(first).await;
    let server = serve(stored(&store, &dir, &["Welcome back."])).await;
    // The list is the API's: no token, no list.
    let (status, _) = get(&server, "/v1/sessions", &[]).await;
    assert_eq!(status, 401);
    let listed = list(&server).await;
    let stored_now = listed.stored.expect("a server with a store lists it");
    assert_eq!(stored_now.len(), 1);
    let session = &stored_now[0];
    assert_eq!((session.session_id.as_str(), session.agent.as_str()), (id.as_str(), "demo"));
    assert_eq!((session.closed.as_deref(), session.live), (None, false));
    assert!(listed.sessions.is_empty());
    // Attached after the last event read: the next ones, numbered on, and no gap.
    let mut client = connect(&server, &id, last).await;
    let hello = client.next().await;
    assert!(matches!(hello, Some(ServerMessage::Hello { .. })), "{hello:?}");
    let frames = turn(&mut client, 1, "Again").await;
    assert!(!frames.iter().any(|f| matches!(f, ServerMessage::Error(_))), "{frames:#?}");
    let numbers = seqs(&frames);
    assert_eq!(numbers.first(), Some(&(last + 1)), "{frames:#?}");
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    assert!(frames.iter().any(|f| is_event(f, "x_session_resumed")));
    // The conversation went on: both turns in the history.
    client.send(r#"{"v":1,"id":9,"type":"history"}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Reply { id: Some(9), .. })).await;
    let Some(ServerMessage::Reply { reply: Reply::History { items }, .. }) = frames.last() else {
        panic!("{frames:#?}")
    };
    let texts: Vec<&str> =
        items.iter().filter_map(|i| i.as_message()).map(|m| m.text.as_str()).collect();
    for said in ["Hello", "Hi there.", "Again", "Welcome back."] {
        assert!(texts.contains(&said), "{said} in {texts:?}");
    }
    let listed = list(&server).await;
    assert!(listed.stored.unwrap()[0].live);
    assert_eq!(listed.sessions.len(), 1);
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_attaching_at_once_resume_the_session_once() {
    let (store, dir) = (Arc::new(MemoryStore::new()), numbers("once"));
    let first = serve(stored(&store, &dir, &["Hi there."])).await;
    let (id, last) = one_turn_then_shutdown(first).await;
    let resumes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&resumes);
    let builder = stored(&store, &dir, &[]).on_session(move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let server = serve(builder).await;
    let (mut a, mut b) = tokio::join!(connect(&server, &id, last), connect(&server, &id, last));
    for client in [&mut a, &mut b] {
        let hello = client.next().await;
        assert!(matches!(hello, Some(ServerMessage::Hello { .. })), "{hello:?}");
    }
    assert_eq!(resumes.load(Ordering::SeqCst), 1);
    assert_eq!(list(&server).await.sessions[0].clients, 2);
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_closed_session_is_a_clear_404_and_nothing_changes() {
    let (store, dir) = (Arc::new(MemoryStore::new()), numbers("closed"));
    let server = serve(stored(&store, &dir, &[])).await;
    let (status, body) = common::post(&server, r#"{"v":1}"#, Some(TOKEN)).await;
    assert_eq!(status, 201, "{body}");
    let id = body["session_id"].as_str().unwrap().to_owned();
    let response = http()
        .delete(format!("{}v1/sessions/{id}", server.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    common::eventually("the session leaves", || async { list(&server).await.sessions.is_empty() })
        .await;
    let before = store.load(&id).unwrap();
    let auth = format!("Bearer {TOKEN}");
    for (path, says) in [
        (format!("/v1/sessions/{id}/ws"), "closed (client_closed)"),
        ("/v1/sessions/nope/ws".to_owned(), "no session `nope`, live or stored"),
    ] {
        let attempt = Client::try_connect(&server, &path, &[("authorization", &auth)]).await;
        let common::Attempt::Refused(404, body) = attempt else { panic!("expected a refusal") };
        let Ok(ServerMessage::Error(error)) = ServerMessage::decode(&body) else {
            panic!("{body}")
        };
        assert_eq!(error.code, ErrorCode::UnknownSession);
        assert!(error.message.contains(says), "{body}");
    }
    assert_eq!(store.load(&id).unwrap(), before, "nothing stored changed");
    let listed = list(&server).await.stored.unwrap();
    assert_eq!(listed[0].closed.as_deref(), Some("client_closed"));
    assert!(list(&server).await.sessions.is_empty(), "nothing resumed");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stored_session_resumes_it_to_close_it_for_good() {
    let (store, dir) = (Arc::new(MemoryStore::new()), numbers("delete"));
    let first = serve(stored(&store, &dir, &["Hi there."])).await;
    let (id, _) = one_turn_then_shutdown(first).await;
    assert!(dir.join(&id).exists(), "its number is kept while it may resume");
    let server = serve(stored(&store, &dir, &[])).await;
    let url = format!("{}v1/sessions/{id}", server.url());
    let response = http().delete(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let closed: colloquy_protocol::SessionClosed = response.json().await.unwrap();
    assert!(closed.history.iter().filter_map(|i| i.as_message()).any(|m| m.text == "Hi there."));
    let listed = list(&server).await.stored.unwrap();
    assert_eq!(listed[0].closed.as_deref(), Some("client_closed"));
    common::eventually("its number goes", || async { !dir.join(&id).exists() }).await;
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_the_restarted_server_never_knew_is_a_gap_not_silence() {
    let (store, dir) = (Arc::new(MemoryStore::new()), numbers("lost"));
    let first = serve(stored(&store, &dir, &["Hi there."])).await;
    let (id, last) = one_turn_then_shutdown(first).await;
    // The numbers are lost (a machine that crashed before they reached the disk).
    std::fs::remove_dir_all(&dir).unwrap();
    let server = serve(stored(&store, &dir, &[])).await;
    let mut client = connect(&server, &id, last).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Error(_))).await;
    let Some(ServerMessage::Error(gap)) = frames.last() else { unreachable!() };
    assert_eq!((gap.code, gap.oldest_seq), (ErrorCode::Gap, Some(1)), "{gap:?}");
    let next = client.until(|f| matches!(f, ServerMessage::Event { .. })).await;
    assert_eq!(seqs(&next), [1], "the stream goes on from the oldest held");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Without a store the list is the live sessions' alone, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_store_lists_no_stored_sessions() {
    let server = serve(common::builder()).await;
    start(&server).await;
    let (_, body) = get(&server, "/v1/sessions", &[]).await;
    assert!(!body.contains("stored"), "{body}");
    server.shutdown().await;
}
