//! Schemas from outside the program are untrusted (a tool server's, a scenario file's): a tool
//! is refused when it is built if validation against its schema could never end or could
//! exhaust the stack. Two rules, checked without recursion:
//!
//! - **No reference cycle that consumes nothing.** `$ref`, `allOf`, `anyOf`, `oneOf`, `not`,
//!   `if` / `then` / `else` and `dependentSchemas` apply to the same value; following them in
//!   a circle (`{"$ref": "#"}`, `{"allOf": [{"$ref": "#"}]}`) never reaches a smaller value.
//!   A recursive schema whose cycle goes through `properties`, `items` and the like (a tree
//!   type; schemars writes recursive types so) moves to a child value on each turn and is
//!   fine: the value's depth bounds it.
//! - **Bounded nesting** ([`MAX_SCHEMA_DEPTH`] JSON levels, counted without recursion) and
//!   local references that resolve.

use std::collections::HashMap;

use serde_json::Value;

/// The deepest nesting of JSON arrays and objects a tool schema may have (each level of
/// `properties` takes two).
pub const MAX_SCHEMA_DEPTH: usize = 256;

/// Why a schema is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A circle of references that applies to the same value.
    #[error(
        "the schema refers to itself without consuming input (at `#{0}`): validation would \
         never end"
    )]
    Cycle(String),
    /// Nested deeper than [`MAX_SCHEMA_DEPTH`].
    #[error("the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")]
    TooDeep,
    /// A `#…` reference that points nowhere.
    #[error("the schema reference `{0}` points to nothing in the schema")]
    Unresolvable(String),
}

/// Keywords whose schemas apply to the same value.
const SAME_VALUE_LISTS: [&str; 3] = ["allOf", "anyOf", "oneOf"];
const SAME_VALUE_ONE: [&str; 4] = ["not", "if", "then", "else"];
/// Keywords whose schemas apply to a child value.
const CHILD_MAPS: [&str; 2] = ["properties", "patternProperties"];
const CHILD_ONE: [&str; 6] = [
    "items",
    "additionalProperties",
    "contains",
    "propertyNames",
    "additionalItems",
    "unevaluatedProperties",
];
/// Keywords that only hold schemas to refer to.
const DEFINITIONS: [&str; 2] = ["$defs", "definitions"];

/// Checks a tool's parameters schema; see the module comment.
///
/// ```
/// use colloquy_model::schema_check::check_schema;
/// use serde_json::json;
/// assert!(check_schema(&json!({"$ref": "#"})).is_err());
/// let tree = json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
///     "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}});
/// assert!(check_schema(&tree).is_ok());
/// ```
pub fn check_schema(root: &Value) -> Result<(), SchemaError> {
    if depth(root) > MAX_SCHEMA_DEPTH {
        return Err(SchemaError::TooDeep);
    }
    let graph = Graph::build(root)?;
    graph.find_cycle().map_or(Ok(()), |at| Err(SchemaError::Cycle(at)))
}

/// Every schema node, by JSON pointer, with the nodes that apply to the same value.
struct Graph {
    pointers: Vec<String>,
    same_value: Vec<Vec<usize>>,
}

