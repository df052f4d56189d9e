//! What the CLI's process tests share: the `colloquy` binary with no provider settings from the
//! environment, running it on piped input, and the replies a replay server streams.

#![allow(dead_code)] // each test binary uses its own part

use std::process::Stdio;
use std::time::Duration;

use colloquy_replay::Reply;
use tokio::io::AsyncWriteExt;

/// The `colloquy` binary, its provider settings cleared so the test's flags alone decide.
pub(crate) fn colloquy() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_colloquy"));
    for name in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "COLLOQUY_MODEL",
        "RUST_LOG",
    ] {
        command.env_remove(name);
    }
    command
}

/// What a finished process wrote, and its exit code.
pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Starts `command` with its standard streams piped; the process is killed if dropped.
pub(crate) fn spawn(command: std::process::Command) -> tokio::process::Child {
    tokio::process::Command::from(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts")
}

/// Runs `command` with `input` on its standard input, to its end (at most `bound`).
pub(crate) async fn piped(command: std::process::Command, input: &str, bound: Duration) -> Output {
    let mut child = spawn(command);
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // A command that refuses to start (a wrong token) may exit before it reads its input.
    if let Err(e) = stdin.write_all(input.as_bytes()).await {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "stdin takes the input: {e}");
    }
    drop(stdin);
    let out = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("colloquy did not finish within {bound:?}"))
        .expect("colloquy ran");
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// An OpenAI stream: `text` in one chunk, then, after `pause_ms` (0: none), ` …and more.`
pub(crate) fn streamed(text: &str, pause_ms: u64) -> Reply {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let mut sse = chunk(serde_json::json!({"role": "assistant", "content": text}), None);
    if pause_ms > 0 {
        sse.push_str(&format!(": pause {pause_ms}\n\n"));
        sse.push_str(&chunk(serde_json::json!({"content": " …and more."}), None));
    }
    sse.push_str(&chunk(serde_json::json!({}), Some("stop")));
    sse.push_str("data: [DONE]\n\n");
    Reply::sse(&sse)
}

/// Runs `colloquy ARGS` with `input` on stdin and no provider variables set.
pub(crate) async fn run(args: &[&str], input: &str) -> Output {
    let mut command = colloquy();
    command.args(args);
    piped(command, input, Duration::from_secs(30)).await
}

/// Checks that `expected` appear in this order. Lines of one source keep their order: the
/// agent's text and the commands' output (one causal chain), or the event lines (another
/// task); callers check each source on its own.
pub(crate) fn assert_lines_in_order(stdout: &str, expected: &[&str]) {
    let mut rest = stdout;
    for line in expected {
        match rest.find(line) {
            Some(at) => rest = &rest[at + line.len()..],
            None => panic!("`{line}` missing (or out of order) in:\n{stdout}"),
        }
    }
}

/// A `colloquy` process driven line by line through pipes, its output read as it comes.
pub(crate) struct Driven {
    pub(crate) child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::process::ChildStdout,
    seen: Vec<u8>,
}

impl Driven {
    pub(crate) async fn start(args: &[&str]) -> Self {
        let mut child = tokio::process::Command::from(colloquy())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        Self { child, stdin, stdout, seen: Vec::new() }
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    pub(crate) async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).await.expect("stdin takes the line");
    }

    pub(crate) fn close_input(&mut self) {
        self.stdin = None;
    }

    /// Reads until `text` has been written (at most 20 s).
    pub(crate) async fn wait_for(&mut self, text: &str) {
        self.wait_for_n(text, 1).await;
    }

    /// Reads until `text` has been written `n` times (at most 20 s).
    pub(crate) async fn wait_for_n(&mut self, text: &str, n: usize) {
        use tokio::io::AsyncReadExt;
        let reading = async {
            let mut buffer = [0u8; 1024];
            while self.text().matches(text).count() < n {
                let n = self.stdout.read(&mut buffer).await.expect("stdout is readable");
                assert!(n > 0, "stdout closed before `{text}`:\n{}", self.text());
                self.seen.extend_from_slice(&buffer[..n]);
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), reading).await.is_err() {
            panic!("`{text}` not written within 20 s:\n{}", self.text());
        }
    }

    /// Waits (at most 20 s) for the process to end: its exit code and all it wrote.
    pub(crate) async fn end(mut self) -> (Option<i32>, String) {
        use tokio::io::AsyncReadExt;
        let rest = async {
            self.stdout.read_to_end(&mut self.seen).await.expect("stdout is readable");
            self.child.wait().await.expect("the chat ran")
        };
        let status = tokio::time::timeout(Duration::from_secs(20), rest).await;
        let status = status.unwrap_or_else(|_| panic!("the chat did not end within 20 s"));
        (status.code(), self.text())
    }
}
