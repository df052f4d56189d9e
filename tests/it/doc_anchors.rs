//! Every rule the code cites resolves inside the repository: `§9.2` to docs/semantics.md,
//! "decision 7" to docs/decisions.md, "hazard 4" to docs/semantics.md, `C-50` to
//! docs/scenarios.md, `docs/ractor-notes.md §2.3` and `docs/decisions.md#boxed-futures` to those
//! pages (docs/semantics.md says how). And no comment cites an issue number: the tracker's
//! numbers say nothing to a reader of the code, and a reason worth keeping is a decision.
//! Every test docs/tool-controls.md cites as evidence exists.

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

/// The files under the source folders that `keep` selects.
fn source_files(keep: fn(&Path) -> bool) -> Vec<PathBuf> {
    fn walk(dir: &Path, keep: fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() && name != "target" && name != ".git" && name != "node_modules" {
                walk(&path, keep, out);
            } else if keep(&path) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for dir in ["actors", "crates", "src", "tests", "examples", "benches"] {
        walk(&root().join(dir), keep, &mut out);
    }
    out
}

fn is_rust(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "rs")
}

/// The Rust sources and the docs that cite the specification.
fn sources() -> Vec<PathBuf> {
    let mut out = source_files(is_rust);
    let pages = [
        "README.md",
        "docs/ARCHITECTURE.md",
        "docs/decisions.md",
        "docs/testing.md",
        "docs/tool-controls.md",
        "docs/tools.md",
        "docs/sessions.md",
        "docs/crates.md",
    ];
    for page in pages {
        out.push(root().join(page));
    }
    out
}

/// Every file with comments a reader of the code sees, with the marker that opens a comment:
/// the Rust sources (`//`, `///`, `//!`), the manifests, the scripts and `.ci/run` (`#`).
fn commented_files() -> Vec<(PathBuf, &'static str)> {
    let mut out: Vec<_> = source_files(is_rust).into_iter().map(|p| (p, "//")).collect();
    let manifests = source_files(|p| p.file_name().is_some_and(|n| n == "Cargo.toml"));
    out.extend(manifests.into_iter().chain([root().join("Cargo.toml")]).map(|p| (p, "#")));
    let scripts = std::fs::read_dir(root().join("scripts")).expect("scripts/");
    let scripts = scripts.flatten().map(|e| e.path()).filter(|p| p.is_file());
    out.extend(scripts.chain([root().join(".ci/run")]).map(|p| (p, "#")));
    out
}

/// The comment on one line: what follows `marker` where it opens a comment, outside a string
/// literal (`"…"`) and, for `#`, at the start of a word (so `$#` or `${#x}` is no comment).
fn comment<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let mut quoted = false;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        // A `'"'` character literal opens no string.
        if c == '"' && prev != '\\' && !(prev == '\'' && line[i + 1..].starts_with('\'')) {
            quoted = !quoted;
        }
        let word_start = marker != "#" || prev.is_whitespace();
        if !quoted && word_start && line[i..].starts_with(marker) {
            return Some(&line[i + marker.len()..]);
        }
        prev = c;
    }
    None
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

#[test]
fn every_test_the_controls_table_cites_exists() {
    // docs/tool-controls.md names its evidence `module::test`: a renamed or deleted test must
    // not leave a cell citing nothing.
    let page = std::fs::read_to_string(root().join("docs/tool-controls.md")).unwrap();
    let cited = Regex::new(r"`([a-z_]+)::([a-z0-9_]+)`").unwrap();
    let mut missing = Vec::new();
    let mut found = 0;
    for c in cited.captures_iter(&page) {
        let file = root().join("tests/it").join(format!("{}.rs", &c[1]));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        found += 1;
        if !text.contains(&format!("fn {}()", &c[2])) {
            missing.push(format!("{}::{}", &c[1], &c[2]));
        }
    }
    assert!(found > 40, "the scan found only {found} tests: is it reading the table?");
    assert!(
        missing.is_empty(),
        "docs/tool-controls.md cites missing tests:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_comment_cites_an_issue() {
    let issue = Regex::new(r"\b[Ii]ssues? #?[0-9]+").unwrap();
    let files = commented_files();
    assert!(
        files.len() > 200,
        "the scan found only {} files: is it reading the sources?",
        files.len()
    );
    let mut found = Vec::new();
    for (path, marker) in files {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path.strip_prefix(root()).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            if comment(line, marker).is_some_and(|c| issue.is_match(c)) {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "comments that cite an issue (cite a docs/ anchor or a decision instead, or say the \
         reason in the comment):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_comment_starts_where_its_marker_opens_one() {
    assert_eq!(comment(r#"let s = "a // b"; // why"#, "//"), Some(" why"));
    assert_eq!(comment(r#"if c == '"' { x } // why"#, "//"), Some(" why"));
    assert_eq!(comment("//! a module", "//"), Some("! a module"));
    assert_eq!(comment(r#"echo "$# args" # why"#, "#"), Some(" why"));
    assert_eq!(comment("n=${#list[@]}", "#"), None);
    assert_eq!(comment(r#"key = "a # b""#, "#"), None);
}
