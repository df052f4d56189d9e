//! A real nats-server for the tests: the pinned binary `scripts/install-nats.sh` puts in
//! `target/nats/` (run on first use if it is missing), with JetStream, on a free 127.0.0.1
//! port, its store in a directory of its own; killed and its directory removed on drop. It can
//! be restarted on the same port and store, as a server that crashed and came back. And what
//! the tests share: an agent, a scripted model, bounded waits, the raw events of a session.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The bound on anything a test waits for.
pub(crate) const BOUND: Duration = Duration::from_secs(15);
/// When the loss tests' nodes are lost: at 1 s a loaded machine misses enough heartbeats for
/// a healthy node to fence itself.
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(2);
/// What a loaded machine may add to `lost_after` before a loss is seen.
pub(crate) const MARGIN: Duration = Duration::from_secs(2);
/// A call that fails without a request: far under a command's 5 s bound.
pub(crate) const AT_ONCE: Duration = Duration::from_millis(500);
/// What the scripted model answers.
pub(crate) const REPLY: &str = "Your order ships tomorrow.";

pub(crate) fn support() -> colloquy_core::Agent {
    colloquy_core::Agent::new("support", "You help with orders.")
}

pub(crate) fn llm() -> colloquy_llm::ScriptedLlm {
    colloquy_llm::ScriptedLlm::new([])
        .with_fallback(|_, _| colloquy_llm::ScriptedResponse::text(REPLY))
}

/// A node named `name` on the server at `url` with the `support` agent and the scripted model.
pub(crate) fn node_builder(url: &str, name: &str) -> colloquy_cluster::NodeBuilder {
    colloquy_cluster::Node::builder().nats(url).name(name).agent("support", support).llm(llm())
}

/// Every message stored on session `id`'s events subject, as JSON, read past any reader's
/// end (a reader stops at `session_closed` or `x_node_lost`).
pub(crate) async fn raw_events(url: &str, id: &str) -> Vec<serde_json::Value> {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    use futures_util::StreamExt;
    let client = async_nats::connect(url).await.expect("a raw connection");
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream(colloquy_cluster::EVENTS_STREAM).await.expect("the events stream");
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: format!("colloquy.events.{id}"),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut all = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
        let Ok(Some(Ok(message))) = next else { break };
        all.push(serde_json::from_slice(&message.payload).expect("JSON"));
        if message.info().expect("info").pending == 0 {
            break;
        }
    }
    all
}

/// The type of a raw event message: an event's (`session_closed`…) or a marker's
/// (`x_node_lost`).
pub(crate) fn raw_type(message: &serde_json::Value) -> &str {
    message["event"]["type"].as_str().or_else(|| message["type"].as_str()).unwrap_or("?")
}

/// How long the server may take to write its ports file.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct NatsServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    extra: Vec<String>,
}

impl NatsServer {
    /// A server with JetStream.
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with JetStream and `extra` flags (`--auth TOKEN`).
    pub(crate) fn start_with(extra: &[&str]) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("colloquy-nats-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory for nats-server");
        let mut server = Self {
            child: None,
            dir,
            port: 0,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        server.spawn();
        server
    }

    /// `nats://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (as a crash would).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let binary = binary();
        let ports = self.dir.join("ports");
        let _ = std::fs::remove_dir_all(&ports);
        std::fs::create_dir_all(&ports).expect("the ports directory");
        let port = if self.port == 0 { "-1".to_owned() } else { self.port.to_string() };
        // JetStream refuses a stream whose byte limit exceeds its storage limit, by default
        // three quarters of the free disk: a set limit keeps the tests independent of the disk
        // (they store a few kilobytes).
        let config = self.dir.join("nats.conf");
        std::fs::write(&config, "jetstream { max_file_store: 8GB, max_memory_store: 256MB }\n")
            .expect("the server's configuration");
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config)
            .args(["-js", "-a", "127.0.0.1", "-p", &port])
            .arg("--ports_file_dir")
            .arg(&ports)
            .arg("--store_dir")
            .arg(self.dir.join("store"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let file = ports.join(format!("nats-server_{}.ports", child.id()));
        self.child = Some(child);
        self.port = read_port(&file);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The pinned binary, installed by `scripts/install-nats.sh` on first use (once per test
/// process), or a failure that says how to get it.
fn binary() -> PathBuf {
    static INSTALL: OnceLock<Result<(), String>> = OnceLock::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("target/nats/nats-server");
    let installed = INSTALL.get_or_init(|| {
        if path.exists() {
            return Ok(());
        }
        let output = Command::new(root.join("scripts/install-nats.sh"))
            .output()
            .map_err(|e| format!("cannot run it: {e}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        output.status.success().then_some(()).ok_or_else(|| format!("it failed: {stderr}"))
    });
    if let Err(why) = installed {
        panic!("nats-server not found at {}: run scripts/install-nats.sh ({why})", path.display());
    }
    assert!(
        path.exists(),
        "nats-server not found at {}: run scripts/install-nats.sh",
        path.display()
    );
    path
}

/// The client port from the server's ports file, waiting for the file a bounded time.
fn read_port(file: &Path) -> u16 {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(ports) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(url) = ports["nats"][0].as_str()
            && let Some(port) = url.rsplit(':').next().and_then(|p| p.parse().ok())
        {
            return port;
        }
        assert!(
            start.elapsed() < READY_TIMEOUT,
            "nats-server wrote no ports file in {READY_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `check` until it returns `Some`, every 20 ms, for at most `bound`.
pub(crate) async fn eventually<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
