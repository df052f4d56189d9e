//! Lax validation of a JSON value against a tool's JSON schema (§5.2,
//! decision 19): numeric strings coerce to numbers, `1` equals `1.0`, extra keys are dropped,
//! defaults are filled, `null` for a defaulted non-nullable property takes the default.
//!
//! Covers what schemars and hand-written tool schemas use: `type` (one or a list), `properties`,
//! `required`, `default`, `additionalProperties`, `items`, `enum`, `const`, `$ref` into
//! `$defs`/`definitions`, `anyOf`/`oneOf`/`allOf`, numeric and length bounds, integer `format`s
//! and `pattern`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Number, Value};

/// One validation problem: where, and what kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub path: String,
    pub kind: String,
}

/// How many schemas validation may follow inside one another (references and branches
/// included). Tools built from outside schemas are checked for cycles when they are built
/// (`schema_check`); this bounds the stack whatever the schema and the value.
pub(crate) const MAX_VALIDATION_DEPTH: usize = 256;

/// How many schemas one validation may apply in all: branches tried in turn can multiply the
/// work of an acyclic schema exponentially (`anyOf` of two references to the next level, sixty
/// levels down), which no cycle check sees.
pub(crate) const MAX_VALIDATION_STEPS: usize = 100_000;

pub(crate) struct Validator<'a> {
    root: &'a Value,
    pub problems: Vec<Problem>,
    depth: usize,
    /// Schemas this validation may still apply.
    budget: usize,
}

impl<'a> Validator<'a> {
    pub(crate) fn new(root: &'a Value) -> Self {
        Self { root, problems: Vec::new(), depth: 0, budget: MAX_VALIDATION_STEPS }
    }

    /// A validator for a branch tried on its own, as deep as this one and drawing on the same
    /// budget (see [`Validator::rejoin`]).
    fn nested(&self) -> Self {
        Self { root: self.root, problems: Vec::new(), depth: self.depth, budget: self.budget }
    }

    /// Takes back what a nested validator left of the budget.
    fn rejoin(&mut self, nested: &Validator) {
        self.budget = nested.budget;
    }

    fn problem(&mut self, path: &str, kind: impl Into<String>) {
        self.problems.push(Problem { path: path.to_string(), kind: kind.into() });
    }

    /// Validates `value` against `schema`, returning the coerced value.
    pub(crate) fn validate(&mut self, schema: &'a Value, value: Value, path: &str) -> Value {
        if self.depth >= MAX_VALIDATION_DEPTH {
            let kind = format!("invalid (nested deeper than {MAX_VALIDATION_DEPTH} schemas)");
            self.problem(path, kind);
            return value;
        }
        if self.budget == 0 {
            let kind = format!("invalid (the schema needs more than {MAX_VALIDATION_STEPS} steps)");
            self.problem(path, kind);
            return value;
        }
        self.budget -= 1;
        self.depth += 1;
        let value = self.validate_within(schema, value, path);
        self.depth -= 1;
        value
    }

