//! Tools an agent learns of while the session runs ([`ToolSource`]s: an MCP server's), beside
//! the ones its catalog knows from the start. Read before every LLM request, after the static
//! tools; a name a static tool (or an earlier source) has is listed with its toolset's id
//! before it, or left out with a warning if that is taken too.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use colloquy_model::{CallLimits, FunctionTool, ToolSchema, ToolSource};

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
    /// Clashing names already warned about (toolset and name).
    warned: Mutex<BTreeSet<String>>,
}

/// A tool as the model sees it now, and the source that lists it.
struct Listed<'a> {
    /// The name the model sees, when it is not the tool's own.
    renamed: Option<String>,
    /// The source's list and the tool's place in it.
    tools: Arc<[FunctionTool]>,
    index: usize,
    source: &'a Source,
}

impl Listed<'_> {
    fn name(&self) -> &str {
        self.renamed.as_deref().unwrap_or_else(|| self.tools[self.index].name())
    }

    fn tool(&self) -> FunctionTool {
        let tool = self.tools[self.index].clone();
        match &self.renamed {
            Some(name) => tool.renamed(name.clone()),
            None => tool,
        }
    }
}

/// `<toolset>_<name>`, as a model API accepts names: `[A-Za-z0-9_-]`, at most 64 characters.
fn prefixed(toolset: &str, name: &str) -> String {
    format!("{toolset}_{name}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(64)
        .collect()
}

impl Sources {
    pub(crate) fn push(
        &mut self,
        source: Arc<dyn ToolSource>,
        toolset: String,
        limits: CallLimits,
    ) {
        self.sources.push(Source { source, toolset, limits });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Whether toolset `id` runs the tools of some source.
    pub(crate) fn routes_to(&self, id: &str) -> bool {
        self.sources.iter().any(|s| s.toolset == id)
    }

    /// Starts the sources whose tools toolset `id` runs (its actor has started).
    pub(crate) fn start(&self, id: &str) {
        for source in self.sources.iter().filter(|s| s.toolset == id) {
            source.source.start();
        }
    }

    /// Some source may list cancellable tools.
    pub(crate) fn may_cancel(&self) -> bool {
        self.sources.iter().any(|s| s.source.may_cancel())
    }

    /// The tools listed now under the names the model sees, in source order
    /// (docs/decisions.md#edges-name-clashes): a tool keeps its name unless `taken` claims it or
    /// an earlier listed tool has it; then it is listed as `<toolset>_<name>`, and skipped with a
    /// warning (once) if that is taken too.
    fn listing(&self, taken: &dyn Fn(&str) -> bool) -> Vec<Listed<'_>> {
        let mut out: Vec<Listed<'_>> = Vec::new();
        for source in &self.sources {
            let tools = source.source.tools();
            for index in 0..tools.len() {
                let free = |name: &str, out: &[Listed<'_>]| {
                    !taken(name) && !out.iter().any(|l| l.name() == name)
                };
                let name = tools[index].name();
                let tools = Arc::clone(&tools);
                if free(name, &out) {
                    out.push(Listed { renamed: None, tools, index, source });
                    continue;
                }
                let renamed = prefixed(&source.toolset, name);
                if free(&renamed, &out) {
                    self.warn_once(&source.toolset, name, Some(&renamed));
                    out.push(Listed { renamed: Some(renamed), tools, index, source });
                } else {
                    self.warn_once(&source.toolset, name, None);
                }
            }
        }
        out
    }

    fn warn_once(&self, toolset: &str, name: &str, renamed: Option<&str>) {
        let mut warned = self.warned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcome = renamed.unwrap_or("");
        if !warned.insert(format!("{toolset}\u{0}{name}\u{0}{outcome}")) {
            return;
        }
        match renamed {
            Some(renamed) => tracing::warn!(
                %toolset,
                "tool `{name}` has the name of another tool: the model sees it as `{renamed}`"
            ),
            None => tracing::warn!(
                %toolset,
                "tool `{name}` has the name of another tool, and so has `{}`: left out",
                prefixed(toolset, name)
            ),
        }
    }

    /// The schemas of the tools listed now, under the names the model sees (`taken`: the names
    /// of the tools known from the start).
    pub(crate) fn schemas(&self, taken: impl Fn(&str) -> bool) -> Vec<ToolSchema> {
        let listing = self.listing(&taken);
        listing.iter().map(|l| l.tool().schema()).collect()
    }

    /// The tool the model calls `name` now (with its toolset's limits for those it sets none
    /// of) and the toolset that runs it, from one listing.
    pub(crate) fn resolve(
        &self,
        name: &str,
        taken: impl Fn(&str) -> bool,
    ) -> Option<(FunctionTool, String)> {
        let listed = self.listing(&taken).into_iter().find(|l| l.name() == name)?;
        let tool = listed.tool().with_default_limits(listed.source.limits);
        Some((tool, listed.source.toolset.clone()))
    }

    /// The names the model sees now for the tools toolset `id` runs.
    pub(crate) fn names_routed_to(&self, id: &str, taken: impl Fn(&str) -> bool) -> Vec<String> {
        let listing = self.listing(&taken);
        listing.iter().filter(|l| l.source.toolset == id).map(|l| l.name().to_string()).collect()
    }

    /// Waits, the first time only, for every source's first list; returns why the ones that
    /// will not list failed (empty on later calls).
    pub(crate) async fn wait_ready(&self) -> Vec<String> {
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