impl Graph {
    fn build(root: &Value) -> Result<Self, SchemaError> {
        let mut graph = Graph { pointers: Vec::new(), same_value: Vec::new() };
        let mut ids: HashMap<String, usize> = HashMap::new();
        // Pointers of nodes to visit; a node is visited once.
        let mut todo: Vec<String> = vec![String::new()];
        let node = |pointer: &str, ids: &mut HashMap<String, usize>, graph: &mut Graph| {
            *ids.entry(pointer.to_string()).or_insert_with(|| {
                graph.pointers.push(pointer.to_string());
                graph.same_value.push(Vec::new());
                graph.pointers.len() - 1
            })
        };
        let mut visited = vec![false; 0];
        while let Some(pointer) = todo.pop() {
            let id = node(&pointer, &mut ids, &mut graph);
            visited.resize(graph.pointers.len(), false);
            if std::mem::replace(&mut visited[id], true) {
                continue;
            }
            let Some(Value::Object(schema)) = root.pointer(&pointer) else { continue };
            let mut children: Vec<(String, bool)> = Vec::new(); // (pointer, same value)
            for (key, value) in schema {
                let at = format!("{pointer}/{}", escape(key));
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        let Some(target) = target.strip_prefix('#') else { continue };
                        if root.pointer(target).is_none() {
                            return Err(SchemaError::Unresolvable(format!("#{target}")));
                        }
                        children.push((target.to_string(), true));
                    }
                    (k, Value::Array(list)) if SAME_VALUE_LISTS.contains(&k) => {
                        children.extend((0..list.len()).map(|i| (format!("{at}/{i}"), true)));
                    }
                    (k, Value::Object(_)) if SAME_VALUE_ONE.contains(&k) => {
                        children.push((at, true));
                    }
                    ("dependentSchemas", Value::Object(map)) => {
                        children.extend(map.keys().map(|k| (format!("{at}/{}", escape(k)), true)));
                    }
                    (k, Value::Object(map))
                        if CHILD_MAPS.contains(&k) || DEFINITIONS.contains(&k) =>
                    {
                        children.extend(map.keys().map(|k| (format!("{at}/{}", escape(k)), false)));
                    }
                    (k, Value::Object(_)) if CHILD_ONE.contains(&k) => children.push((at, false)),
                    ("items" | "prefixItems", Value::Array(list)) => {
                        children.extend((0..list.len()).map(|i| (format!("{at}/{i}"), false)));
                    }
                    _ => {}
                }
            }
            for (child, same_value) in children {
                let child_id = node(&child, &mut ids, &mut graph);
                if same_value {
                    graph.same_value[id].push(child_id);
                }
                todo.push(child);
            }
        }
        Ok(graph)
    }

    /// The pointer of a node on a cycle of same-value edges, if there is one (iterative
    /// depth-first search with three colours).
    fn find_cycle(&self) -> Option<String> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let mut colour = vec![NEW; self.pointers.len()];
        for start in 0..self.pointers.len() {
            if colour[start] != NEW {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            colour[start] = OPEN;
            while let Some((node, next)) = stack.last_mut() {
                let node = *node;
                match self.same_value[node].get(*next) {
                    Some(&child) => {
                        *next += 1;
                        match colour[child] {
                            OPEN => return Some(self.pointers[child].clone()),
                            NEW => {
                                colour[child] = OPEN;
                                stack.push((child, 0));
                            }
                            _ => {}
                        }
                    }
                    None => {
                        colour[node] = DONE;
                        stack.pop();
                    }
                }
            }
        }
        None
    }
}

/// The nesting depth of arrays and objects in `value` (a scalar is 0), without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(list) => Box::new(list.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        if deepest > MAX_SCHEMA_DEPTH {
            break;
        }
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

/// A key as a JSON pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cycles_that_consume_nothing_are_refused() {
        for schema in [
            json!({"$ref": "#"}),
            json!({"allOf": [{"$ref": "#"}]}),
            json!({"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}], "$defs": {"a": {"not": {"$ref": "#"}}}}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"oneOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}}),
        ] {
            assert!(matches!(check_schema(&schema), Err(SchemaError::Cycle(_))), "{schema}");
        }
    }

    #[test]
    fn recursion_through_a_child_value_is_fine() {
        let linked = json!({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}});
        assert_eq!(check_schema(&linked), Ok(()));
        let schemars_style = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Tree"}},
            "$defs": {"Tree": {"type": "object", "properties": {
                "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}}
        });
        assert_eq!(check_schema(&schemars_style), Ok(()));
    }

    #[test]
    fn depth_and_dangling_references_are_refused() {
        let mut deep = json!({"type": "string"});
        for _ in 0..100 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert_eq!(check_schema(&deep), Ok(()), "200 JSON levels");
        for _ in 0..100 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert_eq!(check_schema(&deep), Err(SchemaError::TooDeep));
        let dangling = json!({"properties": {"a": {"$ref": "#/$defs/missing"}}});
        assert_eq!(
            check_schema(&dangling),
            Err(SchemaError::Unresolvable("#/$defs/missing".into()))
        );
        assert_eq!(check_schema(&json!({"$ref": "https://example.com/s.json"})), Ok(()));
    }
}
