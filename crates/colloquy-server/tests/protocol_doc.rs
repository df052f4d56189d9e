//! docs/protocol.md cannot drift from the code: every line of its example exchanges is read
//! with the protocol's types and must write back to the same JSON.

use colloquy_protocol::{Request, ServerMessage, SessionStarted, StartSession};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Reads `json` as `T` and checks that it writes back to the same value.
fn round_trip<T: DeserializeOwned + Serialize>(line: usize, json: &str) {
    let value: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("line {line}: not JSON: {e}"));
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("line {line}: {e}\n{json}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back, value, "line {line} does not write back the same");
}

#[test]
fn every_line_of_the_example_exchanges_reads_with_the_protocol_types() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md"))
            .expect("docs/protocol.md is there");
    let blocks: Vec<&str> = page
        .split("```exchange\n")
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("the block ends")])
        .collect();
    assert!(blocks.len() >= 2, "the page has the example and the approval exchanges");
    let (mut client, mut server) = (0, 0);
    for block in blocks {
        let (c, s) = read_exchange(block);
        client += c;
        server += s;
    }
    assert!(client >= 10 && server >= 40, "{client} client and {server} server frames");
}

/// Reads every line of one block; the numbers of client and server frames.
fn read_exchange(block: &str) -> (usize, usize) {
    let (mut client, mut server) = (0, 0);
    for (i, line) in block.lines().enumerate() {
        let line_no = i + 1;
        if line.is_empty() || line.starts_with('#') || line.starts_with("GET ") {
            continue;
        }
        if let Some(json) = line.strip_prefix("> ") {
            round_trip::<Request>(line_no, json);
            client += 1;
        } else if let Some(json) = line.strip_prefix("< ") {
            round_trip::<ServerMessage>(line_no, json);
            server += 1;
        } else if let Some(json) = line.strip_prefix("POST /v1/sessions ") {
            round_trip::<StartSession>(line_no, json);
        } else if let Some(json) = line.strip_prefix("201 ") {
            round_trip::<SessionStarted>(line_no, json);
        } else {
            panic!("line {line_no} of an exchange is neither a frame nor a request: {line}");
        }
    }
    (client, server)
}
