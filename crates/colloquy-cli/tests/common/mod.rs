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
