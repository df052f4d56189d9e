//! What a `tools/call` result becomes: the text the model reads. Every content block is kept:
//! text as it is, anything else described (its kind, MIME type, size or URI), never dropped.

use serde_json::Value;

/// The output text of a tool result's `content` blocks (serialised as the protocol sends
/// them), one block per paragraph; `structured` (the result's `structuredContent`) when there
/// is no content at all.
pub fn render(content: &[Value], structured: Option<&Value>) -> String {
    if content.is_empty() {
        return structured.map(Value::to_string).unwrap_or_default();
    }
    content.iter().map(block).collect::<Vec<_>>().join("\n\n")
}

fn block(value: &Value) -> String {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    let size = |key: &str| value.get(key).and_then(Value::as_str).map_or(0, |b| b.len() * 3 / 4);
    match text("type") {
        "text" => text("text").to_string(),
        "image" | "audio" => {
            format!("[{} {}, {} bytes]", text("type"), text("mimeType"), size("data"))
        }
        "resource" => {
            let resource = value.get("resource").unwrap_or(&Value::Null);
            let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
            match resource.get("text").and_then(Value::as_str) {
                Some(body) => format!("[resource {uri}]\n{body}"),
                None => {
                    let blob = resource.get("blob").and_then(Value::as_str).unwrap_or("");
                    format!("[resource {uri}, {} bytes]", blob.len() * 3 / 4)
                }
            }
        }
        "resource_link" => format!("[resource link {} {}]", text("uri"), text("name")),
        other => format!("[{other} content]"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_block_is_kept() {
        let content = [
            json!({"type": "text", "text": "The sum is 3."}),
            json!({"type": "image", "mimeType": "image/png", "data": "AAAA"}),
            json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}),
            json!({"type": "resource_link", "uri": "file:///b", "name": "b"}),
        ];
        assert_eq!(
            render(&content, None),
            "The sum is 3.\n\n[image image/png, 3 bytes]\n\n[resource file:///a.txt]\nhello\n\n\
             [resource link file:///b b]"
        );
    }

    #[test]
    fn structured_content_when_there_is_no_block() {
        assert_eq!(render(&[], Some(&json!({"sum": 3}))), r#"{"sum":3}"#);
        assert_eq!(render(&[], None), "");
    }
}
