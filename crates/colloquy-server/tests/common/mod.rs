//! What the server's tests share: a server on 127.0.0.1 on the scripted model, plain HTTP
//! calls, and a WebSocket client that reads frames as the protocol's types. Real sockets, so
//! the real clock: every wait is bounded and a hang fails the test (docs/testing.md).

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, FunctionTool, RunContext, ToolError};
use colloquy_protocol::{ServerMessage, SessionStarted};
use colloquy_server::{Server, ServerBuilder, ServerHandle};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};

/// The longest wait for one frame or one answer.
pub const WAIT: Duration = Duration::from_secs(10);

/// An agent with a background tool, `slow`, that posts an update and then waits a minute
/// unless cancelled.
pub fn agent() -> Agent {
    let slow =
        FunctionTool::new("slow", "Takes a while.", |ctx: RunContext, _: NoArgs| async move {
            ctx.update("started").await?;
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, ToolError>("done")
        })
        .cancellable();
    Agent::new("demo", "You help.").tool(slow)
}

/// The model: a first reply that calls `slow`, then numbered replies.
pub fn llm() -> ScriptedLlm {
    ScriptedLlm::new([
        ScriptedResponse::text("Starting it.").with_call(ScriptedCall::new("c1", "slow", "{}")),
        ScriptedResponse::text("It runs in the background."),
    ])
}

/// The demo agent on the scripted model.
pub fn builder() -> ServerBuilder {
    Server::builder().llm(llm()).agent("demo", agent)
}

/// Binds on a free loopback port.
pub async fn serve(builder: ServerBuilder) -> ServerHandle {
    builder.bind("127.0.0.1:0".parse().unwrap()).await.expect("the server binds")
}

pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

