//! `ToolProxyToolset` (§20): a constant tool list — `tool_search` answers with
//! the schemas of matching tools, `call_tool` runs any hidden tool inline.

use std::sync::Arc;

use colloquy_model::{FunctionTool, ToolError, ToolOutput, Toolset, parse_arguments};
use serde_json::{Map, Value, json};

use crate::search::{Core, SEARCH_TOOL, ToolSearch, query_parameters, text_arg};

/// The call tool's name.
pub const CALL_TOOL: &str = "call_tool";

/// The proxy's default search description.
pub const PROXY_SEARCH_DESCRIPTION: &str = "Search for tools by describing what you need. \
Returns the name, description and parameter schema of each matching tool, one JSON object per \
line; call one with `call_tool`.";

/// `call_tool`'s description.
pub const CALL_TOOL_DESCRIPTION: &str = "Call a tool by its name with its parameters. Use \
`tool_search` first to discover the tools and their parameter schemas.";

impl ToolSearch {
    /// A tool proxy (§20): the model always sees exactly `tool_search`, which answers with the
    /// matching tools' schemas, and `call_tool`, which runs any hidden tool by name — a constant
    /// tool list, friendly to providers' prompt caches.
    pub fn build_proxy(self) -> ToolProxyToolset {
        let (core, search, query, id) = self.core();
        let search = search.unwrap_or_else(|| PROXY_SEARCH_DESCRIPTION.into());
        ToolProxyToolset::new(id, core, search, query)
    }
}

/// A tool proxy over a catalogue; built with [`ToolSearch::build_proxy`](crate::ToolSearch).
///
/// ```
/// use colloquy_model::{Agent, FunctionTool};
/// use colloquy_toolsets::ToolSearch;
/// # let tool = FunctionTool::raw("calculator", "Calculate a math expression.",
/// #     serde_json::json!({"type": "object"}), |_ctx, _args| async { Ok("42") }).unwrap();
/// let proxy = ToolSearch::new("proxy").tool(tool).build_proxy();
/// let agent = Agent::new("assistant", "Use tool_search, then call_tool.").toolset(proxy.toolset());
/// ```
#[derive(Clone)]
pub struct ToolProxyToolset {
    id: String,
    core: Arc<Core>,
    search_description: String,
    query_description: String,
}

impl ToolProxyToolset {
    pub(crate) fn new(id: String, core: Arc<Core>, search: String, query: String) -> Self {
        Self { id, core, search_description: search, query_description: query }
    }

    /// The toolset to give an agent: exactly `tool_search` and `call_tool`.
    pub fn toolset(&self) -> Toolset {
        let core = Arc::clone(&self.core);
        let search = FunctionTool::raw(
            SEARCH_TOOL,
            self.search_description.clone(),
            query_parameters(&self.query_description),
            move |_ctx, args| {
                let core = Arc::clone(&core);
                async move { schemas(&core, &text_arg(&args, "query")).await }
            },
        )
        .expect("the search tool's schema is an object");
        let core = Arc::clone(&self.core);
        let parameters = json!({
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "The name of the tool to call." },
                "parameters": { "type": "object", "description": "The tool's arguments." },
            },
            "required": ["name", "parameters"],
        });
        let call =
            FunctionTool::raw(CALL_TOOL, CALL_TOOL_DESCRIPTION, parameters, move |ctx, args| {
                let core = Arc::clone(&core);
                async move { call_tool(&core, ctx, args).await }
            })
            .expect("call_tool's schema is an object");
        Toolset::new(self.id.clone()).tool(search).tool(call)
    }

    /// The toolset's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Builds the index (done by the first search otherwise); `reload` rebuilds it.
    pub async fn setup(&self, reload: bool) {
        self.core.setup(reload).await;
    }

    /// What `tool_search` answers for `query`.
    pub async fn search(&self, query: &str) -> Result<String, ToolError> {
        schemas(&self.core, query).await
    }

    /// Forgets the index and cleans the strategy up.
    pub async fn close(&self) {
        self.core.close().await;
    }
}

/// One JSON object per tool of every matched source: name, description, parameter schema.
async fn schemas(core: &Core, query: &str) -> Result<String, ToolError> {
    let sources = core.search(query).await?;
    let lines: Vec<String> = sources
        .iter()
        .filter_map(|&source| core.entries.get(source))
        .flat_map(|entry| entry.tools())
        .map(|tool| {
            json!({
                "name": tool.name(),
                "description": tool.description(),
                "parameters": tool.parameters(),
            })
            .to_string()
        })
        .collect();
    Ok(lines.join("\n"))
}

/// Runs the named hidden tool inline, with `call_tool`'s own run context: its updates update
/// the `call_tool` call, and its errors come back unchanged.
async fn call_tool(
    core: &Core,
    ctx: colloquy_model::RunContext,
    args: Map<String, Value>,
) -> Result<ToolOutput, ToolError> {
    let name = text_arg(&args, "name");
    if name.is_empty() {
        return Err(ToolError::new("tool name cannot be empty"));
    }
    let arguments = match args.get("parameters") {
        None | Some(Value::Null) => return Err(ToolError::new("parameters is required")),
        Some(Value::Object(map)) => map.clone(),
        Some(Value::String(text)) => {
            parse_arguments(&name, text).map_err(|e| ToolError::new(e.to_string()))?.value
        }
        Some(_) => return Err(ToolError::new("parameters must be a dictionary or a string")),
    };
    let tool = core.entries.iter().flat_map(|e| e.tools()).find(|t| t.name() == name).cloned();
    let Some(tool) = tool else {
        return Err(ToolError::new(format!(
            "unknown tool '{name}', use search_tools to discover available tools"
        )));
    };
    tool.invoke(ctx, arguments).await
}
