//! What the CLI's process tests share: the `colloquy` binary with no provider settings from the
//! environment, and the replies a replay server streams.

#![allow(dead_code)] // each test binary uses its own part

use colloquy_replay::Reply;

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
