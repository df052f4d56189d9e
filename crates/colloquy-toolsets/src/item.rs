//! What a search strategy indexes: one [`SearchItem`] per tool (§19.2).

use colloquy_model::{FunctionTool, Toolset};
use serde_json::Value;

/// One searchable tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchItem {
    /// The tool's name.
    pub name: String,
    /// The tool's description (`""` when it has none).
    pub description: String,
    /// Parameter name → description (`""` when missing), in schema order.
    pub parameters: Vec<(String, String)>,
    /// Index of the top-level entry it came from (a tool, or a toolset at any depth).
    pub source: usize,
}

impl SearchItem {
    /// An item for `tool`, from its schema.
    pub fn from_tool(tool: &FunctionTool, source: usize) -> Self {
        let schema = tool.schema();
        let parameters = schema
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, prop)| {
                        let description =
                            prop.get("description").and_then(Value::as_str).unwrap_or_default();
                        (name.clone(), description.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self { name: schema.name, description: schema.description, parameters, source }
    }
}

/// A top-level entry hidden behind a search: a tool alone, or a toolset that loads as a whole.
#[derive(Clone, Debug)]
pub enum SearchEntry {
    /// A standalone tool.
    Tool(FunctionTool),
    /// A toolset (nested toolsets included): any match loads all of it. Boxed: a toolset is
    /// several times a tool's size.
    Toolset(Box<Toolset>),
}

impl SearchEntry {
    /// Its tools, depth first (a toolset's own tools, then each nested toolset's).
    pub fn tools(&self) -> Vec<&FunctionTool> {
        match self {
            SearchEntry::Tool(tool) => vec![tool],
            SearchEntry::Toolset(set) => set.flatten(),
        }
    }
}

impl From<FunctionTool> for SearchEntry {
    fn from(tool: FunctionTool) -> Self {
        SearchEntry::Tool(tool)
    }
}

impl From<Toolset> for SearchEntry {
    fn from(toolset: Toolset) -> Self {
        SearchEntry::Toolset(Box::new(toolset))
    }
}

/// One item per tool of every entry, entries in order.
pub fn items(entries: &[SearchEntry]) -> Vec<SearchItem> {
    entries
        .iter()
        .enumerate()
        .flat_map(|(source, entry)| {
            entry.tools().into_iter().map(move |tool| SearchItem::from_tool(tool, source))
        })
        .collect()
}
