//! The bench's own nats-server: the pinned binary `scripts/install-nats.sh` puts in
//! `target/nats/`, with JetStream, on a free 127.0.0.1 port, its store in a temporary
//! directory; killed and the directory removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/install-nats.sh` installs the server, from this crate's sources.
pub(crate) const DEFAULT_BINARY: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/nats/nats-server");

/// How long the server may take to say which port it took.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct NatsServer {
    child: Child,
    binary: PathBuf,
    dir: PathBuf,
    url: String,
}

impl NatsServer {
    /// Starts `binary`; an error that says what to do when it is missing or does not start.
    pub(crate) fn start(binary: &Path) -> Result<Self, String> {
        if !binary.exists() {
            return Err(format!(
                "no nats-server at {}: run scripts/install-nats.sh (or pass --nats-server PATH)",
                binary.display()
            ));
        }
        let dir =
            std::env::temp_dir().join(format!("colloquy-cluster-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let setup = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir_all(&dir).map_err(setup)?;
        // The events stream reserves 1 GiB against JetStream's storage limit (by default three
        // quarters of the free disk, docs/cluster.md#subjects): a set limit keeps the bench
        // independent of the disk. Otherwise the server's defaults, as a user's would be.
        let config = dir.join("nats.conf");
        let limits = "max_file_store: 8GB, max_memory_store: 256MB";
        std::fs::write(&config, format!("jetstream {{ {limits} }}\n")).map_err(setup)?;
        let child = spawn(binary, &dir, "-1")?;
        let ports = dir.join(format!("nats-server_{}.ports", child.id()));
        let mut server = Self { child, binary: binary.to_owned(), dir, url: String::new() };
        server.url = wait_for_url(&ports)?;
        Ok(server)
    }

    /// Stops the server (SIGKILL) and starts it again on the same port and store, as a crash
    /// and a restart would: clients reconnect, the streams come back from the disk.
    pub(crate) fn restart(&mut self) -> Result<(), String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.url.rsplit(':').next().unwrap_or("-1").to_owned();
        self.child = spawn(&self.binary, &self.dir, &port)?;
        let ports = self.dir.join(format!("nats-server_{}.ports", self.child.id()));
        wait_for_url(&ports).map(drop)
    }

    /// `nats://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The CPU seconds (user + system) the server has used, from `/proc` in 10 ms ticks.
    pub(crate) fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        // The fields after the command's name (which may hold spaces), from the third on:
        // utime and stime are the 14th and 15th.
        let ticks = stat.ok().and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
            Some(field(14)? + field(15)?)
        });
        ticks.unwrap_or(0.0) / 100.0
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server on `port` (`-1`: a free one), its config, ports file, store and log in `dir`.
fn spawn(binary: &Path, dir: &Path, port: &str) -> Result<Child, String> {
    Command::new(binary)
        .arg("-c")
        .arg(dir.join("nats.conf"))
        .args(["-js", "-a", "127.0.0.1", "-p", port, "--ports_file_dir"])
        .arg(dir)
        .arg("--store_dir")
        .arg(dir.join("store"))
        .arg("-l")
        .arg(dir.join("server.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))
}

/// The client URL from the server's ports file, once it has written it.
fn wait_for_url(ports: &Path) -> Result<String, String> {
    let start = Instant::now();
    while start.elapsed() < READY_TIMEOUT {
        let text = std::fs::read_to_string(ports).unwrap_or_default();
        let url = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|ports| ports["nats"][0].as_str().map(str::to_owned));
        if let Some(url) = url {
            return Ok(url);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("nats-server wrote no ports file in {READY_TIMEOUT:?}"))
}