    fn validate_within(&mut self, schema: &'a Value, value: Value, path: &str) -> Value {
        let schema = match schema {
            Value::Bool(true) => return value,
            Value::Bool(false) => {
                self.problem(path, "invalid");
                return value;
            }
            Value::Object(s) => s,
            _ => return value,
        };
        if let Some(target) = kw(schema, "$ref").and_then(Value::as_str) {
            match self.resolve(target) {
                Some(resolved) => return self.validate(resolved, value, path),
                None => {
                    self.problem(path, format!("invalid (unresolvable schema reference {target})"));
                    return value;
                }
            }
        }
        let mut value = value;
        if let Some(Value::Array(all)) = kw(schema, "allOf") {
            for sub in all {
                value = self.validate(sub, value, path);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = kw(schema, key) {
                value = self.validate_branches(branches, value, path);
            }
        }
        if let Some(types) = kw(schema, "type") {
            match self.check_type(types, value, path) {
                Some(v) => value = v,
                None => return Value::Null,
            }
        }
        if let Some(Value::Array(options)) = kw(schema, "enum")
            && !options.iter().any(|o| json_eq(o, &value))
        {
            self.problem(path, "invalid");
        }
        if let Some(expected) = kw(schema, "const")
            && !json_eq(expected, &value)
        {
            self.problem(path, "invalid");
        }
        match value {
            Value::Object(map) => Value::Object(self.validate_object(schema, map, path)),
            Value::Array(items) => Value::Array(self.validate_array(schema, items, path)),
            Value::Number(ref n) => {
                self.check_number_bounds(schema, n, path);
                value
            }
            Value::String(ref s) => {
                self.check_string_bounds(schema, s, path);
                value
            }
            other => other,
        }
    }

    /// Whether a property schema admits `null` (directly, through a type list, or a branch).
    fn accepts_null(&mut self, schema: &'a Value) -> bool {
        let mut v = self.nested();
        v.validate(schema, Value::Null, "");
        self.rejoin(&v);
        v.problems.is_empty()
    }

    fn resolve(&self, target: &str) -> Option<&'a Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    /// Tries each branch on its own; the first that validates cleanly wins. When none does,
    /// the problems of the only non-null branch are reported (an `Option<Struct>` then reports
    /// the struct's fields), otherwise `invalid`.
    fn validate_branches(&mut self, branches: &'a [Value], value: Value, path: &str) -> Value {
        let mut first_failure: Option<Vec<Problem>> = None;
        for branch in branches {
            let mut sub = self.nested();
            let coerced = sub.validate(branch, value.clone(), path);
            self.rejoin(&sub);
            if sub.problems.is_empty() {
                return coerced;
            }
            if first_failure.is_none() && !is_null_schema(branch) {
                first_failure = Some(sub.problems);
            }
        }
        let non_null = branches.iter().filter(|b| !is_null_schema(b)).count();
        match first_failure {
            Some(problems) if non_null == 1 => self.problems.extend(problems),
            _ => self.problem(path, "invalid"),
        }
        value
    }

    /// Checks (and leniently coerces) the value's type. `None` means the type did not match.
    fn check_type(&mut self, types: &Value, value: Value, path: &str) -> Option<Value> {
        let names: Vec<&str> = match types {
            Value::String(s) => vec![s.as_str()],
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => return Some(value),
        };
        if names.iter().any(|t| type_matches(t, &value)) {
            return Some(normalise_integer(&names, value));
        }
        for t in &names {
            if let Some(coerced) = coerce(t, &value) {
                return Some(coerced);
            }
        }
        let expected: Vec<&str> = names.iter().copied().filter(|t| *t != "null").collect();
        let expected = if expected.is_empty() { names.clone() } else { expected };
        self.problem(path, format!("expected {}", expected.join(" or ")));
        None
    }

    fn validate_object(
        &mut self,
        schema: &'a Map<String, Value>,
        map: Map<String, Value>,
        path: &str,
    ) -> Map<String, Value> {
        let properties = kw(schema, "properties").and_then(Value::as_object);
        let required: Vec<&str> = kw(schema, "required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        // Keys the model sent come first, in its order; defaults are appended after them.
        for (key, value) in map {
            let child = join_path(path, &key);
            match properties.and_then(|p| kw(p, &key)) {
                Some(prop) => {
                    let default = prop.as_object().and_then(|p| kw(p, "default"));
                    let value = match (value, default) {
                        (Value::Null, Some(d)) if !self.accepts_null(prop) => d.clone(),
                        (v, _) => v,
                    };
                    let v = self.validate(prop, value, &child);
                    out.insert(key, v);
                }
                None => match kw(schema, "additionalProperties") {
                    Some(Value::Bool(true)) => {
                        out.insert(key, value);
                    }
                    Some(extra @ Value::Object(_)) => {
                        let v = self.validate(extra, value, &child);
                        out.insert(key, v);
                    }
                    // Extra keys are ignored (decision 19).
                    _ => {}
                },
            }
        }
        for (name, prop) in properties.into_iter().flatten() {
            if out.contains_key(name) {
                continue;
            }
            if let Some(default) = prop.as_object().and_then(|p| kw(p, "default")) {
                out.insert(name.clone(), default.clone());
            } else if required.contains(&name.as_str()) {
                self.problem(&join_path(path, name), "missing");
            }
        }
        out
    }

    fn validate_array(
        &mut self,
        schema: &'a Map<String, Value>,
        items: Vec<Value>,
        path: &str,
    ) -> Vec<Value> {
        let len = items.len() as u64;
        if kw(schema, "minItems").and_then(Value::as_u64).is_some_and(|m| len < m)
            || kw(schema, "maxItems").and_then(Value::as_u64).is_some_and(|m| len > m)
        {
            self.problem(path, "invalid");
        }
        match kw(schema, "items") {
            Some(item_schema) if item_schema.is_object() || item_schema.is_boolean() => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| self.validate(item_schema, v, &format!("{path}[{i}]")))
                .collect(),
            _ => items,
        }
    }

    fn check_number_bounds(&mut self, schema: &Map<String, Value>, n: &Number, path: &str) {
        let Some(x) = n.as_f64() else { return };
        let bound = |key: &str| kw(schema, key).and_then(Value::as_f64);
        let mut ok = bound("minimum").is_none_or(|m| x >= m)
            && bound("maximum").is_none_or(|m| x <= m)
            && bound("exclusiveMinimum").is_none_or(|m| x > m)
            && bound("exclusiveMaximum").is_none_or(|m| x < m)
            && bound("multipleOf").is_none_or(|m| m == 0.0 || (x / m).fract() == 0.0);
        if let Some((lo, hi)) = kw(schema, "format").and_then(Value::as_str).and_then(integer_range)
        {
            ok &= x >= lo && x <= hi;
        }
        if !ok {
            self.problem(path, "invalid");
        }
    }

    fn check_string_bounds(&mut self, schema: &Map<String, Value>, s: &str, path: &str) {
        let chars = s.chars().count() as u64;
        let mut ok = kw(schema, "minLength").and_then(Value::as_u64).is_none_or(|m| chars >= m)
            && kw(schema, "maxLength").and_then(Value::as_u64).is_none_or(|m| chars <= m);
        if let Some(pattern) = kw(schema, "pattern").and_then(Value::as_str) {
            // An invalid pattern in a schema is the tool author's bug; it does not fail calls.
            ok &= pattern_matches(pattern, s).unwrap_or(true);
        }
        if !ok {
            self.problem(path, "invalid");
        }
    }
}

/// Whether `s` matches a schema's `pattern`; `None` for a pattern that does not compile.
/// Compiled patterns are kept by their text (a tool's schema is checked on every call, and
/// compiling a regular expression costs far more than running it); the cache starts over
/// past 1,024 patterns.
fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    type Cache = HashMap<String, Option<regex::Regex>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let mut cache =
        CACHE.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !cache.contains_key(pattern) {
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), regex::Regex::new(pattern).ok());
    }
    cache.get(pattern)?.as_ref().map(|re| re.is_match(s))
}

