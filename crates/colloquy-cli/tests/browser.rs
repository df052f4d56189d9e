//! The playground page in a real browser: `colloquy serve --provider scripted` on 127.0.0.1
//! (a port the system picks) and tests/browser/playground.mjs driving Debian's chromium
//! through playwright-core. scripts/install-browser.sh installs both (`.ci/run` runs it, and
//! the test runs it once if either is missing); the test fails, saying so, when they are
//! still missing. Screenshots land in target/browser/.
//! Real processes and sockets: the real clock, every wait bounded.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the server may take to print its URL.
const START_BOUND: Duration = Duration::from_secs(20);
/// How long the whole browser script may take: chromium's start, about ten seconds of
/// scripted conversation, and each of its own waits bounded at 15 s.
const BROWSER_BOUND: Duration = Duration::from_secs(150);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace")
}

/// What the browser script needs and is not here, each with how to get it.
fn missing_prerequisites(root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let chromium =
        std::env::var_os("CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    if !chromium.is_file() {
        missing.push(format!("chromium at {}", chromium.display()));
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        missing.push("node (Debian's nodejs)".into());
    }
    if !root.join("tests/browser/node_modules/playwright-core/package.json").is_file() {
        missing.push("playwright-core under tests/browser/node_modules".into());
    }
    missing
}

/// What is still missing after scripts/install-browser.sh ran, if anything was (once per test
/// process, as the NATS tests install their server).
fn installed(root: &Path) -> Vec<String> {
    static INSTALL: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut tried = INSTALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !*tried && !missing_prerequisites(root).is_empty() {
        *tried = true;
        let script = root.join("scripts/install-browser.sh");
        let status = std::process::Command::new("bash").arg(&script).status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("{} failed", script.display());
        }
    }
    missing_prerequisites(root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_talks_cancels_approves_and_rejects_in_chromium() {
    let screenshots = workspace().join("target/browser");
    play(&[], None, None, &screenshots).await;
    for name in ["playground-light.png", "playground-dark.png"] {
        let shot = screenshots.join(name);
        assert!(shot.is_file(), "no screenshot {}", shot.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_asks_for_the_token_a_server_requires() {
    // The page learns from a 401; its WebSocket carries the token as a subprotocol.
    let token = "playground-test-token";
    let screenshots = workspace().join("target/browser/token");
    play(&["--token-env", "PLAYGROUND_TOKEN"], Some(token), None, &screenshots).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_redraws_the_conversation_from_the_history_after_a_gap() {
    // A session keeping 5 events: a reload after one exchange starts with a `gap`.
    let screenshots = workspace().join("target/browser/gap");
    play(&["--replay-events", "5"], None, Some("gap"), &screenshots).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playground_shows_thinking_markdown_a_spent_budget_and_keeps_refused_text() {
    // The script relays the page's socket: it holds frames back (a model thinking for seconds),
    // splits a reply (a stream) and adds the budget event the scripted model never causes.
    let screenshots = workspace().join("target/browser/signals");
    play(&[], None, Some("signals"), &screenshots).await;
}

/// Serves the scripted agent (its weather tool waiting for approval, so the page's approve and
/// reject buttons are tested) with `extra` flags and `token` in `PLAYGROUND_TOKEN` for both
/// processes, and runs the browser script against it (`mode` in `PLAYGROUND_MODE`: its other
/// script); fails with what both printed.
async fn play(extra: &[&str], token: Option<&str>, mode: Option<&str>, screenshots: &Path) {
    let root = workspace();
    let missing = installed(&root);
    assert!(
        missing.is_empty(),
        "the browser test cannot run: missing {}. Run scripts/install-browser.sh (it installs \
         Debian's chromium and the pinned playwright-core).",
        missing.join(", ")
    );

    let mut serve = common::colloquy();
    serve.args(["serve", "--provider", "scripted", "--addr", "127.0.0.1:0"]);
    serve.args(["--require-approval", "get_weather"]).args(extra);
    serve.env_remove("PLAYGROUND_TOKEN");
    if let Some(token) = token {
        serve.env("PLAYGROUND_TOKEN", token);
    }
    let mut server = common::spawn(serve);
    let (url, mut server_out) = drain(server.stdout.take().expect("stdout is piped"));
    let mut server_err = drain(server.stderr.take().expect("stderr is piped")).1;
    let url = tokio::time::timeout(START_BOUND, url)
        .await
        .unwrap_or_else(|_| panic!("colloquy serve printed no URL within {START_BOUND:?}"))
        .unwrap_or_else(|_| panic!("colloquy serve ended without printing its URL"));

    let mut script = tokio::process::Command::new("node");
    script
        .arg(root.join("tests/browser/playground.mjs"))
        .arg(&url)
        .arg(screenshots)
        .current_dir(root.join("tests/browser"))
        .env_remove("PLAYGROUND_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own: on a timeout, chromium goes with it.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(token) = token {
        script.env("PLAYGROUND_TOKEN", token);
    }
    script.env_remove("PLAYGROUND_MODE");
    if let Some(mode) = mode {
        script.env("PLAYGROUND_MODE", mode);
    }
    let child = script.spawn().expect("node starts");
    let group = Pid::from_raw(-(child.id().expect("a running child has an id") as i32));
    let out = match tokio::time::timeout(BROWSER_BOUND, child.wait_with_output()).await {
        Ok(out) => out.expect("node ran"),
        Err(_) => {
            let _ = kill(group, Signal::SIGKILL);
            panic!("the browser script did not finish within {BROWSER_BOUND:?}");
        }
    };
    let _ = server.start_kill();
    let _ = server.wait().await;
    let printed =
        format!("{}{}", collected(&mut server_out).await, collected(&mut server_err).await);
    assert!(
        out.status.success(),
        "the browser script failed ({}):\n{}\n{}\nthe server printed:\n{printed}\n(a screenshot \
         of the page at the failure is in {})",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        screenshots.display()
    );
}

/// Reads a stream of the server's to its end (a pipe left unread would block the server once
/// full): the first `http://…` word it prints (the page's address) comes back at once, all it
/// printed when the task ends.
fn drain(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> (tokio::sync::oneshot::Receiver<String>, tokio::task::JoinHandle<String>) {
    let (url, found) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut url = Some(url);
        let mut all = String::new();
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(word) = line.split_whitespace().find(|w| w.starts_with("http://"))
                && let Some(url) = url.take()
            {
                let _ = url.send(word.trim_end_matches(['.', ',', ')', ':']).to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (found, task)
}

/// What a drained stream held (the stream ends with its process).
async fn collected(task: &mut tokio::task::JoinHandle<String>) -> String {
    tokio::time::timeout(START_BOUND, task).await.ok().and_then(Result::ok).unwrap_or_default()
}