/// `POST /v1/sessions` with `body`: the status and the JSON answer.
pub async fn post(
    server: &ServerHandle,
    body: &str,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut request = http()
        .post(format!("{}v1/sessions", server.url()))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Starts a session of the default agent.
pub async fn start(server: &ServerHandle) -> SessionStarted {
    let (status, body) = post(server, r#"{"v":1}"#, None).await;
    assert_eq!(status, 201, "{body}");
    serde_json::from_value(body).unwrap()
}

/// A session of the default agent and a client attached to it from its start, past `hello`.
pub async fn attached(server: &ServerHandle) -> Client {
    let id = start(server).await.session_id;
    let mut client = Client::connect(server, &id, 0).await;
    client.until(|f| matches!(f, ServerMessage::Hello { .. })).await;
    client
}

/// A WebSocket client.
pub struct Client {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

/// What a connection attempt ended with.
pub enum Attempt {
    Open(Box<Client>),
    Refused(u16, String),
}

impl Client {
    /// Attaches to session `id` after `after`, with extra headers.
    pub async fn try_connect(
        server: &ServerHandle,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Attempt {
        let url = format!("ws://{}{path}", server.local_addr());
        let mut request = url.into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let connecting = tokio_tungstenite::connect_async(request);
        match tokio::time::timeout(WAIT, connecting).await.expect("the upgrade is answered") {
            Ok((socket, _)) => Attempt::Open(Box::new(Self { socket })),
            Err(tungstenite::Error::Http(response)) => {
                let body =
                    response.body().clone().map(|b| String::from_utf8_lossy(&b).into_owned());
                Attempt::Refused(response.status().as_u16(), body.unwrap_or_default())
            }
            Err(e) => panic!("the upgrade failed: {e}"),
        }
    }

    /// Attaches to session `id`, reading events after `after`.
    pub async fn connect(server: &ServerHandle, id: &str, after: u64) -> Self {
        match Self::try_connect(server, &format!("/v1/sessions/{id}/ws?after={after}"), &[]).await {
            Attempt::Open(client) => *client,
            Attempt::Refused(status, body) => panic!("refused: {status} {body}"),
        }
    }

    pub async fn send(&mut self, text: &str) {
        self.socket.send(Message::text(text)).await.expect("the frame is sent");
    }

    /// Sends a frame; `false` if the socket is closed.
    pub async fn try_send(&mut self, text: &str) -> bool {
        self.socket.send(Message::text(text)).await.is_ok()
    }

    pub async fn send_message(&mut self, message: Message) {
        self.socket.send(message).await.expect("the frame is sent");
    }

    /// The next frame: `None` once the server closed the socket.
    pub async fn next(&mut self) -> Option<ServerMessage> {
        loop {
            let frame = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("a frame within the bound");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return Some(
                        ServerMessage::decode(&text)
                            .unwrap_or_else(|e| panic!("an unreadable frame {text}: {e}")),
                    );
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// Reads frames until one matches; every frame read, that one last.
    pub async fn until(
        &mut self,
        mut wanted: impl FnMut(&ServerMessage) -> bool,
    ) -> Vec<ServerMessage> {
        let mut seen = Vec::new();
        loop {
            let frame = self.next().await.unwrap_or_else(|| panic!("closed before: {seen:#?}"));
            let done = wanted(&frame);
            seen.push(frame);
            if done {
                return seen;
            }
        }
    }

    /// The close frame's code and reason, reading past other frames.
    pub async fn close_frame(&mut self) -> Option<(u16, String)> {
        loop {
            let frame =
                tokio::time::timeout(WAIT, self.socket.next()).await.expect("closed in time");
            match frame {
                Some(Ok(Message::Close(frame))) => {
                    return frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                }
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }
}

/// The sequence numbers of the event frames among `frames`.
pub fn seqs(frames: &[ServerMessage]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            ServerMessage::Event { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect()
}

/// Whether `frame` is the event of type `kind` (its serde name).
pub fn is_event(frame: &ServerMessage, kind: &str) -> bool {
    match frame {
        ServerMessage::Event { event, .. } => serde_json::to_value(event).unwrap()["type"] == kind,
        _ => false,
    }
}

impl Client {
    /// Attaches with a receive buffer of a few KiB, so the socket fills fast when the test
    /// stops reading.
    pub async fn connect_small(server: &ServerHandle, id: &str) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = socket.connect(server.local_addr()).await.unwrap();
        let url = format!("ws://{}/v1/sessions/{id}/ws", server.local_addr());
        let connecting =
            tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(stream));
        let (socket, _) = tokio::time::timeout(WAIT, connecting).await.unwrap().unwrap();
        Self { socket }
    }
}

impl Client {
    /// Attaches to session `id` from the local address `from` (`127.0.0.2`: another client to
    /// the server, still on the loopback interface).
    pub async fn connect_from(server: &ServerHandle, id: &str, from: &str) -> Attempt {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let stream = socket.connect(server.local_addr()).await.unwrap();
        let url = format!("ws://{}/v1/sessions/{id}/ws", server.local_addr());
        let connecting =
            tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(stream));
        match tokio::time::timeout(WAIT, connecting).await.expect("the upgrade is answered") {
            Ok((socket, _)) => Attempt::Open(Box::new(Self { socket })),
            Err(tungstenite::Error::Http(response)) => {
                let body =
                    response.body().clone().map(|b| String::from_utf8_lossy(&b).into_owned());
                Attempt::Refused(response.status().as_u16(), body.unwrap_or_default())
            }
            Err(e) => panic!("the upgrade failed: {e}"),
        }
    }
}

/// `GET` a path: the status and the body.
pub async fn get(server: &ServerHandle, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = http().get(format!("{}{}", server.url(), path.trim_start_matches('/')));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The live sessions, as `GET /v1/sessions` lists them.
pub async fn sessions(server: &ServerHandle) -> colloquy_protocol::SessionList {
    let (status, body) = get(server, "/v1/sessions", &[]).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Polls `check` every 20 ms until it holds, at most [`WAIT`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
