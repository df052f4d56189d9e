//! Two hundred SIGKILLs of a durable session's process at random moments, each resumed by
//! another process (`crash-probe`, docs/durability.md): after every one, nothing is in doubt,
//! every call the conversation shows ended exactly once, and every charge it shows happened
//! exactly once — however often the body ran.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use colloquy::chat::ChatItem;
use colloquy::store::{Journal, SessionStore, SqliteStore};

const KILLS: usize = 200;

fn probe(store: &Path, ledger: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_crash-probe"));
    command.arg("--store").arg(store).arg("--ledger").arg(ledger);
    command
}

/// xorshift64: the same moments on every run, from `SEED`.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

const SEED: u64 = 0x5eed_c011_0a07;

/// What must hold of session `id` once it has settled.
fn check(store: &Path, ledger: &Path, id: &str, kill: usize) {
    let entries = SqliteStore::open(store).unwrap().load(id).unwrap();
    let journal = Journal::fold(&entries);
    assert!(journal.running.is_empty(), "kill {kill}: calls left in doubt: {:?}", journal.running);
    let history = &journal.history;
    let outputs = |call_id: &str| {
        let outputs = history.iter().filter_map(ChatItem::as_function_call_output);
        outputs.filter(|o| o.call_id == call_id).map(|o| o.output.clone()).collect::<Vec<_>>()
    };
    let mut shown = BTreeSet::new();
    for call in history.iter().filter_map(ChatItem::as_function_call) {
        if call.name != "charge" || call.call_id.contains('_') {
            continue;
        }
        assert_eq!(outputs(&call.call_id).len(), 1, "kill {kill}: {} answered once", call.call_id);
        let finals = outputs(&format!("{}_final", call.call_id));
        assert_eq!(finals.len(), 1, "kill {kill}: {} ended once: {finals:?}", call.call_id);
        assert!(finals[0].starts_with("charged"), "kill {kill}: {finals:?}");
        shown.insert(format!("{id}:{}", call.call_id));
    }
    let lines = std::fs::read_to_string(ledger).unwrap_or_default();
    let charged: Vec<&str> = lines.lines().filter(|l| l.starts_with(&format!("{id}:"))).collect();
    let once: BTreeSet<String> = charged.iter().map(ToString::to_string).collect();
    assert_eq!(once.len(), charged.len(), "kill {kill}: a key charged twice: {charged:?}");
    assert_eq!(once, shown, "kill {kill}: the charges are the calls the conversation shows");
}

#[test]
fn two_hundred_kills_at_random_moments_leave_every_call_ended_and_charged_once() {
    let dir = std::env::temp_dir().join(format!("colloquy-kills-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (store, ledger) = (dir.join("sessions.db"), dir.join("ledger"));
    let mut state = SEED;
    let (mut killed, mut before_any_record) = (0, 0);
    for kill in 0..KILLS {
        let mut child = probe(&store, &ledger)
            .args(["--turns", "3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("crash-probe starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let id = first.strip_prefix("session ").expect("it names its session").to_owned();
        std::thread::sleep(Duration::from_micros(next(&mut state) % 60_000));
        child.kill().unwrap(); // SIGKILL
        let _ = child.wait();
        if !lines.any(|line| line.is_ok_and(|l| l == "done")) {
            killed += 1;
            let resumed = probe(&store, &ledger).args(["--resume", &id]).output().unwrap();
            let why = String::from_utf8_lossy(&resumed.stderr);
            // Killed before its first record reached the disk: nothing of it is anywhere.
            if why.contains(&format!("no stored session `{id}`")) {
                let ledger = std::fs::read_to_string(&ledger).unwrap_or_default();
                assert!(!ledger.contains(&id), "kill {kill}: charged, yet nothing stored");
                before_any_record += 1;
                continue;
            }
            assert!(resumed.status.success(), "kill {kill}: the resume failed: {why}");
        }
        check(&store, &ledger, &id, kill);
    }
    eprintln!(
        "{killed} of {KILLS} kills landed mid-session, {before_any_record} before any record"
    );
    assert!(killed >= KILLS / 2, "only {killed} of {KILLS} kills landed before the end");
    let _ = std::fs::remove_dir_all(&dir);
}
