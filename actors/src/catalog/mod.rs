//! The tools one agent can call: schemas in the order the model sees them, lookup by name, and
//! which toolset actor runs each (§1.5, §4 step 7, decision 16); the tools learned while the
//! session runs are `sources.rs`. Above `builtin/` (the companion tools join here), below every
//! actor.

pub(crate) mod sources;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use colloquy_model::{Agent, FunctionTool, Templates, ToolSchema, ToolVisibility, Toolset};

/// The companion tools' names: listed last, after any tool a source adds.
const COMPANIONS: [&str; 2] = [companions::CANCEL_TASK, companions::GET_RUNNING_TASKS];

use crate::builtin::companions;
use sources::Sources;

/// Whether an async toolset lives with the session or with the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Placed on the session: a child of the Session, survives handoffs.
    Session,
    /// Placed on the agent: a child of the Activity.
    Agent,
}

/// An async toolset to spawn.
#[derive(Clone, Debug)]
pub(crate) struct AsyncToolset {
    pub id: String,
    pub scope: Scope,
    pub templates: Option<Templates>,
}

/// An agent's visible tools: session tools first, then the agent's own (§1.5).
#[derive(Debug)]
pub(crate) struct ToolCatalog {
    schemas: Arc<[ToolSchema]>,
    /// Tool name → the tool and the toolset actor that runs it.
    tools: HashMap<String, Routed>,
    async_toolsets: Vec<AsyncToolset>,
    /// Toolsets that decide which of their tools are visible, request by request.
    groups: Vec<VisibilityGroup>,
    /// Tool name → the group that decides its visibility.
    governed_by: HashMap<String, usize>,
    /// With groups: what a request lists, in order, worked out once at build so a request
    /// only asks each group what it shows (a tool search may hide thousands of tools).
    layout: Vec<Slot>,
    /// Tools learned while the session runs, listed after the others (companions last).
    sources: Sources,
}

/// A tool and the id of the toolset actor that runs it.
#[derive(Debug)]
struct Routed {
    tool: FunctionTool,
    toolset: String,
}

#[derive(Debug)]
struct VisibilityGroup {
    visibility: Arc<dyn ToolVisibility>,
    /// Member tool name → its index in `schemas`.
    members: HashMap<String, usize>,
}

/// One place in a request's tool list.
#[derive(Debug)]
enum Slot {
    /// Always visible: `schemas[i]`.
    Tool(usize),
    /// A group's visible tools, where its first member stands.
    Group(usize),
}

/// The id of an agent's implicit toolset.
pub(crate) fn implicit_toolset(agent_id: &str) -> String {
    format!("agent:{agent_id}")
}

