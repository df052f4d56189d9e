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
