//! The HTTP edge on real sockets on 127.0.0.1 and the real clock, every wait bounded: what
//! `/metrics` and `/healthz` answer, and that a slow or idle client, or a stop, cannot hold a
//! connection open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use colloquy_actors::Session;
use colloquy_llm::{ScriptedCall, ScriptedLlm, ScriptedResponse};
use colloquy_model::tool::NoArgs;
use colloquy_model::{Agent, FunctionTool, RunContext, ToolError};
use colloquy_ops::{
    Health, Metrics, OPENMETRICS_CONTENT_TYPE, OpsServer, ServeOptions, router, serve, serve_with,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What any single wait in these tests may take before the test fails.
const BOUND: Duration = Duration::from_secs(10);

fn client() -> reqwest::Client {
    // reqwest is built without a TLS provider; plain HTTP needs none, but building one does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(BOUND).build().expect("a client")
}

async fn start(
    health: impl Fn() -> Health + Send + Sync + 'static,
) -> (Metrics, SocketAddr, OpsServer) {
    let metrics = Metrics::new();
    let local = "127.0.0.1:0".parse().unwrap();
    let (addr, server) = serve(local, router(metrics.clone(), health)).await.expect("binds");
    (metrics, addr, server)
}

/// A session whose model calls a tool that answers, one that fails, and one it cancels.
async fn three_calls(metrics: &Metrics) {
    let quick = FunctionTool::new("quick", "Answers.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok::<_, ToolError>("yes")
    });
    let fail = FunctionTool::new("fail", "Fails.", |_ctx: RunContext, _: NoArgs| async {
        Err::<String, _>(ToolError::new("no"))
    });
    let slow = FunctionTool::new("slow", "Waits.", |_ctx: RunContext, _: NoArgs| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, ToolError>("late")
    })
    .cancellable();
    let calls = [("c1", "quick"), ("c2", "fail"), ("c3", "slow")]
        .map(|(id, name)| ScriptedCall::new(id, name, "{}"));
    let llm = ScriptedLlm::new([ScriptedResponse::calls(calls), ScriptedResponse::text("Done.")]);
    let agent = Agent::new("desk", "You help.").tool(quick).tool(fail).tool(slow);
    let session = Session::builder().llm(llm).start(agent).await.expect("starts");
    let watching = metrics.watch(&session);
    session.user_turn("go").await.unwrap();
    // `slow` is running once `quick` has ended: a cancel now finds it.
    let deadline = Instant::now() + BOUND;
    while !metrics.render().contains(r#"tool="quick",status="done"} 1"#) {
        assert!(Instant::now() < deadline, "quick ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    session.cancel_tool_call("c3").await.unwrap();
    tokio::time::timeout(BOUND, session.wait_for_idle()).await.unwrap().unwrap();
    session.close().await.unwrap();
    tokio::time::timeout(BOUND, watching).await.expect("the watch ended").unwrap();
}

#[tokio::test]
async fn metrics_are_read_over_http_with_the_openmetrics_type() {
    let (metrics, addr, server) = start(|| Health::Ready).await;
    three_calls(&metrics).await;
    let http = client();
    let response = http.get(format!("http://{addr}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap();
    assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
    let text = response.text().await.unwrap();
    for line in [
        r#"colloquy_tool_calls_ended_total{tool="quick",status="done"} 1"#,
        r#"colloquy_tool_calls_ended_total{tool="fail",status="error"} 1"#,
        r#"colloquy_tool_calls_ended_total{tool="slow",status="cancelled"} 1"#,
        r#"colloquy_tool_call_duration_seconds_count{tool="quick",status="done"} 1"#,
        r#"colloquy_sessions_closed_total{reason="close"} 1"#,
        "colloquy_sessions_started_total 1",
        "colloquy_sessions_live 0",
        "# TYPE colloquy_tool_call_duration_seconds histogram",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));

    let missing = http.get(format!("http://{addr}/nothing")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let posted = http.post(format!("http://{addr}/metrics")).send().await.unwrap();
    assert_eq!(posted.status(), 405);
    tokio::time::timeout(BOUND, server.stop()).await.expect("the server stopped");
}

#[tokio::test]
async fn healthz_is_ok_until_the_host_says_why_it_is_not() {
    let draining = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&draining);
    let health = move || match flag.load(Ordering::SeqCst) {
        false => Health::Ready,
        true => Health::not_ready("draining"),
    };
    let (_metrics, addr, server) = start(health).await;
    let http = client();
    let url = format!("http://{addr}/healthz");
    let ready = http.get(&url).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.text().await.unwrap(), "ok");
    draining.store(true, Ordering::SeqCst);
    let not_ready = http.get(&url).send().await.unwrap();
    assert_eq!(not_ready.status(), 503);
    assert_eq!(not_ready.text().await.unwrap(), "draining");
    tokio::time::timeout(BOUND, server.stop()).await.expect("the server stopped");
}

/// Reads until the peer closes the connection; panics past `BOUND`.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(BOUND, stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the server closed the connection within {BOUND:?}");
    String::from_utf8_lossy(&received).into_owned()
}

/// Sends `bytes` on a new connection and reads until the server closes it: what it answered,
/// and how long the close took from the send.
async fn send_until_closed(addr: SocketAddr, bytes: &[u8]) -> (String, Duration) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let began = Instant::now();
    let received = read_to_close(&mut stream).await;
    (received, began.elapsed())
}

fn quick_edges() -> ServeOptions {
    ServeOptions::default()
        .header_read_timeout(Duration::from_millis(300))
        .connection_timeout(Duration::from_secs(2))
        .shutdown_timeout(Duration::from_millis(300))
}

async fn start_with(options: ServeOptions) -> (SocketAddr, OpsServer) {
    let local = "127.0.0.1:0".parse().unwrap();
    serve_with(local, router(Metrics::new(), || Health::Ready), options).await.expect("binds")
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed() {
    let (addr, server) = start_with(quick_edges()).await;
    let (_, waited) = send_until_closed(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
    assert!(waited < Duration::from_millis(1500), "closed by the header timeout: {waited:?}");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let (addr, server) = start_with(quick_edges()).await;
    let (received, waited) =
        send_until_closed(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(received.starts_with("HTTP/1.1 200 OK\r\n"), "{received}");
    assert!(received.ends_with("\r\n\r\nok"), "{received}");
    assert!(waited < Duration::from_millis(1500), "closed by the header timeout: {waited:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_stop_closes_open_connections_and_the_port() {
    let (addr, server) =
        start_with(quick_edges().header_read_timeout(Duration::from_secs(30))).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    // The connection is accepted before the stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let began = Instant::now();
    tokio::time::timeout(BOUND, server.stop()).await.expect("the stop is bounded");
    assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());
    read_to_close(&mut idle).await;
    assert!(TcpStream::connect(addr).await.is_err(), "nothing listens after the stop");
}
