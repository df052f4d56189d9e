//! The load harness runs the workload end to end, checks every session and reports the
//! peer's fields; the cluster bench does the same with its sessions on two nodes and a real
//! nats-server (`scripts/install-nats.sh`). (Their figures are measurements, never asserted
//! here.)

use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> (bool, Value) {
    run(env!("CARGO_BIN_EXE_colloquy-bench"), args)
}

fn run(binary: &str, args: &[&str]) -> (bool, Value) {
    let out = Command::new(binary).args(args).output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout));
    });
    (out.status.success(), report)
}

#[test]
fn a_small_load_completes_every_call_and_reply() {
    let (success, report) = bench(&["--sessions", "3", "--turns", "2", "--tool-ms", "0"]);
    assert!(success, "{report:#}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["tool_calls_expected"], 6);
    assert_eq!(report["tool_calls_completed"], 6);
    assert_eq!(report["sessions_with_problems"], 0);
    // Per turn: the user turn's call and the first update's reply, then the deferred second
    // update and final output — one coalesced reply when they arrive together, two when the
    // session went idle between them. Which one happens depends on the real clock, so the
    // bound covers both (6 turns × 2..=4 requests).
    let requests = report["llm_requests"].as_u64().unwrap();
    assert!((12..=24).contains(&requests), "{requests} requests");
    assert!(report["deferred_replies"].as_u64().unwrap() >= 6);
    for field in ["p50", "p95", "p99", "max"] {
        assert!(report["turn_latency_ms"][field].is_number(), "{field}");
    }
    for field in ["latency", "amortised_wall", "cpu"] {
        assert!(report["overhead_ms_per_call"][field].is_number(), "{field}");
    }
    // The kernel's part of the run's CPU is a part of it.
    let (cpu, kernel) = (report["cpu_s_run"].as_f64(), report["cpu_kernel_s_run"].as_f64());
    assert!(kernel.zip(cpu).is_some_and(|(k, c)| k >= 0.0 && k <= c + 0.01), "{report:#}");
}

#[test]
fn idle_sessions_report_bytes_per_session() {
    let (success, report) = bench(&["--idle-sessions", "20"]);
    assert!(success, "{report:#}");
    assert_eq!(report["idle_sessions"], 20);
    assert_eq!(report["failed_to_start"], 0);
    assert_eq!(report["ok"], true);
    assert!(report["bytes_per_idle_session"].is_number());
}

#[test]
fn a_short_chaos_run_injects_every_kind_of_fault_and_its_invariants_hold() {
    let args = ["--chaos", "0.3", "--seed", "7", "--sessions", "40", "--turns", "5"];
    let (success, report) = bench(&args);
    assert!(success, "{report:#}");
    assert_eq!(report["invariants_held"], true, "{report:#}");
    assert_eq!(report["failures"], 0);
    let faults = report["faults"].as_object().expect("faults by kind");
    for kind in [
        "kill_tool_call",
        "kill_toolset",
        "kill_activity",
        "llm_cut",
        "llm_error",
        "llm_slow",
        "tool_panic",
        "tool_timeout",
    ] {
        assert!(faults.get(kind).and_then(Value::as_u64).unwrap_or(0) > 0, "{kind}: {faults:?}");
    }
    assert_eq!(report["calls_started"], report["calls_ended"]);
    assert_eq!(report["invariants"]["memory_back"], true);
    let replay = report["replay"].as_str().unwrap();
    assert!(replay.contains("--chaos 0.3 --seed 7 --sessions 40"), "{replay}");
}

#[test]
fn a_short_chaos_run_with_a_store_crashes_sessions_and_resumes_them() {
    let args = ["--chaos", "0.3", "--seed", "7", "--sessions", "40", "--turns", "5"];
    let (success, report) = bench(&[&args[..], &["--store", "memory"]].concat());
    assert!(success, "{report:#}");
    assert_eq!(report["invariants_held"], true, "{report:#}");
    let crashes = report["faults"]["crash"].as_u64().unwrap_or(0);
    assert!(crashes > 0, "{report:#}");
    // Each crash cut a call off: settled in doubt by the resume, it has no `tool_call_ended`.
    let (started, ended) = (report["calls_started"].as_u64(), report["calls_ended"].as_u64());
    assert_eq!(started.zip(ended).map(|(s, e)| s - e), Some(crashes), "{report:#}");
    // Without the heap counted (`alloc-count`), a store's run does not judge the memory.
    assert_eq!(report["invariants"]["memory_back"], Value::Null);
    assert!(report["replay"].as_str().unwrap().ends_with("--store memory"));
}

#[test]
fn a_bad_option_is_a_clear_error() {
    for (binary, args) in [
        (env!("CARGO_BIN_EXE_colloquy-bench"), ["--sessions", "many"]),
        (env!("CARGO_BIN_EXE_burst-floor"), ["--sessions", "many"]),
        (env!("CARGO_BIN_EXE_burst-floor"), ["--steps", "0"]),
        (env!("CARGO_BIN_EXE_cluster-bench"), ["--nodes", "0"]),
        (env!("CARGO_BIN_EXE_colloquy-bench"), ["--chaos", "2"]),
        (env!("CARGO_BIN_EXE_colloquy-bench"), ["--seed", "3"]),
    ] {
        let out = Command::new(binary).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{binary} {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(args[0]) && err.contains("--help"), "{err}");
    }
}

#[test]
fn the_burst_floor_runs_every_turn_of_the_shape() {
    let args =
        ["--sessions", "3", "--turns", "2", "--tool-ms", "2", "--work-us", "20", "--steps", "2"];
    let (success, report) = run(env!("CARGO_BIN_EXE_burst-floor"), &args);
    assert!(success, "{report:#}");
    assert_eq!(report["turns_completed"], 6);
    assert_eq!(report["work_us_per_turn"], 20);
    // Every turn sleeps its 2 ms (never less) and burns its 20 µs, so none is shorter.
    let p50 = report["turn_latency_ms"]["p50"].as_f64().unwrap();
    assert!(p50 >= 2.0, "{report:#}");
    for field in ["p95", "p99", "max"] {
        assert!(report["turn_latency_ms"][field].as_f64().unwrap() >= p50, "{field}");
    }
    assert!(report["overhead_ms"]["p99"].as_f64().unwrap() >= 0.0, "{report:#}");
    assert!(report["cpu_us_per_turn"].as_f64().unwrap() > 0.0, "{report:#}");
}

/// The pinned nats-server of `scripts/install-nats.sh` (idempotent: it only checks an installed
/// one), or a failure that says how to get it.
fn install_nats() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/install-nats.sh");
    let out = Command::new(script).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cannot install nats-server: run scripts/install-nats.sh ({err})"
    );
}

