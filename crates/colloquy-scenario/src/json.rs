//! Strict reading of JSON objects with paths in errors: every key must be consumed, so an
//! unknown key is reported as `<path>.<key>: unknown key`.

/// The longest time a scenario may name: a year, in milliseconds.
pub(crate) const MAX_MS: u64 = 365 * 24 * 3600 * 1000;

use serde_json::{Map, Value};

use crate::ScenarioError;

/// A JSON object being read, with its path (`tools.book.body[2]`).
pub(crate) struct Obj {
    map: Map<String, Value>,
    pub path: String,
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

pub(crate) fn invalid(path: &str, what: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::File(format!("{path}: {what}"))
}

impl Obj {
    /// Reads `value` at `path` as an object.
    pub(crate) fn new(value: Value, path: impl Into<String>) -> Result<Self, ScenarioError> {
        let path = path.into();
        match value {
            Value::Object(map) => Ok(Self { map, path }),
            other => Err(invalid(&path, format!("expected an object, got {}", kind(&other)))),
        }
    }

    pub(crate) fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The keys still unread, in file order.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    pub(crate) fn string(&mut self, key: &str) -> Result<Option<String>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected a string, got {}", kind(&other))))
            }
        }
    }

    pub(crate) fn required_string(&mut self, key: &str) -> Result<String, ScenarioError> {
        self.string(key)?.ok_or_else(|| invalid(&self.at(key), "missing"))
    }

    pub(crate) fn bool(&mut self, key: &str) -> Result<Option<bool>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected a boolean, got {}", kind(&other))))
            }
        }
    }

    /// A non-negative integer; `null` reads as absent.
    pub(crate) fn u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(invalid(
                &self.at(key),
                format!("expected a non-negative integer, got {}", kind(&other)),
            )),
        }
    }

    /// A duration in milliseconds, refused past [`MAX_MS`]: the runner honours every time
    /// exactly or not at all (tokio's timers stop being exact far out).
    pub(crate) fn millis(
        &mut self,
        key: &str,
    ) -> Result<Option<std::time::Duration>, ScenarioError> {
        match self.u64(key)? {
            Some(n) if n > MAX_MS => Err(invalid(
                &self.at(key),
                format!(
                    "{n} ms is more than the runner can wait exactly (at most {MAX_MS} ms, a year)"
                ),
            )),
            other => Ok(other.map(std::time::Duration::from_millis)),
        }
    }

    /// As [`millis`](Self::millis), refusing 0 (a limit that fires before anything runs).
    pub(crate) fn positive_millis(
        &mut self,
        key: &str,
    ) -> Result<Option<std::time::Duration>, ScenarioError> {
        match self.millis(key)? {
            Some(d) if d.is_zero() => Err(invalid(&self.at(key), "must be at least 1 ms")),
            other => Ok(other),
        }
    }

    /// Milliseconds, `null`, or absent: `default` when absent, `None` for `null`.
    pub(crate) fn millis_or_null(
        &mut self,
        key: &str,
        default: Option<std::time::Duration>,
    ) -> Result<Option<std::time::Duration>, ScenarioError> {
        match self.take(key) {
            None => Ok(default),
            Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n <= MAX_MS) => {
                Ok(n.as_u64().map(std::time::Duration::from_millis))
            }
            Some(other) => Err(invalid(
                &self.at(key),
                format!("expected milliseconds (at most {MAX_MS}) or null, got {}", kind(&other)),
            )),
        }
    }

    pub(crate) fn array(&mut self, key: &str) -> Result<Vec<Value>, ScenarioError> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected an array, got {}", kind(&other))))
            }
        }
    }

    pub(crate) fn strings(&mut self, key: &str) -> Result<Vec<String>, ScenarioError> {
        let at = self.at(key);
        self.array(key)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                other => Err(invalid(
                    &format!("{at}[{i}]"),
                    format!("expected a string, got {}", kind(&other)),
                )),
            })
            .collect()
    }

    /// An object-valued key, as an ordered map of entries.
    pub(crate) fn entries(&mut self, key: &str) -> Result<Vec<(String, Value)>, ScenarioError> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Object(map)) => Ok(map.into_iter().collect()),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected an object, got {}", kind(&other))))
            }
        }
    }

    /// Fails on the first key nobody read.
    pub(crate) fn finish(self) -> Result<(), ScenarioError> {
        match self.map.keys().next() {
            Some(key) => Err(invalid(&join(&self.path, key), "unknown key")),
            None => Ok(()),
        }
    }
}

pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses JSON text, refusing an object that names a key twice (`serde_json::Value` would
/// keep the last one silently); serde_json's error says where.
pub(crate) fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|strict| strict.0)
}

/// A JSON value read with duplicate keys refused.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// `N` milliseconds.
pub(crate) fn ms(v: u64) -> std::time::Duration {
    std::time::Duration::from_millis(v)
}

/// A flag that can only be `true` (`{"wait_idle": true}`).
pub(crate) fn expect_true(value: Option<Value>, path: &str) -> Result<(), ScenarioError> {
    match value {
        Some(Value::Bool(true)) => Ok(()),
        _ => Err(invalid(path, "expected true")),
    }
}
