//! `ToolSearchToolset` (§19): the model sees `tool_search` plus whatever its
//! last successful search loaded.

use std::sync::{Arc, Mutex};

use colloquy_model::{FunctionTool, ToolError, ToolVisibility, Toolset};
use serde_json::{Map, Value, json};

use crate::item::{SearchEntry, SearchItem, items};
use crate::strategy::{Bm25Strategy, SearchStrategy};

/// The search tool's name (kept from the reference, decision 18).
pub const SEARCH_TOOL: &str = "tool_search";

/// The search tool's default description.
pub const SEARCH_DESCRIPTION: &str = "Search for tools by describing what you need. Matching \
tools become available to call right after this search. Before using a tool you do not see, \
search for it.";

/// The `query` parameter's default description.
pub const QUERY_DESCRIPTION: &str = "Space-separated keywords describing what you need; they \
are matched against tool names and descriptions.";

/// Builds a [`ToolSearchToolset`].
///
/// ```
/// use colloquy_model::{Agent, FunctionTool, Toolset};
/// use colloquy_toolsets::ToolSearch;
/// # let tool = |name: &str| FunctionTool::raw(name, "A tool.", serde_json::json!({"type": "object"}),
/// #     |_ctx, _args| async { Ok("ok") }).unwrap();
/// let search = ToolSearch::new("search")
///     .toolset(Toolset::new("Weather").tool(tool("weather_tool")).tool(tool("forecast_tool")))
///     .tool(tool("calculator"))
///     .max_results(5)
///     .build();
/// let agent = Agent::new("assistant", "Find the tools you need.").toolset(search.toolset());
/// ```
pub struct ToolSearch {
    id: String,
    entries: Vec<SearchEntry>,
    max_results: usize,
    strategy: Box<dyn SearchStrategy>,
    search_description: Option<String>,
    query_description: String,
}

impl ToolSearch {
    /// A tool search with id `id`, BM25 and `max_results` 5.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            entries: Vec::new(),
            max_results: 5,
            strategy: Box::new(Bm25Strategy::default()),
            search_description: None,
            query_description: QUERY_DESCRIPTION.into(),
        }
    }

    /// Hides a standalone tool behind the search.
    pub fn tool(mut self, tool: FunctionTool) -> Self {
        self.entries.push(SearchEntry::Tool(tool));
        self
    }

    /// Hides a toolset behind the search: any match loads all of it.
    pub fn toolset(mut self, toolset: Toolset) -> Self {
        self.entries.push(SearchEntry::Toolset(Box::new(toolset)));
        self
    }

    /// How many search items a search keeps (before they are grouped into sources).
    pub fn max_results(mut self, max_results: usize) -> Self {
        self.max_results = max_results;
        self
    }

    /// The search strategy (default [`Bm25Strategy`]).
    pub fn strategy(mut self, strategy: impl SearchStrategy + 'static) -> Self {
        self.strategy = Box::new(strategy);
        self
    }

    /// The search tool's description (the default depends on the kind built).
    pub fn search_description(mut self, text: impl Into<String>) -> Self {
        self.search_description = Some(text.into());
        self
    }

    /// The `query` parameter's description.
    pub fn query_description(mut self, text: impl Into<String>) -> Self {
        self.query_description = text.into();
        self
    }

    pub(crate) fn core(self) -> (Arc<Core>, Option<String>, String, String) {
        let core = Arc::new(Core {
            entries: self.entries,
            max_results: self.max_results,
            index: tokio::sync::Mutex::new(Index {
                strategy: self.strategy,
                items: Vec::new(),
                ready: false,
            }),
            loaded: Mutex::new(Vec::new()),
        });
        (core, self.search_description, self.query_description, self.id)
    }

    /// A tool search: the model sees `tool_search` and the tools its searches load.
    pub fn build(self) -> ToolSearchToolset {
        let (core, search, query, id) = self.core();
        let search_description = search.unwrap_or_else(|| SEARCH_DESCRIPTION.into());
        ToolSearchToolset { id, core, search_description, query_description: query }
    }
}

/// A tool search over a catalogue: cheap to clone; give [`toolset`](Self::toolset) to an agent
/// or a session, keep the handle for [`setup`](Self::setup) and [`close`](Self::close).
///
/// What is loaded belongs to the handle (its clones share it), as the reference's toolset
/// instance does: build one per session, so two conversations do not load tools for each other.
#[derive(Clone)]
pub struct ToolSearchToolset {
    id: String,
    core: Arc<Core>,
    search_description: String,
    query_description: String,
}

