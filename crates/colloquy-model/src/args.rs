//! The one argument path for every non-raw tool (§5, decision 19): strict
//! parse, canonical text, lax schema validation. Typed tools then deserialize with serde.
//!
//! ```
//! use colloquy_model::{parse_arguments, validate_arguments};
//! use serde_json::json;
//! let parsed = parse_arguments("get_weather", r#"{"location":"Tokyo","days":"2"}"#).unwrap();
//! assert_eq!(parsed.canonical, r#"{"location": "Tokyo", "days": "2"}"#);
//! let schema = json!({"type": "object",
//!     "properties": {"location": {"type": "string"}, "days": {"type": "integer", "default": 1}},
//!     "required": ["location"]});
//! let valid = validate_arguments("get_weather", &schema, parsed.value).unwrap();
//! assert_eq!(valid, json!({"location": "Tokyo", "days": 2}));
//! let err = validate_arguments("get_weather", &schema, Default::default()).unwrap_err();
//! assert_eq!(err.to_string(), "Error parsing arguments for `get_weather`: location: missing");
//! ```

use std::fmt::{self, Write as _};

use serde_json::{Map, Value};

use crate::schema::Validator;

/// Arguments that parsed: the decoded object and its canonical text.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedArguments {
    /// The decoded argument object.
    pub value: Map<String, Value>,
    /// Canonical text (§5.1): keys in original order, `", "` and `": "`, non-ASCII escaped.
    pub canonical: String,
}

/// Arguments that did not parse or validate. Its `Display` is exactly the text the model sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgumentError {
    tool: String,
    detail: String,
}

impl ArgumentError {
    /// An argument error for `tool` with the given detail (after the standard prefix).
    pub fn new(tool: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { tool: tool.into(), detail: detail.into() }
    }

    /// The detail after the prefix.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", crate::text::argument_error_prefix(&self.tool), self.detail)
    }
}

impl std::error::Error for ArgumentError {}

fn head(text: &str) -> String {
    text.chars().take(200).collect()
}

fn python_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Parses the model's argument text (§5.1): empty is `{}`, strict JSON (no lenient repair),
/// double-encoded strings are decoded again, `null` is `{}`, anything else must be an object.
pub fn parse_arguments(tool: &str, text: &str) -> Result<ParsedArguments, ArgumentError> {
    let err = |detail: String| ArgumentError::new(tool, detail);
    let mut value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str::<Value>(text).map_err(|e| {
            err(format!("could not parse function arguments as JSON: {e}: {}", head(text)))
        })?
    };
    while let Value::String(inner) = value {
        value = serde_json::from_str::<Value>(&inner).map_err(|_| {
            err(format!("function arguments decoded to a non-JSON string: {}", head(&inner)))
        })?;
    }
    let value = match value {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        other => {
            let kind = python_type_name(&other);
            return Err(err(format!(
                "expected dict from function arguments, got {kind}: {}",
                head(&other.to_string())
            )));
        }
    };
    // Canonical text without cloning the map into a `Value` first (a hot path: every call).
    let mut canonical = String::with_capacity(text.len() + 8);
    write_object(&value, &mut canonical);
    Ok(ParsedArguments { value, canonical })
}

/// Validates parsed arguments against a tool's JSON schema with the lax rules of §5.2,
/// returning the validated object (defaults filled, numbers coerced, extra keys dropped).
/// Problems are listed one `<field>: <kind>` per line after the standard prefix.
pub fn validate_arguments(
    tool: &str,
    schema: &Value,
    arguments: Map<String, Value>,
) -> Result<Value, ArgumentError> {
    let mut validator = Validator::new(schema);
    let value = validator.validate(schema, Value::Object(arguments), "");
    if validator.problems.is_empty() {
        return Ok(value);
    }
    let detail = validator
        .problems
        .iter()
        .map(|p| {
            let path = if p.path.is_empty() { "arguments" } else { &p.path };
            format!("{path}: {}", p.kind)
        })
        .collect::<Vec<_>>()
        .join("\n");
    Err(ArgumentError::new(tool, detail))
}