impl ToolCatalog {
    /// Builds the catalog; two different tools with one name, two async toolsets with one
    /// id, or a duplicate scope naming no parameter are errors; the same tool listed twice
    /// is kept once.
    pub(crate) fn build(
        session_tools: &[FunctionTool],
        session_toolsets: &[Toolset],
        agent: &Agent,
    ) -> Result<Self, String> {
        let implicit = implicit_toolset(agent.id());
        let mut routed: Vec<(&FunctionTool, Option<&Toolset>, Scope)> =
            session_tools.iter().map(|t| (t, None, Scope::Session)).collect();
        for set in session_toolsets {
            routed.extend(set.routed().into_iter().map(|(t, owner)| (t, owner, Scope::Session)));
        }
        routed.extend(agent.routed_tools().into_iter().map(|(t, owner)| (t, owner, Scope::Agent)));

        let mut schemas = Vec::new();
        let mut tools: HashMap<String, Routed> = HashMap::new();
        let mut async_toolsets: Vec<AsyncToolset> = Vec::new();
        for (tool, owner, scope) in routed {
            let route = route(&mut async_toolsets, owner, scope, &implicit)?;
            match tools.get(tool.name()) {
                Some(existing) if existing.tool.same_as(tool) => continue,
                Some(_) => return Err(format!("duplicate function name: {}", tool.name())),
                None => {
                    // `on_duplicate` cannot fail, so a scope naming no parameter stops here.
                    tool.check_duplicate_scope().map_err(|e| e.to_string())?;
                    schemas.push(tool.schema());
                    let routed = Routed { tool: tool.clone(), toolset: route };
                    tools.insert(tool.name().to_string(), routed);
                }
            }
        }
        let mut sources = Sources::default();
        let session_sources = session_toolsets.iter().map(|set| (set, Scope::Session));
        let agent_sources = agent.declared_toolsets().iter().map(|set| (set, Scope::Agent));
        for (set, scope) in session_sources.chain(agent_sources) {
            for (source, owner, limits) in set.routed_sources() {
                let toolset = route(&mut async_toolsets, owner, scope, &implicit)?;
                sources.push(Arc::clone(source), toolset, limits);
            }
        }
        // The companions join whenever some tool is cancellable (§1.5), run by the implicit
        // toolset; their schema never changes, which keeps provider prompt caches warm.
        let cancellable = tools.values().any(|routed| routed.tool.flags().cancellable);
        if cancellable || sources.may_cancel() {
            for companion in [companions::cancel_task(), companions::get_running_tasks()] {
                if tools.contains_key(companion.name()) {
                    return Err(format!("duplicate function name: {}", companion.name()));
                }
                schemas.push(companion.schema());
                let name = companion.name().to_string();
                tools.insert(name, Routed { tool: companion, toolset: implicit.clone() });
            }
        }
        if async_toolsets.iter().any(|a| a.id == implicit) {
            return Err(format!("duplicate toolset id: {implicit}"));
        }
        let sets: Vec<&Toolset> =
            session_toolsets.iter().chain(agent.declared_toolsets()).collect();
        let (groups, governed_by, layout) = visibility_layout(&schemas, &sets);
        let schemas = schemas.into();
        Ok(Self { schemas, tools, async_toolsets, groups, governed_by, layout, sources })
    }

    /// The schemas the model sees now, in order: every tool, except that a toolset deciding
    /// its own visibility shows, where its first tool stands, the tools it makes visible in
    /// the order it gives.
    pub(crate) fn visible_schemas(&self) -> Arc<[ToolSchema]> {
        let fixed = self.fixed_schemas();
        if self.sources.is_empty() {
            return fixed;
        }
        let learned = self.sources.schemas(|name| self.tools.contains_key(name));
        let at = fixed.iter().position(|s| COMPANIONS.contains(&s.name.as_str()));
        let (before, companions) = fixed.split_at(at.unwrap_or(fixed.len()));
        before.iter().cloned().chain(learned).chain(companions.iter().cloned()).collect()
    }

    /// The visible schemas of the tools known from the start.
    fn fixed_schemas(&self) -> Arc<[ToolSchema]> {
        if self.groups.is_empty() {
            return Arc::clone(&self.schemas);
        }
        let mut out = Vec::with_capacity(self.layout.len());
        for slot in &self.layout {
            match *slot {
                Slot::Tool(i) => out.push(self.schemas[i].clone()),
                Slot::Group(g) => {
                    let group = &self.groups[g];
                    let mut seen = HashSet::new();
                    for name in group.visibility.visible() {
                        if let Some(&i) = group.members.get(&name)
                            && seen.insert(i)
                        {
                            out.push(self.schemas[i].clone());
                        }
                    }
                }
            }
        }
        out.into()
    }

    /// The tool the model calls `name` now and the toolset actor that runs it, if it may call
    /// it (it exists and is visible). Resolved once, at dispatch, from the catalog of the agent
    /// the model saw: the Toolset runs this very tool, whichever agent's catalog it was built
    /// with, and a source's list that changes meanwhile cannot split the two.
    pub(crate) fn resolve(&self, name: &str) -> Option<(FunctionTool, String)> {
        if let Some(&g) = self.governed_by.get(name)
            && !self.groups[g].visibility.visible().iter().any(|n| n == name)
        {
            return None;
        }
        match self.tools.get(name) {
            Some(routed) => Some((routed.tool.clone(), routed.toolset.clone())),
            None => self.sources.resolve(name, |n| self.tools.contains_key(n)),
        }
    }

    /// The tool called `name` among those known from the start.
    pub(crate) fn get(&self, name: &str) -> Option<&FunctionTool> {
        self.tools.get(name).map(|routed| &routed.tool)
    }

