//! What colloquy checks in a server's messages before rmcp reads them (pure): each line the
//! stdio relay passes, each JSON body or SSE event the HTTP client gets.
//!
//! A tool list with one tool nested deeper than serde_json's depth limit (128) or shaped oddly
//! is a message rmcp cannot parse: over stdio it is ignored and the listing waits forever, over
//! HTTP the listing fails. [`screen`] rewrites such a list without the tools rmcp cannot read,
//! naming them. rmcp also drops a stdio line over its length limit without a word, so the call
//! it answered would wait forever: [`target`] reads whom a dropped line was for from its start.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The longest message rmcp reads: a stdio line (newline included), which the relay drops and
/// reports past it; an HTTP JSON body or SSE event, which the HTTP transport is set to stop
/// reading past it (rmcp's HTTP defaults are the same 16 MiB).
pub(crate) const MAX_MESSAGE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// How deep the protocol nests a listed tool (message → result → tools): rmcp reads the
/// whole message under serde_json's depth limit, so a tool must fit in what is left.
const ENVELOPE_DEPTH: usize = 3;

/// A message as rmcp should get it.
#[derive(Debug, PartialEq)]
pub(crate) enum Screened {
    /// Unchanged (by far the most common case).
    Pass,
    /// A tool list without the tools rmcp could not read; why each was left out.
    Rewritten { message: Vec<u8>, skipped: Vec<String> },
}

/// Only what tells a tool list apart; every other field is skipped without being built
/// (serde_json skips values iteratively, with no depth limit).
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    result: Option<ListProbe<'a>>,
}

#[derive(Deserialize)]
struct ListProbe<'a> {
    #[serde(borrow)]
    tools: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Named {
    name: Option<String>,
}

/// `message` (a stdio line without its newline, an HTTP body, an SSE event's data) as rmcp
/// should get it.
pub(crate) fn screen(message: &[u8]) -> Screened {
    let Ok(Probe { result: Some(ListProbe { tools: Some(tools) }) }) =
        serde_json::from_slice(message)
    else {
        return Screened::Pass; // not a tool list, or not JSON: rmcp decides
    };
    let mut kept = Vec::with_capacity(tools.len());
    let mut skipped = Vec::new();
    for tool in tools {
        match unreadable(tool) {
            None => kept.push(tool),
            Some(why) => skipped.push(why),
        }
    }
    if skipped.is_empty() {
        return Screened::Pass;
    }
    match rewrite(message, &kept) {
        Some(message) => Screened::Rewritten { message, skipped },
        None => Screened::Pass,
    }
}

/// Why rmcp could not read `tool`, or `None` if it can.
fn unreadable(tool: &RawValue) -> Option<String> {
    let name = serde_json::from_str::<Named>(tool.get()).ok().and_then(|n| n.name);
    let name = name.unwrap_or_else(|| "(unnamed)".to_string());
    // Nested as deep as the message nests it, so the depth limit counts as rmcp's will.
    let nested =
        format!("{}{}{}", "[".repeat(ENVELOPE_DEPTH), tool.get(), "]".repeat(ENVELOPE_DEPTH));
    let error = match serde_json::from_str::<Value>(&nested) {
        Err(e) => Some(e),
        Ok(_) => serde_json::from_str::<rmcp::model::Tool>(tool.get()).err(),
    }?;
    let why = match error.classify() {
        serde_json::error::Category::Syntax => "is nested too deep to read",
        _ => "is not a tool description",
    };
    Some(format!("`{name}`: its schema {why} ({error})"))
}

/// The message with `result.tools` replaced by `kept`, every other field as it was.
fn rewrite(line: &[u8], kept: &[&RawValue]) -> Option<Vec<u8>> {
    let mut message: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(line).ok()?;
    let mut result: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(message.get("result")?.get()).ok()?;
    result.insert("tools".into(), serde_json::value::to_raw_value(kept).ok()?);
    message.insert("result".into(), serde_json::value::to_raw_value(&result).ok()?);
    serde_json::to_vec(&message).ok()
}