/// A schema keyword. Schema objects hold a handful of keys, so comparing them in order is
/// cheaper than hashing the key (validation looks up a dozen keywords per value).
fn kw<'s>(schema: &'s Map<String, Value>, key: &str) -> Option<&'s Value> {
    if schema.len() > 16 {
        return schema.get(key);
    }
    schema.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
}

fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.as_object().and_then(|s| kw(s, "type")).and_then(Value::as_str) == Some("null")
}

fn type_matches(t: &str, value: &Value) -> bool {
    match (t, value) {
        ("null", Value::Null) | ("boolean", Value::Bool(_)) => true,
        ("string", Value::String(_)) | ("array", Value::Array(_)) => true,
        ("object", Value::Object(_)) | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        }
        _ => false,
    }
}

/// `1.0` given for an integer becomes `1` so that serde's integer types accept it.
fn normalise_integer(types: &[&str], value: Value) -> Value {
    match &value {
        Value::Number(n) if types.contains(&"integer") && !types.contains(&"number") => {
            match (n.is_f64(), n.as_f64()) {
                (true, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
                _ => value,
            }
        }
        _ => value,
    }
}

/// Lax coercions: numeric strings become numbers.
fn coerce(t: &str, value: &Value) -> Option<Value> {
    let Value::String(s) = value else { return None };
    let s = s.trim();
    match t {
        "integer" => {
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            if let Ok(u) = s.parse::<u64>() {
                return Some(Value::from(u));
            }
            let f = s.parse::<f64>().ok()?;
            (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15).then(|| Value::from(f as i64))
        }
        "number" => {
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok()?;
            Number::from_f64(f).map(Value::Number)
        }
        _ => None,
    }
}

/// Numeric equality across integer and float forms (`1 == 1.0`); structural otherwise.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(fx), Some(fy)) if x.is_f64() || y.is_f64() => fx == fy,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn integer_range(format: &str) -> Option<(f64, f64)> {
    Some(match format {
        "int8" => (i8::MIN as f64, i8::MAX as f64),
        "int16" => (i16::MIN as f64, i16::MAX as f64),
        "int32" => (i32::MIN as f64, i32::MAX as f64),
        "int64" => (i64::MIN as f64, i64::MAX as f64),
        "uint8" => (0.0, u8::MAX as f64),
        "uint16" => (0.0, u16::MAX as f64),
        "uint32" => (0.0, u32::MAX as f64),
        "uint64" | "uint" => (0.0, u64::MAX as f64),
        _ => return None,
    })
}