pub(crate) struct Core {
    pub(crate) entries: Vec<SearchEntry>,
    max_results: usize,
    index: tokio::sync::Mutex<Index>,
    /// Loaded sources (top-level entries), in the order the last search gave them.
    loaded: Mutex<Vec<usize>>,
}

struct Index {
    strategy: Box<dyn SearchStrategy>,
    items: Vec<SearchItem>,
    ready: bool,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSearch").field("loaded", &self.loaded_sources()).finish()
    }
}

impl Core {
    fn loaded_sources(&self) -> Vec<usize> {
        self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set_loaded(&self, sources: Vec<usize>) {
        *self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = sources;
    }

    pub(crate) async fn setup(&self, reload: bool) {
        let mut index = self.index.lock().await;
        if index.ready && !reload {
            return;
        }
        let items = items(&self.entries);
        let Index { strategy, .. } = &mut *index;
        strategy.build_index(&items).await;
        index.items = items;
        index.ready = true;
    }

    pub(crate) async fn search(&self, query: &str) -> Result<Vec<usize>, ToolError> {
        if query.is_empty() {
            return Err(ToolError::new("query cannot be empty"));
        }
        self.setup(false).await;
        let index = self.index.lock().await;
        let hits = index.strategy.search(query, &index.items, self.max_results).await;
        let mut sources: Vec<usize> = Vec::new();
        for hit in hits {
            if let Some(item) = index.items.get(hit)
                && !sources.contains(&item.source)
            {
                sources.push(item.source);
            }
        }
        if sources.is_empty() {
            return Err(ToolError::new(format!("No tools found matching '{query}'.")));
        }
        Ok(sources)
    }
}

impl ToolVisibility for Core {
    fn visible(&self) -> Vec<String> {
        let mut names = vec![SEARCH_TOOL.to_string()];
        for source in self.loaded_sources() {
            if let Some(entry) = self.entries.get(source) {
                names.extend(entry.tools().into_iter().map(|t| t.name().to_string()));
            }
        }
        names
    }
}

/// The search tool's parameters: one required string, `query`.
pub(crate) fn query_parameters(description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { "query": { "type": "string", "description": description } },
        "required": ["query"],
    })
}

/// A raw tool's argument `key` as text: a string as is, any other value as JSON, absent or
/// `null` as "" (the reference's string form of a missing argument).
pub(crate) fn text_arg(args: &Map<String, Value>, key: &str) -> String {
    match args.get(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl ToolSearchToolset {
    /// The toolset to give an agent (or a session): `tool_search` and every hidden tool, of
    /// which the model sees `tool_search` and the tools the last successful search loaded.
    pub fn toolset(&self) -> Toolset {
        let core = Arc::clone(&self.core);
        let parameters = query_parameters(&self.query_description);
        let search = FunctionTool::raw(
            SEARCH_TOOL,
            self.search_description.clone(),
            parameters,
            move |_ctx, args| {
                let core = Arc::clone(&core);
                async move {
                    let sources = core.search(&text_arg(&args, "query")).await?;
                    core.set_loaded(sources);
                    Ok("Tools loaded successfully.")
                }
            },
        )
        .expect("the search tool's schema is an object");
        let mut set = Toolset::new(self.id.clone()).tool(search);
        for entry in &self.core.entries {
            set = match entry {
                SearchEntry::Tool(tool) => set.tool(tool.clone()),
                SearchEntry::Toolset(toolset) => set.toolset((**toolset).clone()),
            };
        }
        set.visibility(Arc::clone(&self.core) as Arc<dyn ToolVisibility>)
    }

    /// The toolset's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Builds the index (done by the first search otherwise); `reload` rebuilds it.
    pub async fn setup(&self, reload: bool) {
        self.core.setup(reload).await;
    }

    /// Runs a search as the `tool_search` tool does, loading what it finds; returns the names
    /// of the tools now loaded.
    pub async fn search(&self, query: &str) -> Result<Vec<String>, ToolError> {
        let sources = self.core.search(query).await?;
        self.core.set_loaded(sources);
        Ok(self.loaded())
    }

    /// The tools the last successful search loaded, in the order the model sees them.
    pub fn loaded(&self) -> Vec<String> {
        self.core.visible().into_iter().skip(1).collect()
    }

    /// Forgets the index and the loaded tools, and cleans the strategy up.
    pub async fn close(&self) {
        self.core.close().await;
    }
}

impl Core {
    pub(crate) async fn close(&self) {
        let mut index = self.index.lock().await;
        index.items.clear();
        index.ready = false;
        index.strategy.cleanup().await;
        self.set_loaded(Vec::new());
    }
}
