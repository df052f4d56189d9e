//! Placeholders in scenario tool bodies: `{name}` is an argument after validation. A string
//! that is exactly one placeholder takes the argument's JSON value; inside a longer string the
//! argument's text (a string) or compact JSON (anything else) is substituted; `{{` and `}}`
//! are literal braces. Unknown names are rejected when the file is parsed.

use serde_json::{Map, Value};

use crate::ScenarioError;
use crate::json::invalid;

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Text(String),
    Param(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Literal(Value),
    Whole(String),
    Text(Vec<Segment>),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// A JSON value with placeholders.
#[derive(Clone, Debug, PartialEq)]
pub struct Template(Node);

impl Template {
    /// Parses `value`, checking every placeholder against the declared parameter names.
    pub fn parse(value: Value, declared: &[String], path: &str) -> Result<Self, ScenarioError> {
        parse_node(value, declared, path).map(Template)
    }

    /// The value with arguments substituted.
    pub fn render(&self, args: &Map<String, Value>) -> Value {
        render_node(&self.0, args)
    }

    /// The rendered value as text: a string as is, anything else as compact JSON.
    pub fn render_text(&self, args: &Map<String, Value>) -> String {
        match self.render(args) {
            Value::String(s) => s,
            other => other.to_string(),
        }
    }
}

fn parse_node(value: Value, declared: &[String], path: &str) -> Result<Node, ScenarioError> {
    Ok(match value {
        Value::String(s) => {
            let segments = segments(&s, path)?;
            for segment in &segments {
                if let Segment::Param(name) = segment
                    && !declared.iter().any(|d| d == name)
                {
                    return Err(invalid(path, format!("unknown placeholder `{{{name}}}`")));
                }
            }
            match segments.as_slice() {
                [Segment::Param(name)] => Node::Whole(name.clone()),
                _ if segments.iter().all(|s| matches!(s, Segment::Text(_))) => {
                    Node::Literal(Value::String(segments.into_iter().map(text_of).collect()))
                }
                _ => Node::Text(segments),
            }
        }
        Value::Array(items) => Node::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| parse_node(v, declared, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Node::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let child = format!("{path}.{k}");
                    parse_node(v, declared, &child).map(|n| (k, n))
                })
                .collect::<Result<_, _>>()?,
        ),
        other => Node::Literal(other),
    })
}

fn text_of(segment: Segment) -> String {
    match segment {
        Segment::Text(t) | Segment::Param(t) => t,
    }
}

fn segments(s: &str, path: &str) -> Result<Vec<Segment>, ScenarioError> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err(invalid(path, "unclosed `{` (write `{{` for a brace)")),
                    }
                }
                if !text.is_empty() {
                    out.push(Segment::Text(std::mem::take(&mut text)));
                }
                out.push(Segment::Param(name));
            }
            '}' => return Err(invalid(path, "single `}` (write `}}` for a brace)")),
            c => text.push(c),
        }
    }
    if !text.is_empty() || out.is_empty() {
        out.push(Segment::Text(text));
    }
    Ok(out)
}

fn render_node(node: &Node, args: &Map<String, Value>) -> Value {
    match node {
        Node::Literal(v) => v.clone(),
        Node::Whole(name) => args.get(name).cloned().unwrap_or(Value::Null),
        Node::Text(segments) => {
            let mut out = String::new();
            for segment in segments {
                match segment {
                    Segment::Text(t) => out.push_str(t),
                    Segment::Param(name) => match args.get(name) {
                        Some(Value::String(s)) => out.push_str(s),
                        Some(other) => out.push_str(&other.to_string()),
                        None => out.push_str("null"),
                    },
                }
            }
            Value::String(out)
        }
        Node::Array(items) => Value::Array(items.iter().map(|n| render_node(n, args)).collect()),
        Node::Object(entries) => {
            Value::Object(entries.iter().map(|(k, n)| (k.clone(), render_node(n, args))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> Vec<String> {
        vec!["origin".into(), "seats".into()]
    }

    fn render(v: Value) -> Value {
        let args = json!({"origin": "Paris", "seats": 2}).as_object().unwrap().clone();
        Template::parse(v, &declared(), "t").unwrap().render(&args)
    }

    #[test]
    fn whole_placeholders_keep_json_values_and_embedded_ones_become_text() {
        assert_eq!(
            render(json!({"booking": "BK-1", "seats": "{seats}", "from": "{origin}"})),
            json!({"booking": "BK-1", "seats": 2, "from": "Paris"})
        );
        assert_eq!(render(json!("{seats} seats from {origin}")), json!("2 seats from Paris"));
        assert_eq!(render(json!("{{literal}} {origin}")), json!("{literal} Paris"));
        assert_eq!(render(json!(null)), json!(null));
    }

    #[test]
    fn unknown_or_malformed_placeholders_are_file_errors() {
        let e = Template::parse(json!("hi {who}"), &declared(), "tools.t.body[0].return");
        assert_eq!(
            e.unwrap_err().to_string(),
            "tools.t.body[0].return: unknown placeholder `{who}`"
        );
        assert!(Template::parse(json!("open {origin"), &declared(), "p").is_err());
        assert!(Template::parse(json!("close }"), &declared(), "p").is_err());
    }
}
