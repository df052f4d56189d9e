//! Tools an agent learns of while the session runs ([`ToolSource`]s: an MCP server's), beside
//! the ones its catalog knows from the start. Read before every LLM request, after the static
//! tools; a name a static tool (or an earlier source) has is left out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use colloquy_core::{CallLimits, FunctionTool, ToolSchema, ToolSource};

/// A source and the id of the toolset actor that runs its tools.
#[derive(Debug)]
struct Source {
    source: Arc<dyn ToolSource>,
    toolset: String,
    /// Its toolset's limits, for the tools that set none.
    limits: CallLimits,
}

#[derive(Debug, Default)]
pub(crate) struct Sources {
    sources: Vec<Source>,
    /// The first readiness wait is over (its failures were reported once).
    waited: AtomicBool,
}

impl Sources {
    pub fn push(&mut self, source: Arc<dyn ToolSource>, toolset: String, limits: CallLimits) {
        self.sources.push(Source { source, toolset, limits });
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Starts the sources whose tools toolset `id` runs (its actor has started).
    pub fn start(&self, id: &str) {
        for source in self.sources.iter().filter(|s| s.toolset == id) {
            source.source.start();
        }
    }

    /// Some source may list cancellable tools.
    pub fn may_cancel(&self) -> bool {
        self.sources.iter().any(|s| s.source.may_cancel())
    }

    /// The schemas of the tools listed now whose names `taken` does not claim, in source
    /// order; the first source to list a name keeps it.
    pub fn schemas(&self, taken: impl Fn(&str) -> bool) -> Vec<ToolSchema> {
        let mut out: Vec<ToolSchema> = Vec::new();
        for source in &self.sources {
            for tool in source.source.tools().iter() {
                let name = tool.name();
                if !taken(name) && !out.iter().any(|s| s.name == name) {
                    out.push(tool.schema());
                }
            }
        }
        out
    }

    /// The tool called `name` now.
    pub fn get(&self, name: &str) -> Option<FunctionTool> {
        self.sources.iter().find_map(|s| {
            let tool = s.source.tools().iter().find(|t| t.name() == name).cloned();
            tool.map(|tool| tool.with_default_limits(s.limits))
        })
    }

    /// The toolset that runs the tool called `name` now, if a source lists it.
    pub fn route(&self, name: &str) -> Option<&str> {
        let lists = |s: &&Source| s.source.tools().iter().any(|t| t.name() == name);
        self.sources.iter().find(lists).map(|s| s.toolset.as_str())
    }

    /// Waits, the first time only, for every source's first list; returns why the ones that
    /// will not list failed (empty on later calls).
    pub async fn wait_ready(&self) -> Vec<String> {
        if self.waited.load(Ordering::Acquire) {
            return Vec::new();
        }
        let waits = self.sources.iter().map(|s| s.source.ready());
        let failures: Vec<String> = futures_util::future::join_all(waits)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        match self.waited.swap(true, Ordering::AcqRel) {
            true => Vec::new(), // another speech reported them
            false => failures,
        }
    }
}
