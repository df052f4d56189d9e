//! Strict reading of JSON objects with paths in errors: every key must be consumed, so an
//! unknown key is reported as `<path>.<key>: unknown key`.

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
    pub fn new(value: Value, path: impl Into<String>) -> Result<Self, ScenarioError> {
        let path = path.into();
        match value {
            Value::Object(map) => Ok(Self { map, path }),
            other => Err(invalid(&path, format!("expected an object, got {}", kind(&other)))),
        }
    }

    pub fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The keys still unread, in file order.
    pub fn keys(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    pub fn string(&mut self, key: &str) -> Result<Option<String>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected a string, got {}", kind(&other))))
            }
        }
    }

    pub fn required_string(&mut self, key: &str) -> Result<String, ScenarioError> {
        self.string(key)?.ok_or_else(|| invalid(&self.at(key), "missing"))
    }

    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, ScenarioError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected a boolean, got {}", kind(&other))))
            }
        }
    }

    /// A non-negative integer; `null` reads as absent.
    pub fn u64(&mut self, key: &str) -> Result<Option<u64>, ScenarioError> {
        match self.take(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(invalid(
                &self.at(key),
                format!("expected a non-negative integer, got {}", kind(&other)),
            )),
        }
    }

    pub fn array(&mut self, key: &str) -> Result<Vec<Value>, ScenarioError> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected an array, got {}", kind(&other))))
            }
        }
    }

    pub fn strings(&mut self, key: &str) -> Result<Vec<String>, ScenarioError> {
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
    pub fn entries(&mut self, key: &str) -> Result<Vec<(String, Value)>, ScenarioError> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Object(map)) => Ok(map.into_iter().collect()),
            Some(other) => {
                Err(invalid(&self.at(key), format!("expected an object, got {}", kind(&other))))
            }
        }
    }

    /// Fails on the first key nobody read.
    pub fn finish(self) -> Result<(), ScenarioError> {
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
