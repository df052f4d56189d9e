//! Argument parsing and schema validation on arbitrary JSON and arbitrary schemas, cycles and
//! 10,000-deep nesting included: no panic, no hang, no stack overflow (decision 43).
//! Tool schemas will come from outside the program (MCP servers, scenario files).

use std::time::Instant;

use colloquy_model::schema_check::{SchemaError, check_schema};
use colloquy_model::{
    FunctionTool, RunContext, ToolDeclarationError, ToolError, parse_arguments, validate_arguments,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-z0-9 .]{0,6}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Schemas built from the keywords validation knows, with references that may point back at
/// the root, at a definition, or into themselves.
fn schema() -> impl Strategy<Value = Value> {
    let reference = prop::sample::select(vec![
        "#",
        "#/$defs/d",
        "#/$defs/e",
        "#/properties/a",
        "#/anyOf/0",
        "#/items",
        "#/missing",
    ]);
    let simple = prop_oneof![
        prop::sample::select(vec![
            "string", "integer", "number", "object", "array", "boolean", "null"
        ])
        .prop_map(|t| json!({ "type": t })),
        reference.prop_map(|r| json!({ "$ref": r })),
        json_value().prop_map(|v| json!({ "const": v })),
        Just(json!({ "minimum": 0, "maxLength": 3, "pattern": "^[a-z]*$" })),
        Just(json!(true)),
        Just(json!(false)),
    ];
    simple.prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-c]", inner.clone(), 0..3)
                .prop_map(|p| { json!({ "type": "object", "properties": p, "required": ["a"] }) }),
            inner.clone().prop_map(|i| json!({ "type": "array", "items": i })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|l| json!({ "anyOf": l })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|l| json!({ "allOf": l })),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|l| json!({ "oneOf": l })),
            (inner.clone(), inner.clone())
                .prop_map(|(d, e)| json!({ "$defs": { "d": d, "e": e }, "$ref": "#/$defs/d" })),
            (inner.clone(), json_value())
                .prop_map(|(s, d)| json!({ "additionalProperties": s, "default": d })),
        ]
    })
}

fn tool(schema: Value) -> Result<FunctionTool, ToolDeclarationError> {
    FunctionTool::from_schema(
        "t",
        "",
        schema,
        |_ctx: RunContext, _args: Map<String, Value>| async { Ok::<_, ToolError>("ok") },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the schema (checked or not), validating any arguments ends, without panic.
    #[test]
    fn validation_always_ends(schema in schema(), args in prop::collection::btree_map("[a-c]", json_value(), 0..4)) {
        let args: Map<String, Value> = args.into_iter().collect();
        let checked = check_schema(&schema);
        let root = json!({ "type": "object", "properties": { "a": schema.clone() }, "$defs": { "d": schema.clone(), "e": {} } });
        let started = Instant::now();
        let _ = validate_arguments("t", &schema, args.clone());
        let _ = validate_arguments("t", &root, args);
        // A guard against a regression to unbounded work, far above the real cost (< 50 ms).
        prop_assert!(started.elapsed().as_secs() < 10, "validation took {:?}", started.elapsed());
        // Building a tool applies the same check.
        let object = schema.is_object();
        match (checked, tool(schema)) {
            (Ok(()), Ok(_)) | (Err(_), Err(ToolDeclarationError::UnsafeSchema { .. })) => {}
            // Not an object schema: refused for that first.
            (_, Err(ToolDeclarationError::MissingParameters)) if !object => {}
            (c, t) => prop_assert!(false, "check {c:?} but tool {:?}", t.map(|t| t.name().to_string())),
        }
    }

    /// Any text as arguments: an error or a value, never a panic.
    #[test]
    fn parsing_any_text_ends(text in ".{0,64}") {
        let _ = parse_arguments("t", &text);
    }
}

/// Builds `levels` nested arrays (`[[[…]]]`), or array schemas whose `items` nest as deep,
/// without recursion (`json!` would serialize the inner value again at every level).
fn nested(levels: usize, schema_like: bool) -> Value {
    let mut value = if schema_like { Value::Object(Map::new()) } else { Value::Array(Vec::new()) };
    for _ in 0..levels {
        value = match schema_like {
            true => {
                let mut schema = Map::new();
                schema.insert("items".into(), value);
                schema.insert("type".into(), "array".into());
                Value::Object(schema)
            }
            false => Value::Array(vec![value]),
        };
    }
    value
}

/// Takes a deep value apart one level at a time (dropping it whole would recurse as deep).
fn dismantle(mut value: Value) {
    loop {
        value = match value {
            Value::Array(mut list) if !list.is_empty() => list.swap_remove(0),
            Value::Object(mut map) => match map.remove("items") {
                Some(inner) => inner,
                None => return,
            },
            _ => return,
        };
    }
}

#[test]
fn ten_thousand_levels_are_refused_or_bounded_not_overflowed() {
    let deep_schema = nested(10_000, true);
    assert_eq!(check_schema(&deep_schema), Err(SchemaError::TooDeep));
    // Validation itself stops at its depth bound even on a schema nobody checked.
    let args: Map<String, Value> = [("a".to_string(), json!([[[1]]]))].into_iter().collect();
    let _ = validate_arguments("t", &deep_schema, args);
    dismantle(deep_schema);

    // Arguments 10,000 deep are refused by the parser (its recursion limit), not walked.
    let text = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(parse_arguments("t", &text).is_err());
    let text = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(parse_arguments("t", &text).is_err());
    let value = nested(100, false);
    let text = value.to_string();
    dismantle(value);
    assert!(parse_arguments("t", &format!("{{\"a\":{text}}}")).is_ok(), "100 levels parse");
}

#[test]
fn an_exponential_acyclic_schema_is_cut_off() {
    // Each level tries two branches that both lead to the next level: 2^60 paths, no cycle.
    let mut defs = Map::new();
    for level in 0..60 {
        let next = format!("#/$defs/l{}", level + 1);
        defs.insert(format!("l{level}"), json!({ "anyOf": [{ "$ref": next }, { "$ref": next }] }));
    }
    defs.insert("l60".into(), json!({ "type": "string" }));
    let schema =
        json!({ "$defs": defs, "type": "object", "properties": { "a": { "$ref": "#/$defs/l0" } } });
    assert_eq!(check_schema(&schema), Ok(()), "acyclic and shallow");
    let args: Map<String, Value> = [("a".to_string(), json!(5))].into_iter().collect();
    let started = Instant::now();
    assert!(validate_arguments("t", &schema, args).is_err(), "5 is no string");
    assert!(started.elapsed().as_secs() < 10);
}

#[test]
fn a_self_referencing_schema_is_refused_when_the_tool_is_built() {
    for schema in [json!({"$ref": "#"}), json!({"type": "object", "allOf": [{"$ref": "#"}]})] {
        let Err(error) = tool(schema) else { panic!("a cyclic schema was accepted") };
        assert!(
            error.to_string().starts_with(
                "the parameters schema of `t` is refused: the schema refers to itself without consuming input"
            ),
            "{error}"
        );
    }
    // A recursive type (schemars writes it with `$ref` into `$defs`) is a tool like any other,
    // and validates values as deep as the argument parser admits.
    let tree = json!({
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}
    });
    assert!(tool(tree.clone()).is_ok());
    let deep = nested(120, false);
    let args: Map<String, Value> = [("a".to_string(), deep)].into_iter().collect();
    let validated = validate_arguments("t", &tree, args).expect("120 levels validate");
    dismantle(validated);
}