    /// As [`get`](Self::get), with the toolset that runs it, whether the model sees it now or
    /// not: a call a resume runs again was made when it did.
    pub(crate) fn routed(&self, name: &str) -> Option<(&FunctionTool, &str)> {
        self.tools.get(name).map(|routed| (&routed.tool, routed.toolset.as_str()))
    }

    /// Starts the tool sources toolset `id` runs (its actor has started).
    pub(crate) fn start_sources(&self, id: &str) {
        self.sources.start(id);
    }

    /// Whether toolset `id` runs tools a source lists (an MCP server's).
    pub(crate) fn has_sources_for(&self, id: &str) -> bool {
        self.sources.routes_to(id)
    }

    /// Whether some toolset lists tools while the session runs.
    pub(crate) fn has_sources(&self) -> bool {
        !self.sources.is_empty()
    }

    /// Waits, once per catalog, for the tool sources' first lists (`ToolSource::ready`);
    /// returns why the ones that will not list failed. At once without sources.
    pub(crate) async fn wait_ready(&self) -> Vec<String> {
        if self.sources.is_empty() {
            return Vec::new();
        }
        self.sources.wait_ready().await
    }

    /// The names of the tools toolset `id` runs, in the order the model sees them: those known
    /// from the start, then those its sources list now (under the names the model sees).
    pub(crate) fn routed_to(&self, id: &str) -> Vec<String> {
        let routed = |name: &str| self.tools.get(name).is_some_and(|r| r.toolset == id);
        let mut names: Vec<String> =
            self.schemas.iter().filter(|s| routed(&s.name)).map(|s| s.name.clone()).collect();
        names.extend(self.sources.names_routed_to(id, |n| self.tools.contains_key(n)));
        names
    }

    /// The async toolsets of `scope`, in declaration order.
    pub(crate) fn async_toolsets(&self, scope: Scope) -> impl Iterator<Item = &AsyncToolset> {
        self.async_toolsets.iter().filter(move |a| a.scope == scope)
    }
}

/// The toolset actor that runs tools `owner` holds: the agent's implicit one, or the async
/// toolset, registered on first sight (one id in two scopes is an error).
fn route(
    async_toolsets: &mut Vec<AsyncToolset>,
    owner: Option<&Toolset>,
    scope: Scope,
    implicit: &str,
) -> Result<String, String> {
    let Some(set) = owner else { return Ok(implicit.to_string()) };
    match async_toolsets.iter().find(|a| a.id == set.id()) {
        Some(known) if known.scope != scope => {
            return Err(format!("duplicate toolset id: {}", set.id()));
        }
        Some(_) => {}
        None => async_toolsets.push(AsyncToolset {
            id: set.id().to_string(),
            scope,
            templates: set.template_overrides().cloned(),
        }),
    }
    Ok(set.id().to_string())
}

/// The toolsets that decide their tools' visibility (`groups`), which group governs each tool
/// (`governed_by`), and what a request lists in order (`layout`; empty without groups).
fn visibility_layout(
    schemas: &[ToolSchema],
    sets: &[&Toolset],
) -> (Vec<VisibilityGroup>, HashMap<String, usize>, Vec<Slot>) {
    let mut groups = Vec::new();
    let mut governed_by = HashMap::new();
    let index: HashMap<&str, usize> =
        schemas.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    for set in sets {
        for (visibility, tools) in set.visibility_groups() {
            let mut members = HashMap::new();
            for tool in tools {
                let Some(&i) = index.get(tool.name()) else { continue };
                members.insert(tool.name().to_string(), i);
                governed_by.insert(tool.name().to_string(), groups.len());
            }
            groups.push(VisibilityGroup { visibility: Arc::clone(visibility), members });
        }
    }
    let mut layout = Vec::new();
    if !groups.is_empty() {
        let mut placed = vec![false; groups.len()];
        for (i, schema) in schemas.iter().enumerate() {
            match governed_by.get(&schema.name) {
                None => layout.push(Slot::Tool(i)),
                Some(&g) if !std::mem::replace(&mut placed[g], true) => layout.push(Slot::Group(g)),
                Some(_) => {}
            }
        }
    }
    (groups, governed_by, layout)
}
