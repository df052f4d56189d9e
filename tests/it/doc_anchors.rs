//! Every rule the code cites resolves inside the repository: `§9.2` to docs/semantics.md,
//! "decision 7" to docs/decisions.md, "hazard 4" to docs/semantics.md, `C-50` to
//! docs/scenarios.md, `docs/ractor-notes.md §2.3` and `docs/decisions.md#boxed-futures` to those
//! pages (docs/semantics.md says how).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `<a id="…">` anchors of one page.
fn anchors(page: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs").join(page))
        .unwrap_or_else(|e| panic!("docs/{page}: {e}"));
    let id = Regex::new(r#"<a id="([^"]+)"></a>"#).unwrap();
    id.captures_iter(&text).map(|c| c[1].to_string()).collect()
}

/// The Rust sources and the docs that cite the specification.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() && name != "target" && name != ".git" {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for dir in ["actors", "crates", "src", "tests", "examples", "benches"] {
        walk(&root().join(dir), &mut out);
    }
    for page in ["README.md", "docs/ARCHITECTURE.md", "docs/decisions.md", "docs/testing.md"] {
        out.push(root().join(page));
    }
    out
}

#[test]
fn every_cited_rule_has_an_anchor_in_docs() {
    let semantics = anchors("semantics.md");
    let decisions = anchors("decisions.md");
    let scenarios = anchors("scenarios.md");
    let ractor = anchors("ractor-notes.md");
    let section = Regex::new(r"(docs/ractor-notes\.md )?§(\d+(?:\.\d+)*)").unwrap();
    let numbered = Regex::new(r"\b([Dd]ecision|[Hh]azard)s? (\d+(?:(?:, | and )\d+)*)").unwrap();
    let scenario = Regex::new(r"\bC-(\d+)\b").unwrap();
    let link = Regex::new(r"docs/([a-z-]+\.md)#([A-Za-z0-9-]+)").unwrap();
    let mut missing = Vec::new();
    let mut cited = 0;
    for path in sources() {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(root()).unwrap().display().to_string();
        let mut check = |ok: bool, what: String| {
            cited += 1;
            if !ok {
                missing.push(format!("{file}: {what}"));
            }
        };
        for c in section.captures_iter(&text) {
            let id = format!("s{}", c[2].replace('.', "-"));
            match c.get(1) {
                Some(_) => check(ractor.contains(&id), format!("ractor-notes §{}", &c[2])),
                None => check(semantics.contains(&id), format!("§{}", &c[2])),
            }
        }
        for c in numbered.captures_iter(&text) {
            let kind = c[1].to_lowercase();
            for n in c[2].split([',', ' ']).filter(|n| n.parse::<u32>().is_ok()) {
                let id = format!("{kind}-{n}");
                let page = if kind == "decision" { &decisions } else { &semantics };
                check(page.contains(&id), format!("{kind} {n}"));
            }
        }
        for c in link.captures_iter(&text) {
            check(anchors(&c[1]).contains(&c[2]), format!("docs/{}#{}", &c[1], &c[2]));
        }
        for c in scenario.captures_iter(&text) {
            check(scenarios.contains(&format!("c-{}", &c[1])), format!("C-{}", &c[1]));
        }
    }
    assert!(cited > 300, "the scan found only {cited} citations: is it reading the sources?");
    assert!(missing.is_empty(), "citations without an anchor in docs/:\n{}", missing.join("\n"));
}