/// Whom a message was for, read from its first bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Target {
    /// A response to the request with this id.
    Response(Value),
    /// A request or notification from the server: no call of ours waits for it.
    NotAResponse,
    /// Cannot tell (the start ends before the id, or is not JSON).
    Unknown,
}

/// Whom the message starting with `prefix` (cut anywhere) was for.
pub(crate) fn target(prefix: &[u8]) -> Target {
    #[derive(Default)]
    struct Seen {
        id: Option<Value>,
        response: bool,
        method: bool,
    }
    struct Keys<'a>(&'a mut Seen);
    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            // Keys in the order they come; stop as soon as the kind and the id are known,
            // before the (cut) payload.
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "id" => self.0.id = Some(map.next_value()?),
                    "result" | "error" => self.0.response = true,
                    "method" => self.0.method = true,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                }
                if self.0.method || (self.0.response && self.0.id.is_some()) {
                    return Ok(());
                }
                if self.0.response {
                    map.next_value::<IgnoredAny>()?; // the payload: usually cut
                }
            }
            Ok(())
        }
    }
    let mut seen = Seen::default();
    let mut de = serde_json::Deserializer::from_slice(prefix);
    // The prefix is cut: the parse ends in an error once the kind and id are known, or before.
    let _ = serde::Deserializer::deserialize_map(&mut de, Keys(&mut seen));
    match seen {
        Seen { method: true, .. } => Target::NotAResponse,
        Seen { response: true, id: Some(id), .. } => Target::Response(id),
        _ => Target::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deep(n: usize) -> String {
        format!("{}{{}}{}", r#"{"items":"#.repeat(n), "}".repeat(n))
    }

    #[test]
    fn a_tool_list_loses_only_the_tools_rmcp_cannot_read() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"tools":[
                {{"name":"add","inputSchema":{{"type":"object"}}}},
                {{"name":"deep","inputSchema":{{"type":"object","properties":{{"x":{}}}}}}},
                {{"name":"odd","inputSchema":"not an object"}},
                {{"name":"echo","inputSchema":{{"type":"object"}}}}],"nextCursor":"n"}}}}"#,
            deep(10_000)
        );
        let Screened::Rewritten { message: line, skipped } = screen(line.as_bytes()) else {
            panic!("rewritten")
        };
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].starts_with("`deep`: its schema is nested too deep"), "{skipped:?}");
        assert!(skipped[1].starts_with("`odd`: its schema is not a tool description"));
        let message: Value = serde_json::from_slice(&line).unwrap();
        let names: Vec<&str> = message["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["add", "echo"]);
        assert_eq!(message["result"]["nextCursor"], "n");
        assert_eq!(message["id"], 2);
    }

    #[test]
    fn other_lines_pass_unchanged() {
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}}"#;
        assert_eq!(screen(list.as_bytes()), Screened::Pass);
        let call = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":{}}}}}"#, deep(500));
        assert_eq!(screen(call.as_bytes()), Screened::Pass);
        assert_eq!(screen(b"not json"), Screened::Pass);
    }

    #[test]
    fn the_target_of_a_cut_message_is_read_from_its_start() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"text":"{}"#,
            "x".repeat(100)
        );
        assert_eq!(target(big.as_bytes()), Target::Response(json!(7)));
        let err = r#"{"error":{"code":1,"message":"m"},"id":"a","jsonrpc":"2.0"}"#;
        assert_eq!(target(err.as_bytes()), Target::Response(json!("a")));
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"x":"xxxx"#;
        assert_eq!(target(note.as_bytes()), Target::NotAResponse);
        let request = r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"#;
        assert_eq!(target(request.as_bytes()), Target::NotAResponse);
        // The TypeScript SDK writes the result first: its id comes after the cut.
        let ts = format!(r#"{{"result":{{"content":[{{"text":"{}"#, "x".repeat(100));
        assert_eq!(target(ts.as_bytes()), Target::Unknown);
    }
}
