//! Mutants of the scenario files in `tests/scenarios/` — values of another type, extreme
//! numbers, unknown keys, deletions — each either plays to a trace or is refused with a clear
//! error, never panics and never hangs (docs/decisions.md#scenario-reader).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::Instant;

use colloquy_scenario::{ScenarioError, run_str};
use proptest::prelude::*;
use serde_json::{Value, json};

fn scenarios() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect()
}

/// What to do at one place of the file.
#[derive(Clone, Debug)]
enum Mutation {
    Replace(Value),
    AddKey(String, Value),
    Delete,
}

fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!("")),
        Just(json!("x")),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!(u64::MAX)),
        Just(json!(1e300)),
        Just(json!(31_536_000_001u64)),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{}])),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => replacement().prop_map(Mutation::Replace),
        1 => ("[a-z_]{1,8}", replacement()).prop_map(|(k, v)| Mutation::AddKey(k, v)),
        2 => Just(Mutation::Delete),
    ]
}

/// Every place in `value` (JSON pointers), the root first.
fn places(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), value)];
    while let Some((at, v)) = stack.pop() {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    stack
                        .push((format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), child));
                }
            }
            Value::Array(list) => {
                for (i, child) in list.iter().enumerate() {
                    stack.push((format!("{at}/{i}"), child));
                }
            }
            _ => {}
        }
        out.push(at);
    }
    out.sort();
    out
}

fn apply(file: &mut Value, place: &str, mutation: &Mutation) {
    match mutation {
        Mutation::Replace(v) => {
            if let Some(target) = file.pointer_mut(place) {
                *target = v.clone();
            }
        }
        Mutation::AddKey(k, v) => {
            if let Some(Value::Object(map)) = file.pointer_mut(place) {
                map.insert(k.clone(), v.clone());
            }
        }
        Mutation::Delete => {
            let Some((parent, last)) = place.rsplit_once('/') else { return };
            match file.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(list)) => {
                    if let Ok(i) = last.parse::<usize>()
                        && i < list.len()
                    {
                        list.remove(i);
                    }
                }
                _ => {}
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_mutant_plays_or_is_refused(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), mutation()), 1..4),
    ) {
        let files = scenarios();
        let mut file = files[which.index(files.len())].clone();
        for (at, mutation) in &edits {
            let all = places(&file);
            apply(&mut file, &all[at.index(all.len())], mutation);
        }
        let text = file.to_string();
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| run_str(&text)));
        prop_assert!(started.elapsed().as_secs() < 20, "took {:?}: {text}", started.elapsed());
        match outcome {
            Err(_) => prop_assert!(false, "panicked on {text}"),
            Ok(Ok(trace)) => prop_assert!(trace.to_json().starts_with('{'), "a trace is an object"),
            Ok(Err(ScenarioError::File(message))) => prop_assert!(!message.is_empty()),
            Ok(Err(ScenarioError::Run(message))) => prop_assert!(!message.is_empty()),
            Ok(Err(other)) => prop_assert!(false, "unexpected error {other} on {text}"),
        }
    }
}
