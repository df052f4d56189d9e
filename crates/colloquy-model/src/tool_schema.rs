//! A typed tool's parameter schema: derived by schemars from the argument type, trimmed to
//! what a model needs, and shared per type.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The JSON schema schemars derives for `A`, trimmed to what a model needs.
pub fn parameters_schema<A: JsonSchema>() -> Value {
    let mut value = schemars::schema_for!(A).to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        map.entry("type").or_insert_with(|| Value::String("object".into()));
        map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    value
}

/// `A`'s schema ([`parameters_schema`]), derived once per type and shared: a host that builds
/// its agents for every session would otherwise derive, and hold, the same schema each time.
pub(crate) fn shared_schema<A: JsonSchema + 'static>() -> Arc<Value> {
    static SCHEMAS: LazyLock<Mutex<HashMap<TypeId, Arc<Value>>>> = LazyLock::new(Mutex::default);
    let mut schemas = SCHEMAS.lock().unwrap_or_else(PoisonError::into_inner);
    let schema = schemas.entry(TypeId::of::<A>());
    Arc::clone(schema.or_insert_with(|| Arc::new(parameters_schema::<A>())))
}
