//! `colloquy sessions`: the sessions kept in a store (`colloquy chat --store`), as a table; or
//! one deleted.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use colloquy::store::{SessionStore, SessionSummary, SqliteStore};

use crate::SessionsArgs;
use crate::command::CommandError;
use crate::console::{clean, table};

/// Lists (or, with `--delete`, deletes) the stored sessions, on `out`.
pub fn run(args: &SessionsArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    if !args.store.exists() {
        let path = args.store.display();
        return Err(CommandError::Failed(format!("no store at `{path}`")));
    }
    let store = SqliteStore::open(&args.store).map_err(|e| CommandError::Failed(e.to_string()))?;
    let failed = |e: colloquy::store::StoreError| CommandError::Failed(e.to_string());
    let text = match (&args.delete, args.expire) {
        (Some(id), _) => match store.delete(id).map_err(failed)? {
            true => format!("deleted session {}", clean::line(id)),
            false => {
                let id = clean::line(id);
                return Err(CommandError::Failed(format!("no stored session `{id}`")));
            }
        },
        (None, Some(age)) => {
            let before = now_ms().saturating_sub(age.as_millis() as u64);
            let mut expired = 0;
            for session in store.list().map_err(failed)? {
                if session.updated_ms < before && store.delete(&session.id).map_err(failed)? {
                    expired += 1;
                }
            }
            format!("deleted {expired} session(s) not active for {}", humantime(age))
        }
        (None, None) => listing(&store.list().map_err(failed)?, now_ms()),
    };
    writeln!(out, "{text}").map_err(|e| CommandError::Failed(e.to_string()))
}

/// The sessions as an aligned table, the most recently active first.
pub fn listing(sessions: &[SessionSummary], now_ms: u64) -> String {
    let header = ["SESSION", "AGENT", "RECORDS", "ACTIVE", "STATE", "IN DOUBT", "HELD BY"];
    let mut rows = vec![header.map(String::from).to_vec()];
    for session in sessions {
        let state = match &session.closed {
            Some(reason) => format!("closed ({})", clean::line(reason)),
            None => "open".to_owned(),
        };
        rows.push(vec![
            clean::line(&session.id),
            clean::line(&session.agent),
            session.entries.to_string(),
            ago(now_ms.saturating_sub(session.updated_ms)),
            state,
            session.calls_in_doubt.to_string(),
            held_by(session),
        ]);
    }
    let mut lines = table::aligned(&rows);
    if sessions.is_empty() {
        lines.push("(no stored session)".into());
    }
    lines.join("\n")
}

/// `PID@HOST` of the process that holds the session's lease, `-` for none (or one of this
/// host that no longer runs: the next chat takes it at once).
fn held_by(session: &SessionSummary) -> String {
    match &session.held_by {
        Some(holder) if !holder.is_gone() => {
            clean::line(&format!("{}@{}", holder.pid, holder.host))
        }
        _ => "-".to_owned(),
    }
}

/// `12s ago`, `5m ago`, `3h ago`, `2d ago`.
fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3_600 => format!("{}m ago", s / 60),
        3_600..86_400 => format!("{}h ago", s / 3_600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// `30d`, `12h`, `5m`, `30s`: the largest unit that divides it.
fn humantime(age: std::time::Duration) -> String {
    let s = age.as_secs();
    match s {
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s >= 3_600 && s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use colloquy::store::{Acquire, Entry, LEASE_TTL, LeaseHolder, MemoryStore, Record};

    use super::*;

    #[test]
    fn a_row_per_session_under_the_header_with_its_state() {
        let store = MemoryStore::new();
        let reason = "end_call\u{1b}[2J".to_owned();
        let me = LeaseHolder::this_process();
        let lease = store.acquire("s-2", &me, LEASE_TTL, Acquire::IfFree).unwrap();
        store.append(&lease, &[Entry::new(1, 0, Record::CloseBegan { reason })]).unwrap();
        let mut sessions = store.list().unwrap();
        sessions[0].updated_ms = 1_000;
        let text = listing(&sessions, 1_000 + 125_000);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("SESSION  AGENT  RECORDS  ACTIVE  STATE"), "{text}");
        assert!(lines[1].starts_with("s-2"), "{text}");
        assert_eq!(lines[0].find("STATE"), lines[1].find("closed"), "aligned: {text}");
        assert!(lines[1].contains("2m ago") && lines[1].contains("closed (end_call"), "{text}");
        let held = format!("{}@{}", me.pid, me.host);
        assert!(lines[0].ends_with("HELD BY") && lines[1].ends_with(&held), "{text}");
        assert!(!text.contains('\u{1b}'), "control characters are not printed: {text:?}");
        assert_eq!(listing(&[], 0).lines().last(), Some("(no stored session)"));
    }
}
