//! Embeds every file of `assets/` (the playground page) in the library: a table of names and
//! `include_bytes!` paths, rebuilt whenever the folder changes (a file added included).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("assets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|entry| {
                    let name = entry.file_name().into_string().ok()?;
                    println!("cargo:rerun-if-changed={}", entry.path().display());
                    Some((name, entry.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut table = String::from("&[\n");
    for (name, path) in files {
        let _ = writeln!(
            table,
            "    ({name:?}, include_bytes!({:?}) as &[u8]),",
            path.display().to_string()
        );
    }
    table.push(']');
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("assets.rs");
    std::fs::write(out, table).expect("OUT_DIR is writable");
}
