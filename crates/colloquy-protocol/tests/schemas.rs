//! The JSON Schemas under docs/protocol/ are the types' own: a change to a message that does
//! not regenerate them fails here. `COLLOQUY_BLESS=1 cargo test -p colloquy-protocol --test
//! schemas` rewrites them after a deliberate change; review their diff like code.

use std::path::PathBuf;

#[test]
fn the_committed_schemas_are_the_types_schemas() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/protocol");
    let bless = std::env::var_os("COLLOQUY_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in colloquy_protocol::json_schemas() {
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        let path = dir.join(name);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/protocol/ differs from the types for {stale:?}: after a deliberate change, run \
         COLLOQUY_BLESS=1 cargo test -p colloquy-protocol --test schemas and review the diff"
    );
}

#[test]
fn the_schemas_describe_the_frames_of_the_protocol_page() {
    let schemas = colloquy_protocol::json_schemas();
    let server = serde_json::to_string(&schemas[1].1).unwrap();
    for name in
        ["hello", "event", "reply", "closing", "tool_call_started", "x_agent_text", "oldest_seq"]
    {
        assert!(server.contains(name), "the server message schema names {name}");
    }
}
