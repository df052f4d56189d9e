//! The durable-session figures of docs/benchmarks.md#durable-sessions: the store the load
//! harness's sessions journal to (`--store FILE`), and how long a long session takes to
//! resume (`--resume-turns N`).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use colloquy::prelude::*;
use colloquy::store::{Durability, SessionStore, SqliteStore};
use serde_json::{Value, json};

use crate::workload;
use crate::{percentile, round};

/// A fresh SQLite store at `path` (an older file there is removed first, with its WAL), each
/// append surviving what `durability` says; `memory`: a store in memory, which measures the
/// journal's cost in the runtime without SQLite's; a `nats://` URL: the cluster's store on
/// that server's JetStream (docs/cluster.md#journals; its journals are kept, each session's
/// under a new id).
pub fn fresh_store(path: &Path, durability: Durability) -> Result<Arc<dyn SessionStore>, String> {
    if path == Path::new("memory") {
        return Ok(Arc::new(colloquy::store::MemoryStore::new()));
    }
    if let Some(url) = path.to_str().filter(|p| p.starts_with("nats://")) {
        let store = colloquy_cluster::JetStreamStore::connect(url).map_err(|e| e.to_string())?;
        return Ok(Arc::new(store));
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    let store = SqliteStore::open_with(path, durability).map_err(|e| e.to_string())?;
    Ok(Arc::new(store))
}

/// Runs one session of `turns` turns of the workload into a fresh store at `path`, suspends
/// it, then resumes it `samples` times, each from a store opened anew (its journal read from
/// the file): the time from `resume` to the resumed session's first idle.
pub async fn resume_time(path: &Path, turns: u32, samples: usize) -> Result<Value, String> {
    let store = fresh_store(path, Durability::Disk)?;
    let builder = Session::builder().llm(workload::llm()).user_away_timeout(None);
    let mut builder = builder.store(Arc::clone(&store));
    let mut events = builder.subscribe_to(workload::event_filter());
    let session = builder.start(workload::agent(0)).await.map_err(|e| e.to_string())?;
    let id = session.id().to_owned();
    let written = Instant::now();
    for turn in 0..turns {
        session.user_turn(workload::user_text(turn)).await.map_err(|e| e.to_string())?;
        let final_id = workload::final_id(turn);
        loop {
            let event = events.recv().await.ok_or("the session ended")?;
            if workload::delivers(&event, &final_id) {
                break;
            }
        }
    }
    let write_s = written.elapsed().as_secs_f64();
    session.suspend().await.map_err(|e| e.to_string())?;
    drop(store);

    let mut times = Vec::with_capacity(samples);
    let (mut records, mut items) = (0, 0);
    for _ in 0..samples {
        let began = Instant::now();
        let store = SqliteStore::open(path).map_err(|e| e.to_string())?;
        let store: Arc<dyn SessionStore> = Arc::new(store);
        let agents = |name: &str| (name == workload::AGENT).then(|| workload::agent(0));
        let builder = Session::builder().llm(workload::llm()).user_away_timeout(None);
        let session = builder.store(Arc::clone(&store)).resume(&id, agents).await;
        let session = session.map_err(|e| e.to_string())?;
        session.wait_for_idle().await.map_err(|e| e.to_string())?;
        times.push(began.elapsed().as_secs_f64() * 1000.0);
        items = session.history().await.map_err(|e| e.to_string())?.len();
        session.suspend().await.map_err(|e| e.to_string())?;
        records = store.load(&id).map_err(|e| e.to_string())?.len();
    }
    times.sort_by(f64::total_cmp);
    let file_bytes = std::fs::metadata(path).map_or(0, |m| m.len())
        + std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len());
    Ok(json!({
        "framework": "colloquy",
        "resume_turns": turns,
        "history_items": items,
        "journal_records": records,
        "store_bytes": file_bytes,
        "write_s": round(write_s, 3),
        "resume_ms": {
            "samples": samples,
            "p50": round(percentile(&times, 0.5), 2),
            "max": round(times.last().copied().unwrap_or(0.0), 2),
        },
    }))
}
