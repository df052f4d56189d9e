//! `colloquy chat --store` and `colloquy sessions`: a chat kept in a SQLite file, killed with
//! SIGKILL mid-call and resumed by another process; files that are not stores.

mod common;

use std::time::Duration;

use common::{Driven, assert_lines_in_order, run as colloquy};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The row of `colloquy sessions` for session `id`, split on spaces.
async fn stored_row(db: &str, id: &str) -> Vec<String> {
    let listed = colloquy(&["sessions", "--store", db], "").await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let row = listed.stdout.lines().find(|l| l.starts_with(id));
    let row = row.unwrap_or_else(|| panic!("`{id}` not listed:\n{}", listed.stdout));
    let cells: Vec<String> = row.split_whitespace().map(str::to_owned).collect();
    // Before its holder: its state and its calls in doubt.
    cells[cells.len() - 3..cells.len() - 1].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_killed_mid_call_resumes_from_its_store_and_the_call_ends_once() {
    let dir = std::env::temp_dir().join(format!("colloquy-durable-chat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("sessions.db").display().to_string();
    let chat = ["chat", "--provider", "scripted", "--no-color", "--store", db.as_str()];

    let mut first = Driven::start(&chat).await;
    first.wait_for(" continues it").await;
    let text = first.text();
    let id = text.split("session ").nth(1).and_then(|s| s.split(',').next()).unwrap().to_owned();
    first.send("book a flight to Rome on Saturday").await;
    first.wait_for("Searching Saturday flights").await;
    let pid = Pid::from_raw(first.child.id().expect("running") as i32);
    // While it runs, the session is its own: a second chat is refused, naming it.
    let resumed = ["--resume", id.as_str()];
    let twice = colloquy(&[&chat[..], &resumed[..]].concat(), "hello?\n").await;
    assert_eq!(twice.code, Some(1), "{}", twice.stdout);
    assert!(twice.stderr.contains(&format!("is in use by process {pid}")), "{}", twice.stderr);
    // SIGKILL mid-body: no close, no flush, nothing the process can do about it.
    kill(pid, Signal::SIGKILL).unwrap();
    let _ = first.child.wait().await;
    let row = stored_row(&db, &id).await;
    assert_eq!(row, ["open", "1"], "one call in doubt");

    // At once (its holder no longer runs), the booking runs again (`rerun`, under the same
    // idempotency key) and ends, once.
    let mut second = Driven::start(&[&chat[..], &resumed[..]].concat()).await;
    second.wait_for("book_flight #1 done: ").await;
    second.send("/quit").await;
    second.close_input();
    let (code, text) = second.end().await;
    assert_eq!(code, Some(0), "{text}");
    assert_lines_in_order(
        &text,
        &[
            "── session resumed ──",
            "book_flight was interrupted by the restart: it runs again",
            "tool ▸ book_flight #1 started",
            "Searching Saturday flights",
            "book_flight #1 done: ",
            "session suspended: it can resume",
        ],
    );
    let row = stored_row(&db, &id).await;
    assert_eq!(row, ["open", "0"], "settled once");

    // Again, with nothing in doubt: no call is settled twice.
    let third = colloquy(&[&chat[..], &resumed[..]].concat(), "/quit\n").await;
    assert_eq!(third.code, Some(0), "{}", third.stderr);
    assert!(!third.stdout.contains("interrupted by the restart"), "{}", third.stdout);

    let unknown = colloquy(&[&chat[..], &["--resume", "nope"][..]].concat(), "").await;
    assert_eq!(unknown.code, Some(1), "{}", unknown.stdout);
    assert!(unknown.stderr.contains("no stored session `nope`"), "{}", unknown.stderr);

    let kept = colloquy(&["sessions", "--store", db.as_str(), "--expire", "1d"], "").await;
    assert_eq!(kept.stdout.trim(), "deleted 0 session(s) not active for 1d", "{}", kept.stderr);
    std::thread::sleep(Duration::from_millis(5));
    let gone = colloquy(&["sessions", "--store", db.as_str(), "--expire", "0s"], "").await;
    assert_eq!(gone.stdout.trim(), "deleted 1 session(s) not active for 0s", "{}", gone.stderr);
    let listed = colloquy(&["sessions", "--store", db.as_str()], "").await;
    assert!(listed.stdout.contains("(no stored session)"), "{}", listed.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_store_is_refused_and_left_alone() {
    let junk = std::env::temp_dir().join(format!("colloquy-not-a-store-{}", std::process::id()));
    let text =
        "not a database, just a long enough line of text to fill SQLite's header.".repeat(10);
    std::fs::write(&junk, &text).unwrap();
    let path = junk.display().to_string();
    let listed = colloquy(&["sessions", "--store", &path], "").await;
    assert_eq!(listed.code, Some(1));
    assert!(listed.stderr.contains("is not a colloquy store"), "{}", listed.stderr);
    let chat = colloquy(&["chat", "--provider", "scripted", "--store", &path], "/quit\n").await;
    assert_eq!(chat.code, Some(1), "{}", chat.stdout);
    assert!(chat.stderr.contains("is not a colloquy store"), "{}", chat.stderr);
    assert_eq!(std::fs::read_to_string(&junk).unwrap(), text, "nothing was overwritten");
    let resume =
        ["chat", "--provider", "scripted", "--store", "/nonexistent/s.db", "--resume", "x"];
    let nowhere = colloquy(&resume, "").await;
    assert_eq!(nowhere.code, Some(1));
    assert!(nowhere.stderr.contains("no store at"), "{}", nowhere.stderr);
    assert!(!std::path::Path::new("/nonexistent/s.db").exists());
    let missing = colloquy(&["sessions", "--store", "/nonexistent/sessions.db"], "").await;
    assert_eq!(missing.code, Some(1));
    assert!(missing.stderr.contains("no store at"), "{}", missing.stderr);
    let _ = std::fs::remove_file(&junk);
}
