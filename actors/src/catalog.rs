//! The tools one agent can call: schemas in the order the model sees them, and lookup by name.

use std::collections::HashMap;
use std::sync::Arc;

use colloquy_core::{Agent, FunctionTool, ToolSchema};

/// An agent's visible tools: session tools first, then the agent's own (§1.5).
#[derive(Debug)]
pub(crate) struct ToolCatalog {
    schemas: Arc<[ToolSchema]>,
    tools: HashMap<String, FunctionTool>,
}

impl ToolCatalog {
    /// Builds the catalog; two different tools with one name are an error, the same tool listed
    /// twice is kept once.
    pub fn build(session_tools: &[FunctionTool], agent: &Agent) -> Result<Self, String> {
        let mut ordered: Vec<&FunctionTool> = Vec::new();
        let mut tools: HashMap<String, FunctionTool> = HashMap::new();
        for tool in session_tools.iter().chain(agent.all_tools()) {
            match tools.get(tool.name()) {
                Some(existing) if existing.same_as(tool) => continue,
                Some(_) => return Err(format!("duplicate function name: {}", tool.name())),
                None => {
                    tools.insert(tool.name().to_string(), tool.clone());
                    ordered.push(tool);
                }
            }
        }
        let schemas: Vec<ToolSchema> = ordered.iter().map(|t| t.schema()).collect();
        Ok(Self { schemas: schemas.into(), tools })
    }

    /// The schemas, in order.
    pub fn schemas(&self) -> &Arc<[ToolSchema]> {
        &self.schemas
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&FunctionTool> {
        self.tools.get(name)
    }

    /// Visible names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.schemas.iter().map(|s| s.name.as_str()).collect()
    }
}
