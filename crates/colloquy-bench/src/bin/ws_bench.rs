//! `ws-bench`: user turns through colloquy-server's WebSocket against the same turns in
//! process (docs/benchmarks.md#websocket), then K sessions at once over WebSockets on loopback.
//!
//! The agent answers each turn with one scripted sentence (no tool: what is measured is the
//! way in and out). A turn is timed from the call (`SessionHandle::user_turn`, or the
//! `user_turn` frame sent) to its `speech_done` event (read from the session's event stream,
//! or the socket).
//!
//! 1. **One turn**: S turns of one WebSocket session alternating with S turns of a local
//!    session, after a few of warm-up; p50 and p99 of each.
//! 2. **K sessions**: K sessions started over HTTP, each attached by a WebSocket, T turns each,
//!    all starting together; turn latency, and the process's memory before the sessions, with
//!    them attached, and at its peak.
//!
//! Prints one JSON object; exit status 1 if a turn fails.
//!
//! ```sh
//! cargo run --release -p colloquy-bench --bin ws-bench -- --sessions 1000 --turns 5
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench_support::{Load, StartLine, latency_summary_ms, round, usage};
use colloquy::events::EventStream;
use colloquy::prelude::*;
use colloquy_protocol::{ServerMessage, SessionStarted};
use colloquy_server::{Server, ServerHandle};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns of the one-turn comparison not counted.
const WARMUP_TURNS: u32 = 10;
/// The longest one turn may take before the run is reported stuck.
const STUCK: Duration = Duration::from_secs(60);

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// User turns through colloquy-server's WebSocket against the same turns in process, then K
/// WebSocket sessions at once (docs/benchmarks.md#websocket).
#[derive(clap::Parser)]
#[command(name = "ws-bench")]
struct Args {
    #[command(flatten)]
    load: Load,
    /// Turns of the one-turn comparison, on each side.
    #[arg(long = "turn-samples", value_name = "S", default_value_t = 200)]
    turn_samples: u32,
}

fn agent() -> Agent {
    Agent::new("bench", "You answer in one sentence.")
}

fn llm() -> ScriptedLlm {
    // No model latency (the scripted default is 10 ms): what is timed is the way in and out.
    ScriptedLlm::new([]).with_fallback(|i, _| {
        ScriptedResponse::text(format!("Answer {i}, short.")).with_latency(Duration::ZERO)
    })
}

/// One WebSocket session: its socket and the request ids it used.
struct Remote {
    socket: Socket,
    next_id: u64,
}

impl Remote {
    async fn open(http: &reqwest::Client, server: &ServerHandle) -> Result<Self, String> {
        let started: SessionStarted = http
            .post(format!("{}v1/sessions", server.url()))
            .body(r#"{"v":1}"#)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let url = format!("ws://{}/v1/sessions/{}/ws", server.local_addr(), started.session_id);
        // Nagle off on the client's side too, as the server sets it on its own.
        // A small read buffer, as the server's, so the figure per session is not the client's.
        let config = WebSocketConfig::default().read_buffer_size(4 * 1024);
        let (socket, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { socket, next_id: 1 })
    }

    /// One turn: the frame sent, then frames read until the turn's `speech_done`.
    async fn turn(&mut self) -> Result<Duration, String> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = format!(r#"{{"v":1,"id":{id},"type":"user_turn","text":"Question {id}"}}"#);
        let start = Instant::now();
        self.socket.send(Message::text(frame)).await.map_err(|e| e.to_string())?;
        loop {
            let frame = tokio::time::timeout(STUCK, self.socket.next())
                .await
                .map_err(|_| "a turn over the WebSocket is stuck".to_owned())?;
            let Some(Ok(Message::Text(text))) = frame else {
                return Err(format!("the socket ended: {frame:?}"));
            };
            if let Ok(ServerMessage::Event { event, .. }) = ServerMessage::decode(&text)
                && matches!(event.kind, EventKind::SpeechDone { .. })
            {
                return Ok(start.elapsed());
            }
        }
    }
}

/// One turn of a local session, timed the same way.
async fn local_turn(session: &SessionHandle, events: &mut EventStream) -> Result<Duration, String> {
    let start = Instant::now();
    session.user_turn("Question").await.map_err(|e| e.to_string())?;
    loop {
        let event = tokio::time::timeout(STUCK, events.recv())
            .await
            .map_err(|_| "a local turn is stuck".to_owned())?
            .ok_or("the local session ended")?;
        if matches!(event.kind, EventKind::SpeechDone { .. }) {
            return Ok(start.elapsed());
        }
    }
}

fn summary(mut samples: Vec<f64>) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    latency_summary_ms(&samples)
}

async fn run(args: Args) -> Result<serde_json::Value, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sessions = args.load.sessions;
    let server = Server::builder()
        .llm(llm())
        .agent("bench", agent)
        .max_sessions(sessions + 1)
        .bind("127.0.0.1:0".parse().expect("an address"))
        .await
        .map_err(|e| e.to_string())?;
    let http = reqwest::Client::builder()
        .timeout(STUCK)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| e.to_string())?;

    // 1. One turn, alternating.
    let mut remote = Remote::open(&http, &server).await?;
    let mut builder = Session::builder().llm(llm());
    let mut events = builder.subscribe();
    let local = builder.start(agent()).await.map_err(|e| e.to_string())?;
    let (mut over_ws, mut in_process) = (Vec::new(), Vec::new());
    for turn in 0..WARMUP_TURNS + args.turn_samples {
        let ws = remote.turn().await?;
        let here = local_turn(&local, &mut events).await?;
        if turn >= WARMUP_TURNS {
            over_ws.push(ws.as_secs_f64());
            in_process.push(here.as_secs_f64());
        }
    }
    drop(remote);
    let _ = local.close().await;

    // 2. K sessions at once.
    let (_, rss_before, _) = usage();
    let mut remotes = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        remotes.push(Remote::open(&http, &server).await?);
    }
    let (_, rss_attached, _) = usage();
    let line = StartLine::new(sessions);
    let turns = args.load.turns;
    let mut tasks = Vec::with_capacity(sessions);
    for mut remote in remotes {
        let line = line.clone();
        tasks.push(tokio::spawn(async move {
            line.wait().await;
            let mut latencies = Vec::with_capacity(turns as usize);
            for _ in 0..turns {
                latencies.push(remote.turn().await?.as_secs_f64());
            }
            Ok::<_, String>(latencies)
        }));
    }
    line.ready.wait().await;
    let started = Instant::now();
    line.go.wait().await;
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|e| e.to_string())??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (_, rss_after, rss_peak) = usage();
    let turns_done = latencies.len();
    server.shutdown().await;
    let per_session_kib = (rss_attached - rss_before) * 1024.0 / sessions.max(1) as f64;
    Ok(json!({
        "one_turn": {
            "samples": args.turn_samples,
            "websocket_ms": summary(over_ws),
            "in_process_ms": summary(in_process),
        },
        "sessions": {
            "k": sessions,
            "turns_each": turns,
            "turns": turns_done,
            "turns_per_s": round(turns_done as f64 / elapsed, 1),
            "turn_latency_ms": summary(latencies),
            "rss_mib": {
                "before": round(rss_before, 1),
                "attached": round(rss_attached, 1),
                "after": round(rss_after, 1),
                "peak": round(rss_peak, 1),
            },
            "kib_per_attached_session": round(per_session_kib, 1),
        },
    }))
}

fn main() -> ExitCode {
    let (args, runtime) = match bench_support::start::<Args>() {
        Ok(started) => started,
        Err(code) => return code,
    };
    match runtime.block_on(run(args)) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ws-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
