//! The number of each stored session's last event, kept beside the store so that a session
//! resumed by another process numbers its events on from there: a client that reconnects with
//! `?after=SEQ` after a restart gets the next events, none renumbered
//! (docs/decisions.md#serve-store). One small file per session in a directory of the
//! server's, never in the store: the journal's format does not change.
//!
//! A number is written before its event reaches any client, into the page cache without a
//! sync: it survives the process (`kill -9`, a panic), not always the machine; a resumed
//! session whose clients saw numbers past the kept one tells them so with a `gap`.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The width of a kept number: the file is rewritten in place, never truncated, so that a
/// process killed between two writes leaves one whole number.
const WIDTH: usize = 20;

/// The directory of the numbers.
#[derive(Clone, Debug)]
pub(crate) struct Numbers {
    dir: PathBuf,
}

impl Numbers {
    /// The numbers kept in `dir`, which is created if missing.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self { dir: dir.to_owned() })
    }

    /// Where session `id`'s number is kept; `None` for an id that is not a plain file name
    /// (the runtime's ids are UUIDs; a client's path never reaches outside the directory).
    fn path(&self, id: &str) -> Option<PathBuf> {
        let plain = !id.is_empty()
            && id.len() <= 128
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        plain.then(|| self.dir.join(id))
    }

    /// The number of session `id`'s last event kept by an earlier process; 0 for none.
    pub(crate) fn last(&self, id: &str) -> u64 {
        let Some(path) = self.path(id) else { return 0 };
        match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().unwrap_or_else(|_| {
                tracing::warn!(session = id, "an unreadable event number: counting from 0");
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                tracing::warn!(session = id, error = %e, "an unreadable event number: from 0");
                0
            }
        }
    }

    /// A counter that keeps session `id`'s numbers from now on; `None` if its file cannot be
    /// opened (the session runs on, its numbers not kept: a warning says so).
    pub(crate) fn counter(&self, id: &str) -> Option<Counter> {
        let path = self.path(id)?;
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path);
        match file {
            Ok(file) => Some(Counter { file, path, failed: false }),
            Err(e) => {
                tracing::warn!(session = id, error = %e, "event numbers not kept");
                None
            }
        }
    }
}

/// Keeps one session's last event number.
#[derive(Debug)]
pub(crate) struct Counter {
    file: File,
    path: PathBuf,
    /// A write failed once: warned about, not again.
    failed: bool,
}

impl Counter {
    /// Keeps `seq` as the session's last event number.
    pub(crate) fn record(&mut self, seq: u64) {
        let text = format!("{seq:0WIDTH$}");
        let written =
            self.file.seek(SeekFrom::Start(0)).and_then(|_| self.file.write_all(text.as_bytes()));
        if let Err(e) = written
            && !self.failed
        {
            self.failed = true;
            tracing::warn!(path = %self.path.display(), error = %e, "an event number not kept");
        }
    }

    /// The session closed for good: it never resumes, so its number goes.
    pub(crate) fn forget(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_kept_reads_back_and_a_forgotten_one_is_zero() {
        let dir = std::env::temp_dir().join(format!("colloquy-numbers-{}", std::process::id()));
        let numbers = Numbers::open(&dir).unwrap();
        assert_eq!(numbers.last("s-1"), 0);
        let mut counter = numbers.counter("s-1").unwrap();
        counter.record(12_345);
        counter.record(7);
        assert_eq!(numbers.last("s-1"), 7);
        counter.forget();
        assert_eq!(numbers.last("s-1"), 0);
        assert!(numbers.counter("../escape").is_none());
        assert_eq!(numbers.last("../escape"), 0);
        let _ = std::fs::remove_dir_all(dir);
    }
}
