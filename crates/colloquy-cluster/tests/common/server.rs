//! A real nats-server for the tests: the pinned binary `scripts/install-nats.sh` puts in
//! `target/nats/` (run on first use if it is missing), with JetStream, on a free 127.0.0.1
//! port, its store in a directory of its own; killed and its directory removed on drop. It can
//! be restarted on the same port and store, as a server that crashed and came back. Plain std,
//! so the CLI's tests include this file too.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the server may take to write its ports file.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct NatsServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    extra: Vec<String>,
    /// Lines added to the configuration file (an operator's trusted keys, say).
    config: String,
}

impl NatsServer {
    /// A server with JetStream.
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with JetStream and `extra` flags (`--auth TOKEN`).
    pub(crate) fn start_with(extra: &[&str]) -> Self {
        Self::start_configured("", extra)
    }

    /// A server with JetStream, `config` added to its configuration file, and `extra` flags.
    pub(crate) fn start_configured(config: &str, extra: &[&str]) -> Self {
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
            config: config.to_owned(),
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

    /// Kills it, leaves it down for `down`, then starts it again on the same port and store:
    /// an operator's restart, or a crash and a supervisor's.
    pub(crate) fn restart_after(&mut self, down: Duration) {
        self.kill();
        std::thread::sleep(down);
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
        let text = format!(
            "jetstream {{ max_file_store: 8GB, max_memory_store: 256MB }}\n{}",
            self.config
        );
        std::fs::write(&config, text).expect("the server's configuration");
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
        self.port = read_port(&file).unwrap_or_else(|| {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            panic!("nats-server wrote no ports file in {READY_TIMEOUT:?}; its log:\n{log}")
        });
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
fn read_port(file: &Path) -> Option<u16> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(ports) = serde_json::from_str::<serde_json::Value>(&text)
            && let Some(url) = ports["nats"][0].as_str()
            && let Some(port) = url.rsplit(':').next().and_then(|p| p.parse().ok())
        {
            return Some(port);
        }
        if start.elapsed() > READY_TIMEOUT {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
