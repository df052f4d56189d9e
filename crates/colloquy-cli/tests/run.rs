//! `colloquy run`: the trace on stdout, or exit status 2 and nothing on stdout for a bad file.

use std::process::Command;

fn colloquy(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_colloquy")).args(args).output().expect("the binary runs")
}

fn scenario(name: &str) -> String {
    format!("{}/../../tests/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn run_prints_the_committed_trace() {
    let out = colloquy(&["run", &scenario("c01_sync_tool_returning_a_string.json")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected =
        std::fs::read_to_string(scenario("traces/c01_sync_tool_returning_a_string.json")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
}

#[test]
fn a_bad_file_exits_2_with_nothing_on_stdout() {
    let dir = std::env::temp_dir().join(format!("colloquy-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"agents": {"A": {}}, "session": {"agent": "A"}, "stepz": []}"#)
        .unwrap();
    let out = colloquy(&["run", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("stepz: unknown key"));
    let missing = colloquy(&["run", dir.join("missing.json").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(missing.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_with_timeline_writes_the_page_and_the_same_trace() {
    let dir = std::env::temp_dir().join(format!("colloquy-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("t.html");
    let file = scenario("c07_two_updates_and_a_result.json");
    let out = colloquy(&["run", &file, "--timeline", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected =
        std::fs::read_to_string(scenario("traces/c07_two_updates_and_a_result.json")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>c07_two_updates_and_a_result — colloquy timeline</title>"));
    assert!(html.contains(r#"class="reply-link""#), "the deferred replies are linked");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `text` to a fresh file and runs it.
fn run_text(name: &str, text: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("colloquy-run-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.json");
    std::fs::write(&file, text).unwrap();
    let out = colloquy(&["run", file.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn everything_a_file_can_get_wrong_is_refused_before_anything_runs() {
    let agents = r#""agents": {"A": {}}, "session": {"agent": "A"}"#;
    let cases = [
        (r#"{"tools": {"": {}}, AGENTS}"#, "tools: a tool needs a name"),
        (r#"{"tools": {"t": {}, "t": {}}, AGENTS}"#, "duplicate key `t`"),
        (
            r#"{"tools": {"end_call": {}}, AGENTS}"#,
            "`end_call` is the name of a tool colloquy adds",
        ),
        (r#"{AGENTS, "steps": [{"at_ms": 18446744073709551000}]}"#, "at most 31536000000 ms"),
        (r#"{AGENTS, "steps": [{"wait_ms": 999999999999999}]}"#, "steps[0].wait_ms"),
        (r#"{"tools": {"t": {"body": [{"sleep_ms": 999999999999999}]}}, AGENTS}"#, "sleep_ms"),
        (r##"{"tools": {"t": {"parameters": {"$ref": "#"}}}, AGENTS}"##, "refers to itself"),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let out = run_text(&format!("bad{i}"), &text.replace("AGENTS", agents));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(out.stdout.is_empty(), "{text}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

#[test]
fn an_endless_file_is_refused_at_its_size_limit() {
    let out = colloquy(&["run", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 16 MiB"));
}

#[test]
fn a_wait_that_never_ends_is_recorded_and_the_run_goes_on() {
    let text = r#"{
        "agents": {"A": {}}, "session": {"agent": "A"},
        "options": {"end_timeout_ms": 2000},
        "steps": [{"user": "hi"}, {"user_speaking": true}, {"wait_idle": true}, {"user_speaking": false}]
    }"#;
    let out = run_text("wait", text);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let timeout = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "x_wait_timeout")
        .expect("the wait is recorded");
    assert_eq!(timeout["step"], 2);
    assert_eq!(timeout["waited_ms"], 2000);
}

#[test]
fn a_tool_listed_by_the_session_and_an_agent_is_one_tool() {
    let text = r#"{
        "tools": {"t": {"body": [{"return": "ok"}]}},
        "agents": {"A": {"tools": ["t"]}}, "session": {"agent": "A", "tools": ["t"]},
        "llm": [{"tool_calls": [{"id": "c1", "name": "t"}]}],
        "steps": [{"user": "go"}]
    }"#;
    let out = run_text("shared", text);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
