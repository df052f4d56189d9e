//! The server over real sockets on 127.0.0.1: a session started over HTTP, driven and watched
//! over its WebSocket, and every limit the protocol page promises.

mod common;

use std::sync::Arc;
use std::time::Duration;

use colloquy_llm::{ScriptedLlm, ScriptedResponse};
use colloquy_model::Agent;
use colloquy_protocol::{AgentList, ClosingReason, ErrorCode, Reply, ServerMessage};
use colloquy_server::{
    Backend, Limits, Server, ServerHandle, SessionDriver, StartedSession, StreamItem,
};
use common::{
    Attempt, Client, attached, builder, eventually, get, http, is_event, post, seqs, serve,
    sessions, start,
};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

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
async fn in_process_a_reply_comes_after_the_events_before_it() {
    let llm = ScriptedLlm::new([])
        .with_fallback(|n, _| ScriptedResponse::text(format!("Reply number {n}.")));
    let builder = Server::builder().llm(llm).agent("plain", || Agent::new("plain", "You help."));
    let server = serve(builder).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    for round in 1..=30u64 {
        let (turn, idle) = (2 * round, 2 * round + 1);
        let replied = |id: u64| move |f: &ServerMessage| matches!(f, ServerMessage::Reply { id: Some(i), .. } if *i == id);
        client
            .send(&format!(r#"{{"v":1,"id":{turn},"type":"user_turn","text":"hi {round}"}}"#))
            .await;
        // Requests run concurrently: the wait is sent once the session has taken the turn.
        let mut frames = client.until(replied(turn)).await;
        assert!(frames.iter().any(|f| is_event(f, "speech_created")), "round {round}");
        client.send(&format!(r#"{{"v":1,"id":{idle},"type":"wait_for_idle"}}"#)).await;
        frames.extend(client.until(replied(idle)).await);
        let states: Vec<String> = frames
            .iter()
            .filter(|f| is_event(f, "agent_state"))
            .map(|f| {
                let ServerMessage::Event { event, .. } = f else { unreachable!() };
                serde_json::to_value(event).unwrap()["state"].as_str().unwrap().to_owned()
            })
            .collect();
        // This turn's states all came before its `wait_for_idle` reply, `listening` last.
        assert!(states.iter().any(|s| s == "thinking"), "round {round}: {states:?}");
        assert_eq!(states.last().map(String::as_str), Some("listening"), "round {round}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_gets_a_close_frame_back() {
    let server = serve(builder()).await;
    let mut client = attached(&server).await;
    let bye = CloseFrame { code: CloseCode::Normal, reason: "bye".into() };
    client.send_message(Message::Close(Some(bye))).await;
    // The closing handshake completes: a close frame comes back before the TCP close.
    assert_eq!(client.close_frame().await.map(|(code, _)| code), Some(1000));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_closes_every_session_and_says_so_on_the_socket() {
    let server = serve(builder()).await;
    let mut client = attached(&server).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_no_longer_held_give_a_gap_and_the_stream_goes_on_from_the_oldest() {
    let server = serve(builder().replay_events(5)).await;
    let id = start(&server).await.session_id;
    // A buffer this small may drop events before a client's writer takes them: such a
    // client is let go as too slow, and asks again from where the session is.
    let mut asked = false;
    loop {
        let last = sessions(&server).await.sessions[0].last_seq;
        let mut client = Client::connect(&server, &id, last).await;
        let reply = async |client: &mut Client, id: u64| loop {
            match client.next().await {
                Some(ServerMessage::Reply { id: Some(got), .. }) if got == id => break true,
                Some(_) => {}
                None => break false,
            }
        };
        if !asked {
            // Requests run concurrently: the turn is taken before the wait for idle is asked.
            client.send(r#"{"v":1,"id":1,"type":"user_turn","text":"go"}"#).await;
            asked = true;
            if !reply(&mut client, 1).await {
                continue;
            }
        }
        client.send(r#"{"v":1,"id":2,"type":"wait_for_idle"}"#).await;
        let idle = reply(&mut client, 2).await;
        if idle {
            break;
        }
    }
    // Nothing happens now until the minute-long call ends.
    let mut late = Client::connect(&server, &id, 1).await;
    let Some(ServerMessage::Hello { last_seq: last, .. }) = late.next().await else { panic!() };
    assert!(last > 6, "{last}");
    let frames =
        late.until(|f| matches!(f, ServerMessage::Event { seq, .. } if *seq == last)).await;
    let ServerMessage::Error(gap) = &frames[0] else { panic!("{frames:#?}") };
    assert_eq!(gap.code, ErrorCode::Gap);
    assert_eq!(gap.oldest_seq, Some(last - 4));
    assert_eq!(seqs(&frames), (last - 4..=last).collect::<Vec<_>>());
    // Attaching after an event the session never had is refused before the upgrade.
    let path = format!("/v1/sessions/{id}/ws?after=99999");
    let Attempt::Refused(400, body) = Client::try_connect(&server, &path, &[]).await else {
        panic!("expected a refusal")
    };
    assert!(body.contains("bad_request"), "{body}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_query_or_method_is_answered_in_the_protocol_s_words() {
    let server = serve(builder()).await;
    let id = start(&server).await.session_id;
    for (query, says) in [("-1", "`after` must be a non-negative integer"), ("x", "`after` must")] {
        let path = format!("/v1/sessions/{id}/ws?after={query}");
        let Attempt::Refused(400, body) = Client::try_connect(&server, &path, &[]).await else {
            panic!("expected a refusal")
        };
        let error: ServerMessage = ServerMessage::decode(&body).unwrap();
        let ServerMessage::Error(error) = error else { panic!("{body}") };
        assert_eq!(error.code, ErrorCode::BadRequest);
        assert!(error.message.contains(says), "{body}");
    }
    let path = format!("/v1/sessions/{id}/ws?after=99999");
    let Attempt::Refused(400, body) = Client::try_connect(&server, &path, &[]).await else {
        panic!("expected a refusal")
    };
    assert!(body.contains("is past the session's last event"), "{body}");
    // A route asked with a method it does not take: the error body, and what it takes.
    let response = http().post(format!("{}v1/sessions/{id}", server.url())).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let allow = response.headers().get("allow").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(allow.as_deref(), Some("DELETE"));
    let body = response.text().await.unwrap();
    let Ok(ServerMessage::Error(error)) = ServerMessage::decode(&body) else { panic!("{body}") };
    assert_eq!(error.code, ErrorCode::MethodNotAllowed);
    // A typo in the start body and in a request frame are both refused.
    let (status, body) = post(&server, r#"{"v":1,"agnet":"demo"}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")), "{body}");
    let mut client = Client::connect(&server, &id, 0).await;
    client.send(r#"{"v":1,"id":3,"type":"history","limit":5}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Error(_))).await;
    let Some(ServerMessage::Error(error)) = frames.last() else { unreachable!() };
    assert_eq!((error.code, error.id), (ErrorCode::BadRequest, Some(3)));
    assert!(error.message.contains("unknown field `limit`"), "{}", error.message);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_hard_limit_closes_the_socket_with_1009() {
    let mut limits = Limits::default();
    limits.max_frame_bytes_hard = 128 * 1024;
    let server = serve(builder().limits(limits)).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    client.next().await;
    // The server may drop the socket before the whole frame is written: the close frame is
    // what counts.
    client.try_send(&"x".repeat(200 * 1024)).await;
    let closed = client.close_frame().await;
    assert_eq!(closed, Some((1009, "message too big".into())));
    assert_eq!(sessions(&server).await.sessions.len(), 1, "the session lives on");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_session_is_a_404_on_every_route() {
    let server = serve(builder()).await;
    let Attempt::Refused(404, body) =
        Client::try_connect(&server, "/v1/sessions/nope/ws", &[]).await
    else {
        panic!("expected a refusal")
    };
    assert!(body.contains(r#""code":"unknown_session""#), "{body}");
    let response = http().delete(format!("{}v1/sessions/nope", server.url())).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let (status, _) = get(&server, "/v1/nothing", &[]).await;
    assert_eq!(status, 404);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_on_the_api_from_a_header_or_a_subprotocol() {
    let server = serve(builder().token("s3cret")).await;
    let (status, body) = post(&server, r#"{"v":1}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    assert!(!body.to_string().contains("s3cret"));
    let (status, _) = post(&server, r#"{"v":1}"#, Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, body) = post(&server, r#"{"v":1}"#, Some("s3cret")).await;
    assert_eq!(status, 201);
    let id = body["session_id"].as_str().unwrap().to_owned();
    // The page itself needs no token: it learns from a 401 that it must ask for one.
    assert_eq!(get(&server, "/", &[]).await.0, 200);
    assert_eq!(get(&server, "/v1/agents", &[]).await.0, 401);
    let path = format!("/v1/sessions/{id}/ws");
    assert!(matches!(Client::try_connect(&server, &path, &[]).await, Attempt::Refused(401, _)));
    let wrong = [("sec-websocket-protocol", "colloquy.v1, colloquy.bearer.nope")];
    assert!(matches!(Client::try_connect(&server, &path, &wrong).await, Attempt::Refused(401, _)));
    let right = [("sec-websocket-protocol", "colloquy.v1, colloquy.bearer.s3cret")];
    let Attempt::Open(mut client) = Client::try_connect(&server, &path, &right).await else {
        panic!("the subprotocol's token opens the socket")
    };
    assert!(matches!(client.next().await, Some(ServerMessage::Hello { .. })));
    let header = [("authorization", "Bearer s3cret")];
    assert!(matches!(Client::try_connect(&server, &path, &header).await, Attempt::Open(_)));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_take_the_token_the_api_takes_and_a_probe_does_not() {
    let server = serve(builder().token("s3cret").metrics(colloquy_ops::Metrics::new())).await;
    let (status, body) = get(&server, "/metrics", &[]).await;
    assert_eq!(status, 401);
    assert!(!body.contains("colloquy_"), "no figure without the token: {body}");
    assert_eq!(get(&server, "/metrics", &[("authorization", "Bearer wrong")]).await.0, 401);
    let (status, body) = get(&server, "/metrics", &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(status, 200);
    assert!(body.contains("colloquy_sessions_started_total 0"), "{body}");
    assert_eq!(get(&server, "/healthz", &[]).await, (200, "ok".to_owned()));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_a_browser_cannot_send_is_refused_at_bind() {
    for bad in ["", "two words", "a,b", "naïve"] {
        for addr in ["127.0.0.1:0", "0.0.0.0:0"] {
            let bound = builder().token(bad).bind(addr.parse().unwrap()).await;
            let Err(e) = bound else { panic!("{bad:?} on {addr} was taken") };
            assert!(matches!(e, colloquy_server::BindError::InvalidToken), "{e}");
            assert!(bad.is_empty() || !e.to_string().contains(bad), "{e}");
        }
    }
    let server = serve(builder().token("A-z_0.9~")).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_from_another_origin_is_refused_unless_allowed() {
    let server = serve(builder().allow_origin("https://app.example")).await;
    let own = format!("http://{}", server.local_addr());
    assert_eq!(get(&server, "/v1/agents", &[("origin", &own)]).await.0, 200);
    assert_eq!(get(&server, "/v1/agents", &[("origin", "https://app.example")]).await.0, 200);
    let (status, body) = get(&server, "/v1/agents", &[("origin", "http://evil.example")]).await;
    assert_eq!(status, 403);
    assert!(body.contains("forbidden_origin"), "{body}");
    // A page of the allowed origin calls from its own: the browser's preflight is answered,
    // and so is the call, naming the origin.
    let preflight = http()
        .request(reqwest::Method::OPTIONS, format!("{}v1/sessions", server.url()))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = |r: &reqwest::Response| {
        r.headers().get("access-control-allow-origin").map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(allowed(&preflight).as_deref(), Some("https://app.example"));
    let call = http()
        .post(format!("{}v1/sessions", server.url()))
        .header("origin", "https://app.example")
        .body(r#"{"v":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(call.status().as_u16(), 201);
    assert_eq!(allowed(&call).as_deref(), Some("https://app.example"));
    let id = start(&server).await.session_id;
    let path = format!("/v1/sessions/{id}/ws");
    let evil = [("origin", "http://evil.example")];
    assert!(matches!(Client::try_connect(&server, &path, &evil).await, Attempt::Refused(403, _)));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_rebound_host_name_is_refused() {
    let server = serve(builder().allow_origin("https://app.example")).await;
    let port = server.local_addr().port();
    let rebound = format!("evil.example:{port}");
    // A page of evil.example whose name now points at 127.0.0.1 is same-origin with itself.
    let page = format!("http://{rebound}");
    let (status, body) = get(&server, "/v1/agents", &[("host", &rebound), ("origin", &page)]).await;
    assert_eq!(status, 403);
    assert!(body.contains(r#""code":"forbidden_host""#), "{body}");
    assert_eq!(get(&server, "/v1/agents", &[("host", &rebound)]).await.0, 403);
    for good in [format!("localhost:{port}"), format!("[::1]:{port}"), "app.example".to_owned()] {
        assert_eq!(get(&server, "/v1/agents", &[("host", &good)]).await.0, 200, "{good}");
    }
    let id = start(&server).await.session_id;
    let path = format!("/v1/sessions/{id}/ws");
    let host = [("host", rebound.as_str())];
    assert!(matches!(Client::try_connect(&server, &path, &host).await, Attempt::Refused(403, _)));
    // The page holds no secret: it is served whatever the name.
    assert_eq!(get(&server, "/", &[("host", &rebound)]).await.0, 200);
    server.shutdown().await;
    // With a token the name does not matter: the page's visitor does not hold the token.
    let server = serve(builder().token("s3cret")).await;
    let rebound = format!("evil.example:{}", server.local_addr().port());
    let (status, _) = get(&server, "/v1/agents", &[("host", &rebound)]).await;
    assert_eq!(status, 401);
    let authorized = [("host", rebound.as_str()), ("authorization", "Bearer s3cret")];
    assert_eq!(get(&server, "/v1/agents", &authorized).await.0, 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origins_are_read_once_and_a_wildcard_is_refused() {
    for bad in ["*", "app.example", "https://app.example/path", "null"] {
        let bound = builder().allow_origin(bad).bind("127.0.0.1:0".parse().unwrap()).await;
        let Err(e) = bound else { panic!("{bad} was taken") };
        assert!(matches!(e, colloquy_server::BindError::InvalidOrigin { .. }), "{e}");
        assert!(e.to_string().contains(bad), "{e}");
    }
    // Case and a default port do not matter, for the origin check and CORS alike.
    let server = serve(builder().allow_origin("HTTPS://App.Example:443/")).await;
    for origin in ["https://app.example", "https://APP.example:443"] {
        let preflight = http()
            .request(reqwest::Method::OPTIONS, format!("{}v1/sessions", server.url()))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
            .await
            .unwrap();
        let named = preflight.headers().get("access-control-allow-origin");
        assert_eq!(named.and_then(|v| v.to_str().ok()), Some(origin), "{origin}");
        assert_eq!(get(&server, "/v1/agents", &[("origin", origin)]).await.0, 200, "{origin}");
    }
    assert_eq!(get(&server, "/v1/agents", &[("origin", "https://app.example:8443")]).await.0, 403);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_over_the_limit_is_a_503_until_one_closes() {
    let server = serve(builder().max_sessions(1)).await;
    let first = start(&server).await;
    let (status, body) = post(&server, r#"{"v":1}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("too_many_sessions")));
    let url = format!("{}v1/sessions/{}", server.url(), first.session_id);
    let closed = http().delete(url).send().await.unwrap();
    assert_eq!(closed.status().as_u16(), 200);
    let closed: colloquy_protocol::SessionClosed = closed.json().await.unwrap();
    assert_eq!(closed.session_id, first.session_id);
    eventually("the closed session leaves", || async {
        sessions(&server).await.sessions.is_empty()
    })
    .await;
    start(&server).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_on_the_servers_own_port_and_count_its_sessions() {
    let server = serve(builder().metrics(colloquy_ops::Metrics::new())).await;
    let started = start(&server).await;
    let mut client = Client::connect(&server, &started.session_id, 0).await;
    client.send(r#"{"v":1,"id":1,"type":"user_turn","text":"start it"}"#).await;
    client.until(|f| is_event(f, "tool_call_started")).await;
    let url = format!("{}v1/sessions/{}", server.url(), started.session_id);
    assert_eq!(http().delete(url).send().await.unwrap().status().as_u16(), 200);
    let response = http().get(format!("{}metrics", server.url())).send().await.unwrap();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert_eq!(content_type, colloquy_ops::OPENMETRICS_CONTENT_TYPE);
    let text = response.text().await.unwrap();
    assert!(text.lines().any(|l| l == "colloquy_sessions_started_total 1"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with(r#"colloquy_tool_calls_started_total{tool="slow"} 1"#)),
        "{text}"
    );
    eventually("the closed session is counted", || async {
        let (_, text) = get(&server, "/metrics", &[]).await;
        text.lines().any(|l| l == r#"colloquy_sessions_closed_total{reason="client_closed"} 1"#)
    })
    .await;
    assert_eq!(get(&server, "/healthz", &[]).await, (200, "ok".to_owned()));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_health_and_page_answer() {
    let server = serve(builder().agent("other", common::agent)).await;
    let (status, body) = get(&server, "/v1/agents", &[]).await;
    assert_eq!((status, body.as_str()), (200, r#"{"agents":["demo","other"],"default":"demo"}"#));
    assert_eq!(get(&server, "/healthz", &[]).await, (200, "ok".to_owned()));
    // Without `ServerBuilder::metrics`, no `/metrics`.
    assert_eq!(get(&server, "/metrics", &[]).await.0, 404);
    assert!(get(&server, "/assets/index.html", &[]).await.1.contains("<html"));
    assert_eq!(get(&server, "/assets/nope.js", &[]).await.0, 404);
    let (status, body) = post(&server, r#"{"v":1,"agent":"other"}"#, None).await;
    assert_eq!((status, body["agent"].as_str()), (201, Some("other")));
    let (status, body) = post(&server, r#"{"v":1,"agent":"ghost"}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_agent")));
    let (status, body) = post(&server, r#"{"v":2}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("unsupported_version")));
    let (status, body) = post(&server, "{", None).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")));
    let listed = sessions(&server).await.sessions;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].agent.as_str(), listed[0].clients), ("other", 0));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_nobody_attaches_to_closes_as_client_gone() {
    let server = serve(builder().idle_session(Duration::from_millis(300))).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    client.next().await;
    // Attached: the session waits however long.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sessions(&server).await.sessions.len(), 1);
    drop(client);
    eventually("the session closes", || async { sessions(&server).await.sessions.is_empty() })
        .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_in_flight_bound_are_answered_busy() {
    let server = serve(builder().max_in_flight(1)).await;
    let id = start(&server).await.session_id;
    let mut client = Client::connect(&server, &id, 0).await;
    client.send(r#"{"v":1,"id":1,"type":"user_turn","text":"go"}"#).await;
    client.until(|f| is_event(f, "tool_call_updated")).await;
    // `wait_for_quiet` waits for the minute-long call: it holds the one place.
    client.send(r#"{"v":1,"id":2,"type":"wait_for_quiet"}"#).await;
    client.send(r#"{"v":1,"id":3,"type":"history"}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Reply { id: Some(3), .. })).await;
    let Some(ServerMessage::Reply { reply: Reply::Error(e), .. }) = frames.last() else {
        panic!("{frames:#?}")
    };
    assert_eq!(e.kind, colloquy_protocol::ErrorKind::Busy);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_and_the_session_lives_on() {
    // The client is let go once the events it has not read leave the session's buffer.
    let builder = builder().max_unread_frames(16).max_in_flight(10_000).replay_events(500);
    let server = serve(builder.slow_client_grace(Duration::from_millis(300))).await;
    let id = start(&server).await.session_id;
    let mut slow = Client::connect_small(&server, &id).await;
    // Some 1,500 speeches of 4 KiB: about 10,000 frames and 12 MB the client does not read.
    let say = format!(r#"{{"v":1,"type":"say","text":"{}"}}"#, "word ".repeat(800));
    for _ in 0..1500 {
        if !slow.try_send(&say).await {
            break; // let go already
        }
    }
    eventually("the slow client is let go", || async {
        sessions(&server).await.sessions.first().is_some_and(|s| s.clients == 0)
    })
    .await;
    let mut read = Vec::new();
    while let Some(frame) = slow.next().await {
        read.push(frame);
    }
    assert!(!read.iter().any(|f| is_event(f, "session_closed")));
    if let Some(ServerMessage::Closing { reason }) = read.last() {
        assert_eq!(*reason, ClosingReason::SlowClient);
    }
    // A reconnect goes on from the next event, or says which ones are gone: never a silent
    // loss. The session may still be speaking fast enough to outrun a buffer this small: a
    // client let go again asks again.
    let mut last = seqs(&read).last().copied().unwrap_or(0);
    'attempts: loop {
        let mut again = Client::connect(&server, &id, last).await;
        let mut gap = None;
        while let Some(frame) = again.next().await {
            match frame {
                ServerMessage::Error(e) if e.code == ErrorCode::Gap => gap = e.oldest_seq,
                ServerMessage::Event { seq, .. } => {
                    assert!(seq == last + 1 || gap == Some(seq), "{seq} after {last}, {gap:?}");
                    break 'attempts;
                }
                _ => {}
            }
        }
        last = gap.map_or(last, |oldest| oldest - 1);
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_catching_up_on_a_long_backlog_is_answered_and_kept() {
    let server = serve(builder().max_unread_frames(8)).await;
    let id = start(&server).await.session_id;
    let mut first = Client::connect(&server, &id, 0).await;
    for _ in 0..30 {
        first.send(r#"{"v":1,"type":"say","text":"Some news."}"#).await;
    }
    first.send(r#"{"v":1,"id":99,"type":"wait_for_idle"}"#).await;
    first.until(|f| matches!(f, ServerMessage::Reply { id: Some(99), .. })).await;
    let last = sessions(&server).await.sessions[0].last_seq;
    assert!(last > 8 * 10, "a backlog many times the queue: {last}");
    // Requests sent at once, as the page's `inspect` does, while the queue is full of the
    // backlog: they are answered, and the client is not let go.
    let mut late = Client::connect(&server, &id, 0).await;
    for id in 1..=5 {
        late.send(&format!(r#"{{"v":1,"id":{id},"type":"inspect"}}"#)).await;
    }
    let (mut replies, mut caught_up) = (0, false);
    let frames = late
        .until(|f| {
            let snapshot = matches!(f, ServerMessage::Reply { reply: Reply::Snapshot { .. }, .. });
            replies += usize::from(snapshot);
            caught_up |= matches!(f, ServerMessage::Event { seq, .. } if *seq == last);
            replies == 5 && caught_up || matches!(f, ServerMessage::Closing { .. })
        })
        .await;
    assert!(matches!(frames[0], ServerMessage::Hello { .. }), "{:?}", frames[0]);
    assert!(!frames.iter().any(|f| matches!(f, ServerMessage::Closing { .. })), "{frames:#?}");
    assert_eq!(seqs(&frames), (1..=last).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_answers_no_ping_is_dropped_and_one_that_reads_stays() {
    let builder = builder().pings(Duration::from_millis(50), Duration::from_millis(300));
    let server = serve(builder).await;
    let id = start(&server).await.session_id;
    // A client reading its socket answers pings by itself; a silent one never reads.
    let mut reading = Client::connect(&server, &id, 0).await;
    let _silent = Client::connect(&server, &id, 0).await;
    let reader = tokio::spawn(async move { while reading.next().await.is_some() {} });
    eventually("the silent client is dropped", || async {
        sessions(&server).await.sessions[0].clients == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(sessions(&server).await.sessions[0].clients, 1, "the reading one stays");
    server.shutdown().await;
    reader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slow_to_send_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = serve(builder().header_read_timeout(Duration::from_millis(200))).await;
    let mut stream = tokio::net::TcpStream::connect(server.local_addr()).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(common::WAIT, stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the server closes the connection");
    server.shutdown().await;
}

/// A backend whose one session's events are fed by the test.
struct Fed {
    events: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<StreamItem>>>,
    driver: Arc<Recorder>,
}

impl Fed {
    fn new() -> (Self, tokio::sync::mpsc::UnboundedSender<StreamItem>, Arc<Recorder>) {
        let (feed, events) = tokio::sync::mpsc::unbounded_channel();
        let driver = Arc::new(Recorder::default());
        let fed = Self { events: std::sync::Mutex::new(Some(events)), driver: Arc::clone(&driver) };
        (fed, feed, driver)
    }
}

/// A session that answers `ok`, records the reasons it was asked to close with, and fails
/// the first `failing` closes as unreachable (or as `kind`).
#[derive(Default)]
struct Recorder {
    closes: std::sync::Mutex<Vec<String>>,
    failing: std::sync::atomic::AtomicUsize,
    kind: std::sync::Mutex<Option<colloquy_protocol::ErrorKind>>,
}

impl Recorder {
    fn closes(&self) -> Vec<String> {
        self.closes.lock().unwrap().clone()
    }
}

impl SessionDriver for Recorder {
    fn execute(&self, request: colloquy_protocol::Request) -> BoxFuture<'static, Reply> {
        use std::sync::atomic::Ordering;
        let colloquy_protocol::Command::Close { reason } = request.command else {
            return std::future::ready(Reply::Ok).boxed();
        };
        self.closes.lock().unwrap().push(reason);
        let failing = self.failing.load(Ordering::SeqCst);
        let reply = if failing > 0 {
            self.failing.store(failing - 1, Ordering::SeqCst);
            let kind =
                self.kind.lock().unwrap().unwrap_or(colloquy_protocol::ErrorKind::Unavailable);
            Reply::Error(colloquy_protocol::ProtocolError::new(kind, "node unreachable"))
        } else {
            Reply::Closed { history: Vec::new() }
        };
        std::future::ready(reply).boxed()
    }
}

impl Backend for Fed {
    fn agents(&self) -> BoxFuture<'static, Result<AgentList, colloquy_protocol::ServerError>> {
        let list = AgentList { agents: vec!["fed".into()], default: Some("fed".into()) };
        std::future::ready(Ok(list)).boxed()
    }

    fn start(
        &self,
        agent: String,
        _: colloquy_protocol::StartOptions,
    ) -> BoxFuture<'static, Result<StartedSession, colloquy_protocol::ServerError>> {
        let events = self.events.lock().unwrap().take().expect("one session");
        let events = futures_util::stream::unfold(events, |mut events| async move {
            events.recv().await.map(|item| (item, events))
        });
        let started = StartedSession {
            session_id: "fed-1".into(),
            agent,
            node: Some("n1".into()),
            driver: Arc::clone(&self.driver) as Arc<dyn SessionDriver>,
            events: events.boxed(),
        };
        std::future::ready(Ok(started)).boxed()
    }
}

fn listening() -> StreamItem {
    StreamItem::Event(
        serde_json::from_str(r#"{"at_ms":0,"type":"agent_state","state":"listening"}"#).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_lost_on_the_way_skip_their_numbers_and_are_a_gap() {
    let (backend, feed, _) = Fed::new();
    let server = serve(colloquy_server::Server::builder().backend(backend)).await;
    let id = start(&server).await.session_id;
    for item in [listening(), StreamItem::Lost { count: 3 }, listening()] {
        feed.send(item).unwrap();
    }
    eventually("the events are in", || async { sessions(&server).await.sessions[0].last_seq == 5 })
        .await;
    for after in [0, 2] {
        let mut client = Client::connect(&server, &id, after).await;
        let frames = client.until(|f| matches!(f, ServerMessage::Event { seq: 5, .. })).await;
        let gap = frames.iter().find_map(|f| match f {
            ServerMessage::Error(e) if e.code == ErrorCode::Gap => e.oldest_seq,
            _ => None,
        });
        assert_eq!(gap, Some(5), "{frames:#?}");
        let expected: &[u64] = if after == 0 { &[1, 5] } else { &[5] };
        assert_eq!(seqs(&frames), expected);
    }
    drop(feed);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_buffer_keeps_the_newest_events_within_its_bytes() {
    let (backend, feed, _) = Fed::new();
    // Two frames of `listening` fit; three do not.
    let frame =
        r#"{"type":"event","seq":1,"event":{"at_ms":0,"type":"agent_state","state":"listening"}}"#;
    let builder = colloquy_server::Server::builder().backend(backend).replay_bytes(frame.len() * 2);
    let server = serve(builder).await;
    let id = start(&server).await.session_id;
    for _ in 0..3 {
        feed.send(listening()).unwrap();
    }
    eventually("the events are in", || async { sessions(&server).await.sessions[0].last_seq == 3 })
        .await;
    let mut client = Client::connect(&server, &id, 0).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Event { seq: 3, .. })).await;
    assert!(
        matches!(&frames[1], ServerMessage::Error(e) if e.oldest_seq == Some(2)),
        "{frames:#?}"
    );
    assert_eq!(seqs(&frames), [2, 3]);
    drop(feed);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_takes_so_many_clients_and_the_server_so_many_connections() {
    let server = serve(builder().max_clients_per_session(1).max_connections(2)).await;
    let id = start(&server).await.session_id;
    let path = format!("/v1/sessions/{id}/ws");
    let mut first = Client::connect(&server, &id, 0).await;
    first.next().await;
    let Attempt::Refused(503, body) = Client::try_connect(&server, &path, &[]).await else {
        panic!("a second client is refused")
    };
    assert!(body.contains(r#""code":"too_many_clients""#), "{body}");
    // Two silent HTTP connections hold the two places; a third connection waits until one
    // ends.
    let silent = || tokio::net::TcpStream::connect(server.local_addr());
    let (one, _two) = (silent().await.unwrap(), silent().await.unwrap());
    let url = format!("{}healthz", server.url());
    let waiting = tokio::spawn(async move { http().get(url).send().await.map(|r| r.status()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "answered past the bound on connections");
    drop(one);
    let status = tokio::time::timeout(common::WAIT, waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(status.as_u16(), 200);
    // The place the first client left is free for another client of its session.
    drop(first);
    eventually("the first client leaves", || async {
        matches!(Client::try_connect(&server, &path, &[]).await, Attempt::Open(_))
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_take_no_place_of_plain_requests_and_one_client_has_so_many() {
    let builder = builder().max_connections(2).max_websockets_per_client(2);
    let server = serve(builder).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let id = start(&server).await.session_id;
        let mut client = Client::connect(&server, &id, 0).await;
        client.next().await;
        held.push(client);
    }
    // Two WebSockets open, as many as the HTTP connections' places: requests still come in.
    let (status, body) = get(&server, "/healthz", &[]).await;
    assert_eq!(status, 200, "{body}");
    let id = start(&server).await.session_id;
    let path = format!("/v1/sessions/{id}/ws");
    let Attempt::Refused(429, body) = Client::try_connect(&server, &path, &[]).await else {
        panic!("a third WebSocket of one client is refused")
    };
    let Ok(ServerMessage::Error(refused)) = ServerMessage::decode(&body) else { panic!("{body}") };
    assert_eq!(refused.code, ErrorCode::TooManyConnections, "{body}");
    assert!(refused.message.contains("maximum of 2 WebSockets"), "{body}");
    // Another client, from another address, has places of its own.
    let Attempt::Open(mut other) = Client::connect_from(&server, &id, "127.0.0.2").await else {
        panic!("another client attaches")
    };
    assert!(matches!(other.next().await, Some(ServerMessage::Hello { .. })));
    // A socket closed gives its place back.
    drop(held.pop());
    eventually("the place is given back", || async {
        matches!(Client::try_connect(&server, &path, &[]).await, Attempt::Open(_))
    })
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = serve(builder().body_timeout(Duration::from_millis(200))).await;
    let mut stream = tokio::net::TcpStream::connect(server.local_addr()).await.unwrap();
    let head = "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                Content-Length: 100\r\n\r\n{\"v\":";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(common::WAIT, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server answers and closes");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive within 200 ms"), "{answer}");
    assert!(sessions(&server).await.sessions.is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_events_end_unclosed_is_closed_before_it_is_let_go() {
    let (backend, feed, driver) = Fed::new();
    let server = serve(colloquy_server::Server::builder().backend(backend)).await;
    start(&server).await;
    feed.send(listening()).unwrap();
    drop(feed);
    eventually("the session leaves", || async { sessions(&server).await.sessions.is_empty() })
        .await;
    assert_eq!(driver.closes(), [colloquy_server::EVENTS_ENDED]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_close_that_fails_is_tried_again() {
    let (backend, feed, driver) = Fed::new();
    driver.failing.store(2, std::sync::atomic::Ordering::SeqCst);
    let builder = colloquy_server::Server::builder().backend(backend);
    let server = serve(builder.idle_session(Duration::from_millis(100))).await;
    start(&server).await;
    eventually("the third close", || async { driver.closes().len() == 3 }).await;
    // The session answered `closed`: its last event comes, and no close is asked again.
    let closed = r#"{"at_ms":0,"type":"session_closed","reason":"client_gone"}"#;
    feed.send(StreamItem::Event(serde_json::from_str(closed).unwrap())).unwrap();
    drop(feed);
    eventually("the session leaves", || async { sessions(&server).await.sessions.is_empty() })
        .await;
    assert_eq!(driver.closes(), [colloquy_server::CLIENT_GONE; 3]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_says_why_a_session_did_not_close() {
    use colloquy_protocol::ErrorKind;
    let (backend, feed, driver) = Fed::new();
    let server = serve(colloquy_server::Server::builder().backend(backend)).await;
    let id = start(&server).await.session_id;
    let delete = || async {
        let response = http().delete(format!("{}v1/sessions/{id}", server.url())).send().await;
        let response = response.unwrap();
        let status = response.status().as_u16();
        (status, response.json::<serde_json::Value>().await.unwrap())
    };
    for (kind, status, code) in [
        (ErrorKind::Unavailable, 503, "unavailable"),
        (ErrorKind::Spawn, 500, "close_failed"),
        (ErrorKind::Closed, 404, "unknown_session"),
    ] {
        *driver.kind.lock().unwrap() = Some(kind);
        driver.failing.store(1, std::sync::atomic::Ordering::SeqCst);
        let (got, body) = delete().await;
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    }
    let (got, body) = delete().await;
    assert_eq!(got, 200, "{body}");
    drop(feed);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_hook_sees_the_agent_and_the_metadata_a_client_sent() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let builder = builder().session(move |session, start| {
        record.lock().unwrap().push(start.clone());
        session
    });
    let server = serve(builder).await;
    let body = r#"{"v":1,"agent":"demo","options":{"metadata":{"customer":"c-42"}}}"#;
    assert_eq!(post(&server, body, None).await.0, 201);
    assert_eq!(post(&server, r#"{"v":1}"#, None).await.0, 201);
    let seen = seen.lock().unwrap().clone();
    let metadata: Vec<_> =
        seen.iter().map(|start| (start.agent.as_str(), &start.metadata)).collect();
    let customer = serde_json::json!({"customer": "c-42"});
    assert_eq!(metadata, [("demo", &customer), ("demo", &serde_json::Value::Null)]);
    server.shutdown().await;
}

fn event(json: &str) -> StreamItem {
    StreamItem::Event(serde_json::from_str(json).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_to_close_waits_for_the_session_s_last_events() {
    let (backend, feed, driver) = Fed::new();
    let server = serve(colloquy_server::Server::builder().backend(backend)).await;
    let id = start(&server).await.session_id;
    let mut closer = Client::connect(&server, &id, 0).await;
    let mut other = Client::connect(&server, &id, 0).await;
    closer.next().await;
    other.next().await;
    closer.send(r#"{"v":1,"id":1,"type":"close","reason":"done"}"#).await;
    eventually("the session is asked to close", || async { driver.closes().len() == 1 }).await;
    // The session has answered `closed`, and its last events have yet to come: a request sent
    // now is answered while that answer waits for them.
    closer.send(r#"{"v":1,"id":2,"type":"history"}"#).await;
    let early = closer.until(|f| matches!(f, ServerMessage::Reply { id: Some(2), .. })).await;
    let closed = |f: &ServerMessage| matches!(f, ServerMessage::Reply { id: Some(1), .. });
    assert!(!early.iter().any(closed), "`closed` before the last events: {early:#?}");
    let ended = r#"{"at_ms":5,"type":"tool_call_ended","id":"c1","call_id":"c1","status":"cancelled","message":null}"#;
    feed.send(event(ended)).unwrap();
    feed.send(event(r#"{"at_ms":5,"type":"session_closed","reason":"done"}"#)).unwrap();
    drop(feed);
    let frames = closer.until(|f| matches!(f, ServerMessage::Closing { .. })).await;
    let at = |wanted: &dyn Fn(&ServerMessage) -> bool| frames.iter().position(wanted);
    let order = [
        at(&|f| is_event(f, "tool_call_ended")),
        at(&|f| is_event(f, "session_closed")),
        at(&closed),
        at(&|f| matches!(f, ServerMessage::Closing { .. })),
    ];
    assert!(order.iter().all(Option::is_some), "{frames:#?}");
    assert!(order.is_sorted(), "{frames:#?}");
    let frames = other.until(|f| matches!(f, ServerMessage::Closing { .. })).await;
    assert_eq!(seqs(&frames), [1, 2], "{frames:#?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_every_client_gets_the_last_events_before_closed() {
    // Every session's turn starts the background call.
    let llm = ScriptedLlm::new([]).with_fallback(|_, request| {
        let last = request.items.items().last().map(|item| &**item);
        match last {
            Some(colloquy_model::ChatItem::Message(m)) if m.role == colloquy_model::Role::User => {
                ScriptedResponse::text("Starting it.")
                    .with_call(colloquy_llm::ScriptedCall::new("c1", "slow", "{}"))
            }
            _ => ScriptedResponse::text("It runs in the background."),
        }
    });
    let server = serve(Server::builder().llm(llm).agent("demo", common::agent)).await;
    for round in 0..20 {
        let id = start(&server).await.session_id;
        let mut closer = Client::connect(&server, &id, 0).await;
        let mut other = Client::connect(&server, &id, 0).await;
        closer.send(r#"{"v":1,"id":1,"type":"user_turn","text":"go"}"#).await;
        // The background call runs: the close ends it, one of the session's last events.
        closer.until(|f| is_event(f, "tool_call_updated")).await;
        closer.send(r#"{"v":1,"id":2,"type":"close","reason":"done"}"#).await;
        for client in [&mut closer, &mut other] {
            let frames = client.until(|f| matches!(f, ServerMessage::Closing { .. })).await;
            let last = frames.iter().rposition(|f| is_event(f, "session_closed"));
            let ended = frames.iter().rposition(|f| is_event(f, "tool_call_ended"));
            let reply =
                frames.iter().position(|f| matches!(f, ServerMessage::Reply { id: Some(2), .. }));
            assert!(last.is_some() && ended < last, "round {round}: {frames:#?}");
            assert!(reply.is_none_or(|reply| reply > last.unwrap()), "round {round}: {frames:#?}");
        }
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_may_not_be_framed_or_sniffed() {
    let server = serve(builder()).await;
    for path in ["", "assets/index.html", "assets/app.js"] {
        let response = http().get(format!("{}{path}", server.url())).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "/{path}");
        let header =
            |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(header("x-frame-options").as_deref(), Some("DENY"), "/{path}");
        let policy = header("content-security-policy");
        assert_eq!(policy.as_deref(), Some("frame-ancestors 'none'"), "/{path}");
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"), "/{path}");
    }
    server.shutdown().await;
}

/// A history item's JSON: `kind` and its own fields, with `id` and `created_at.micros`.
fn item(kind: &str, id: &str, micros: u64, fields: serde_json::Value) -> serde_json::Value {
    let mut item =
        serde_json::json!({"type": kind, "id": id, "created_at": {"micros": micros, "seq": 0}});
    item.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    item
}

fn message(id: &str, micros: u64, role: &str) -> serde_json::Value {
    item("message", id, micros, serde_json::json!({"role": role, "text": "hi"}))
}

fn call(id: &str, micros: u64, call_id: &str) -> serde_json::Value {
    let fields = serde_json::json!({"call_id": call_id, "name": "slow", "arguments": "{}"});
    item("function_call", id, micros, fields)
}

fn output(id: &str, micros: u64, call_id: &str) -> serde_json::Value {
    let fields = serde_json::json!({"call_id": call_id, "name": "slow", "output": "done",
                                    "is_error": false, "reply_required": false});
    item("function_call_output", id, micros, fields)
}

fn handoff(id: &str, micros: u64, to: &str) -> serde_json::Value {
    item("agent_handoff", id, micros, serde_json::json!({"old_agent": null, "new_agent": to}))
}

/// Starts a session with `history`: the status and the answer.
async fn start_with(
    server: &ServerHandle,
    history: &[serde_json::Value],
) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"v": 1, "options": {"history": history}});
    post(server, &body.to_string(), None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_is_taken_only_as_a_session_could_have_written_it() {
    let helper = || Agent::new("assistant", "You help.");
    let server = serve(builder().agent("helper", helper)).await;
    // A conversation moved from elsewhere: a handoff names an agent by its id or its name.
    let good = [
        handoff("h1", 1, "assistant"),
        message("m1", 2, "user"),
        message("m2", 3, "assistant"),
        call("m2/fnc_0", 3, "c1"),
        output("o1", 4, "c1"),
        handoff("h2", 5, "helper"),
    ];
    let (status, body) = start_with(&server, &good).await;
    assert_eq!(status, 201, "{body}");
    // Past ten years of session time.
    let far = 315_576_000_000_001;
    let refused: [(Vec<serde_json::Value>, &str); 9] = [
        (
            vec![message("m1", 1, "user"), message("m1", 2, "user")],
            "[1] (id `m1`): its id is also options.history[0]",
        ),
        (vec![message("m1", 1, "system")], "[0] (id `m1`): a `system` message"),
        (vec![message("m1", 1, "developer")], "[0] (id `m1`): a `developer` message"),
        (
            vec![message("m1", 1, "user"), call("c", 2, "c1")],
            "[1] (id `c`): a function call without its output",
        ),
        (
            vec![output("o", 2, "c1"), message("m1", 3, "user")],
            "[0] (id `o`): a function call output without its call",
        ),
        (
            vec![call("c", 1, "c1"), call("d", 1, "c1"), output("o", 2, "c1")],
            "[1] (id `d`): its call_id `c1`",
        ),
        (vec![handoff("h", 1, "ghost")], "[0] (id `h`): a handoff to `ghost`"),
        (
            vec![message("m1", far, "user"), message("m2", far + 1, "user")],
            "[0] (id `m1`): created_at.micros",
        ),
        (
            vec![message("m1", 5, "user"), message("m2", 4, "user")],
            "[1] (id `m2`): its created_at is before",
        ),
    ];
    for (history, says) in refused {
        let (status, body) = start_with(&server, &history).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")), "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(&format!("options.history{says}")), "{says}: {message}");
    }
    assert_eq!(sessions(&server).await.sessions.len(), 1, "no refused history started");
    server.shutdown().await;
    // A server may take instructions in a history.
    let server = serve(builder().history_instructions(true)).await;
    let (status, body) = start_with(&server, &[message("m1", 1, "system")]).await;
    assert_eq!(status, 201, "{body}");
    server.shutdown().await;
}
