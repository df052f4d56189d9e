//! A server's listed tools as function tools that call it through whichever connection is
//! current (a restarted server gets a new one).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use colloquy_model::{DuplicateScope, FunctionTool, OnDuplicate, RunContext, ToolError};
use serde_json::{Map, Value};

use crate::client::{Bounds, Connection};
use crate::names::model_name;

/// The connection calls go through now; `None` while the server is down.
#[derive(Default)]
pub(crate) struct Slot(Mutex<Option<Arc<Connection>>>);

impl Slot {
    pub(crate) fn set(&self, connection: Option<Arc<Connection>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = connection;
    }

    fn get(&self) -> Option<Arc<Connection>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Per-toolset options that shape each tool.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub bounds: Bounds,
    pub prefix: Option<String>,
    pub cancellable: BTreeSet<String>,
    /// Every tool is cancellable.
    pub cancellable_all: bool,
    /// Duplicate policies by the server's tool name (default: allow).
    pub on_duplicate: BTreeMap<String, (OnDuplicate, DuplicateScope)>,
}

impl Default for Options {
    fn default() -> Self {
        let bounds = Bounds {
            max_result_bytes: crate::MAX_RESULT_BYTES,
            progress_interval: crate::PROGRESS_INTERVAL,
        };
        Self {
            bounds,
            prefix: None,
            cancellable: BTreeSet::new(),
            cancellable_all: false,
            on_duplicate: BTreeMap::new(),
        }
    }
}

/// The server's tools, listed through `connection`, as function tools that call through
/// `slot`; and why the ones left out were (a bad name or schema, or one rmcp could not read),
/// each also logged.
pub(crate) async fn list(
    id: &str,
    connection: &Connection,
    options: &Options,
    slot: &Arc<Slot>,
) -> Result<(Vec<FunctionTool>, Vec<String>), rmcp::ServiceError> {
    let (listed, unreadable) = connection.tools().await?;
    let mut tools = Vec::new();
    let mut skipped = unreadable; // the relay has logged these
    let already = skipped.len();
    // As the protocol sends each tool: the fields read are the wire's.
    for tool in listed.iter().filter_map(|t| serde_json::to_value(t).ok()) {
        match function_tool(&tool, options, slot) {
            Ok(function) => tools.push(function),
            Err(why) => skipped.push(why),
        }
    }
    for why in &skipped[already..] {
        tracing::warn!(server = %id, "MCP tool skipped: {why}");
    }
    Ok((tools, skipped))
}

fn function_tool(
    tool: &Value,
    options: &Options,
    slot: &Arc<Slot>,
) -> Result<FunctionTool, String> {
    let name = tool.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let Some(model_name) = model_name(options.prefix.as_deref(), &name) else {
        return Err(format!("a tool without a usable name ({name:?})"));
    };
    let description = tool.get("description").and_then(Value::as_str).unwrap_or("");
    let schema =
        tool.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
    let (slot, server_name, bounds) = (Arc::clone(slot), name.clone(), options.bounds);
    let body = move |ctx: RunContext, arguments: Map<String, Value>| {
        let (connection, server_name) = (slot.get(), server_name.clone());
        async move {
            let Some(connection) = connection else {
                return Err(ToolError::new(
                    "the MCP server is not running (it is being restarted)",
                ));
            };
            connection.call(&ctx, &server_name, arguments, bounds).await
        }
    };
    let function = FunctionTool::from_schema(model_name, description, schema, body)
        .map_err(|e| format!("`{name}`: {e}"))?;
    let function = match options.on_duplicate.get(&name) {
        Some((policy, scope)) => function.on_duplicate(*policy, scope.clone()),
        None => function,
    };
    // The server's schema is known only now: an `args` scope naming no property is refused
    // with the tool, as a bad schema is.
    function.check_duplicate_scope().map_err(|e| format!("`{name}`: {e}"))?;
    let cancellable = options.cancellable_all || options.cancellable.contains(&name);
    Ok(if cancellable { function.cancellable() } else { function })
}