#[test]
fn the_cluster_chaos_run_kills_nodes_and_restarts_the_server_and_its_invariants_hold() {
    install_nats();
    let args = ["--chaos", "--sessions", "12", "--turns", "6", "--tool-ms", "200"];
    let (success, report) = run(env!("CARGO_BIN_EXE_cluster-bench"), &args);
    assert!(success, "{report:#}");
    let chaos = &report["chaos"];
    assert_eq!(chaos["invariants_held"], true, "{chaos:#}");
    let failures = chaos["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 3, "{chaos:#}");
    // Node-1's and node-2's sessions moved; every turn is accounted for, and the one after
    // the failures was delivered everywhere.
    assert!(chaos["moves"].as_u64().unwrap() >= 8, "{chaos:#}");
    let turns: u64 = ["turns_delivered", "turns_in_doubt", "turns_cut_off"]
        .iter()
        .map(|k| chaos[k].as_u64().unwrap())
        .sum();
    assert_eq!(turns, 12 * 7, "{chaos:#}");
}

#[test]
fn sessions_on_two_nodes_complete_every_call_and_compare_with_one_in_process() {
    install_nats();
    let args = ["--sessions", "6", "--turns", "2", "--turn-samples", "3"];
    let (success, report) = run(env!("CARGO_BIN_EXE_cluster-bench"), &args);
    assert!(success, "{report:#}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["nodes"], 2);
    let one = &report["one_turn"];
    assert_eq!(one["ok"], true, "{one:#}");
    assert_eq!(one["turns_measured"], 3);
    for side in ["in_process_ms", "across_nodes_ms"] {
        assert!(one[side]["p99"].as_f64().is_some_and(|ms| ms > 0.0), "{side}: {one:#}");
    }
    // Every event a node publishes reaches the host: at least the call's start, two updates,
    // its end and the two replies, each turn.
    assert!(one["events_per_turn"].as_f64().is_some_and(|n| n >= 6.0), "{one:#}");
    let load = &report["workload"];
    assert_eq!(load["tool_calls_expected"], 12);
    assert_eq!(load["tool_calls_completed"], 12);
    assert_eq!(load["sessions_with_problems"], 0);
    assert!(load["deferred_replies"].as_u64().unwrap() >= 12, "{load:#}");
    // The cluster placed every session on one of the nodes (which ones is its choice).
    let placed: u64 =
        load["placement"].as_object().unwrap().values().filter_map(Value::as_u64).sum();
    assert_eq!(placed, 6, "{load:#}");
}

#[test]
fn the_cluster_bench_without_nats_server_says_how_to_get_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-bench"))
        .args(["--nats-server", "/nonexistent/nats-server", "--sessions", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run scripts/install-nats.sh"), "{err}");
}
