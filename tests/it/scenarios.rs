//! Every scenario file under `tests/scenarios/` plays twice to byte-identical traces, and each
//! trace must equal the one committed under `tests/scenarios/traces/`. After a deliberate
//! behaviour change, `COLLOQUY_BLESS=1 cargo test --test it scenarios` rewrites the committed
//! traces; review their diff like code.

use std::path::{Path, PathBuf};

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_scenario_plays_deterministically_to_its_committed_trace() {
    let bless = std::env::var_os("COLLOQUY_BLESS").is_some();
    let files = scenario_files();
    assert!(files.len() >= 10, "scenario files are missing");
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let first = colloquy_scenario::run_file(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let second = colloquy_scenario::run_file(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (first, second) = (first.to_json(), second.to_json());
        assert_eq!(first, second, "{name}: two runs gave different traces");
        let expected_path = file.parent().unwrap().join("traces").join(&name);
        if bless {
            std::fs::create_dir_all(expected_path.parent().unwrap()).unwrap();
            std::fs::write(&expected_path, &first).unwrap();
            continue;
        }
        match std::fs::read_to_string(&expected_path) {
            Ok(expected) if expected == first => {}
            Ok(_) => failures.push(format!("{name}: trace differs from traces/{name}")),
            Err(_) => failures.push(format!("{name}: no committed trace at traces/{name}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(run with COLLOQUY_BLESS=1 to accept the new traces, then review the diff)",
        failures.join("\n")
    );
}
