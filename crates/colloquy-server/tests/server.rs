//! The server over real sockets on 127.0.0.1: a session started over HTTP, driven and watched
//! over its WebSocket, and every limit the protocol page promises.

mod common;

use colloquy_protocol::{ClosingReason, ErrorCode, Reply, ServerMessage};
use common::{Client, builder, is_event, seqs, serve, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_turn_over_the_websocket_streams_its_events_and_is_answered() {
    let server = serve(builder()).await;
    let started = start(&server).await;
    assert_eq!((started.agent.as_str(), started.node.as_deref()), ("demo", None));
    let mut client = Client::connect(&server, &started.session_id, 0).await;
    let Some(ServerMessage::Hello { v: 1, session_id, agent, node: None, .. }) =
        client.next().await
    else {
        panic!("the first frame is hello")
    };
    assert_eq!((session_id.as_str(), agent.as_str()), (started.session_id.as_str(), "demo"));
    client.send(r#"{"v":1,"id":1,"type":"user_turn","text":"start it"}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Reply { id: Some(1), .. })).await;
    let Some(ServerMessage::Reply { reply, .. }) = frames.last() else { unreachable!() };
    assert_eq!(reply, &Reply::Ok);
    // The session's first events came before the turn; all numbered from 1 without a hole.
    let frames = client.until(|f| is_event(f, "tool_call_updated")).await;
    let numbers = seqs(&frames);
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    client.send(r#"{"v":1,"id":2,"type":"cancel_tool_call","call_id":"c1"}"#).await;
    let (mut answered, mut ended) = (false, false);
    while !(answered && ended) {
        let frame = client.next().await.expect("the connection stays");
        answered |= matches!(frame, ServerMessage::Reply { id: Some(2), reply: Reply::Ok });
        ended |= is_event(&frame, "tool_call_ended");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_after_a_seq_gets_exactly_the_events_it_missed() {
    let server = serve(builder()).await;
    let id = start(&server).await.session_id;
    let mut first = Client::connect(&server, &id, 0).await;
    first.send(r#"{"v":1,"id":1,"type":"user_turn","text":"go"}"#).await;
    let seen = seqs(&first.until(|f| is_event(f, "tool_call_updated")).await);
    let last = *seen.last().unwrap();
    drop(first);
    let mut second = Client::connect(&server, &id, 2).await;
    let Some(ServerMessage::Hello { last_seq, .. }) = second.next().await else { panic!() };
    assert!(last_seq >= last);
    let again = seqs(
        &second.until(|f| matches!(f, ServerMessage::Event { seq, .. } if *seq == last)).await,
    );
    assert_eq!(again, (3..=last).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_gets_an_error_frame_and_the_connection_stays() {
    let server = serve(builder()).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    client.send("not json").await;
    client.send(r#"{"v":1,"id":7,"type":"dance"}"#).await;
    client.send(r#"{"v":9,"id":8,"type":"history"}"#).await;
    client.send(&format!(r#"{{"v":1,"id":9,"type":"say","text":"{}"}}"#, "a".repeat(70_000))).await;
    client.send(r#"{"v":1,"id":10,"type":"history"}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Reply { id: Some(10), .. })).await;
    let errors: Vec<(ErrorCode, Option<u64>)> = frames
        .iter()
        .filter_map(|f| match f {
            ServerMessage::Error(e) => Some((e.code, e.id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        [
            (ErrorCode::BadRequest, None),
            (ErrorCode::BadRequest, Some(7)),
            (ErrorCode::UnsupportedVersion, Some(8)),
            (ErrorCode::TooLarge, None),
        ]
    );
    let Some(ServerMessage::Reply { reply: Reply::History { .. }, .. }) = frames.last() else {
        panic!("{frames:#?}")
    };
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_closes_every_session_and_says_so_on_the_socket() {
    let server = serve(builder()).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    client.until(|f| matches!(f, ServerMessage::Hello { .. })).await;
    let stopping = tokio::spawn(server.shutdown());
    let frames = client.until(|f| matches!(f, ServerMessage::Closing { .. })).await;
    let closed = frames.iter().find(|f| is_event(f, "session_closed")).expect("session_closed");
    let ServerMessage::Event { event, .. } = closed else { unreachable!() };
    assert_eq!(serde_json::to_value(event).unwrap()["reason"], "server_shutdown");
    assert_eq!(
        frames.last(),
        Some(&ServerMessage::Closing { reason: ClosingReason::ServerShutdown })
    );
    assert_eq!(client.close_frame().await, Some((1001, "server_shutdown".into())));
    stopping.await.unwrap();
}