/// Canonical JSON text (§5.1), as Python's `json.dumps` writes it: keys in their order,
/// `", "` between items, `": "` after keys, non-ASCII characters escaped as `\uXXXX`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_string(k, out);
        out.push_str(": ");
        write_canonical(v, out);
    }
    out.push('}');
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "days": {"type": "integer", "default": 1, "minimum": 1, "maximum": 14},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "ratio": {"type": "number"}
            },
            "required": ["location"]
        })
    }

    fn parse(text: &str) -> Result<ParsedArguments, String> {
        parse_arguments("get_weather", text).map_err(|e| e.to_string())
    }

    fn validate(args: Value) -> Result<Value, String> {
        let Value::Object(map) = args else { panic!("object expected") };
        validate_arguments("get_weather", &weather_schema(), map).map_err(|e| e.to_string())
    }

    #[test]
    fn empty_text_and_null_are_empty_objects() {
        assert_eq!(parse("").unwrap().canonical, "{}");
        assert_eq!(parse("  ").unwrap().canonical, "{}");
        assert_eq!(parse("null").unwrap().canonical, "{}");
    }

    #[test]
    fn canonical_text_keeps_key_order_and_python_separators() {
        let p = parse(r#"{"b":1,"a":[1,2,{"x":null}],"c":"é✓"}"#).unwrap();
        assert_eq!(p.canonical, r#"{"b": 1, "a": [1, 2, {"x": null}], "c": "\u00e9\u2713"}"#);
        assert_eq!(canonical_json(&json!({"e": "😀\n"})), r#"{"e": "\ud83d\ude00\n"}"#);
    }

    #[test]
    fn double_encoded_arguments_decode_again() {
        let p = parse(r#""{\"location\":\"Paris\"}""#).unwrap();
        assert_eq!(p.canonical, r#"{"location": "Paris"}"#);
    }

    #[test]
    fn invalid_json_is_an_error_with_the_reference_text() {
        let e = parse("not json at all").unwrap_err();
        assert!(
            e.starts_with(
                "Error parsing arguments for `get_weather`: could not parse function arguments as JSON: "
            ),
            "{e}"
        );
        assert!(e.ends_with(": not json at all"), "{e}");
        let e = parse(r#""plain words""#).unwrap_err();
        assert_eq!(
            e,
            "Error parsing arguments for `get_weather`: function arguments decoded to a non-JSON string: plain words"
        );
        let e = parse("[1, 2]").unwrap_err();
        assert_eq!(
            e,
            "Error parsing arguments for `get_weather`: expected dict from function arguments, got list: [1,2]"
        );
    }

    #[test]
    fn missing_required_argument_names_field_and_kind() {
        assert_eq!(
            validate(json!({})).unwrap_err(),
            "Error parsing arguments for `get_weather`: location: missing"
        );
    }

    #[test]
    fn wrong_type_lists_every_problem() {
        let e = validate(json!({"days": "abc", "location": 3})).unwrap_err();
        assert_eq!(
            e,
            "Error parsing arguments for `get_weather`: days: expected integer\nlocation: expected string"
        );
    }

    #[test]
    fn lax_rules_coerce_fill_and_drop() {
        let v = validate(json!({"location": "x", "days": "3", "ratio": "0.5", "extra": true}));
        assert_eq!(v.unwrap(), json!({"location": "x", "days": 3, "ratio": 0.5, "unit": "c"}));
        let v = validate(json!({"location": "x", "days": 2.0, "ratio": 1}));
        assert_eq!(v.unwrap(), json!({"location": "x", "days": 2, "ratio": 1, "unit": "c"}));
    }

    #[test]
    fn null_for_a_defaulted_parameter_takes_the_default() {
        let v = validate(json!({"location": "x", "days": null}));
        assert_eq!(v.unwrap(), json!({"location": "x", "days": 1, "unit": "c"}));
    }

    #[test]
    fn constraints_are_enforced() {
        let e = validate(json!({"location": "x", "days": 30, "unit": "k"})).unwrap_err();
        assert_eq!(e, "Error parsing arguments for `get_weather`: days: invalid\nunit: invalid");
    }

    #[test]
    fn nested_objects_refs_and_arrays_report_paths() {
        let schema = json!({
            "type": "object",
            "properties": {
                "trip": {"$ref": "#/$defs/Trip"},
                "stops": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                "note": {"type": ["string", "null"]},
                "hotel": {"anyOf": [{"$ref": "#/$defs/Trip"}, {"type": "null"}]}
            },
            "required": ["trip"],
            "$defs": {"Trip": {"type": "object", "properties": {"seats": {"type": "integer",
                "format": "uint8", "minimum": 0}}, "required": ["seats"]}}
        });
        let args = json!({"trip": {"seats": 300}, "stops": ["CDG", "tokyo"], "note": null,
                          "hotel": {}});
        let e = validate_arguments("book", &schema, args.as_object().unwrap().clone()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Error parsing arguments for `book`: trip.seats: invalid\nstops[1]: invalid\nhotel.seats: missing"
        );
    }
}
