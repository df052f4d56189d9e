//! Toolsets (§1.1): named groups of tools and nested toolsets, async ones run by a toolset
//! actor of their own; what decides their visibility (`ToolVisibility`) and the tools they learn
//! while the session runs (`ToolSource`). A toolset's limits and caps reach the tools it holds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::controls::{CallLimits, ConcurrencyLimit};
use crate::templates::Templates;
use crate::tool::FunctionTool;

/// A named group of tools and nested toolsets (§1.1). Flattened in declaration order.
///
/// A plain toolset only groups tools. An *async* toolset ([`Toolset::new_async`], the
/// reference's `AsyncToolset`) runs its calls in a toolset actor of its own, with its own
/// templates: placed on the session it is session-scoped (it survives handoffs and its results
/// reach whichever agent is current); placed on an agent it is agent-scoped (decision 16).
///
/// ```
/// use colloquy_model::{Templates, Toolset};
/// let shared = Toolset::new_async("shared")
///     .templates(Templates { update: Some("Still on it: {message}".into()), ..Default::default() });
/// assert!(shared.is_async());
/// ```
#[derive(Clone, Debug)]
pub struct Toolset {
    id: String,
    tools: Vec<FunctionTool>,
    toolsets: Vec<Toolset>,
    is_async: bool,
    templates: Option<Templates>,
    visibility: Option<Arc<dyn ToolVisibility>>,
    source: Option<Arc<dyn ToolSource>>,
    /// Its own limits, for its tools that set none.
    limits: CallLimits,
    /// An enclosing toolset's, for those it does not set itself.
    inherited: CallLimits,
    /// Its own concurrency cap.
    max_concurrent: Option<usize>,
    /// The enclosing toolsets' caps, innermost first.
    shared: Vec<ConcurrencyLimit>,
}

/// Which of a toolset's tools (nested ones included) the model sees right now. The runtime asks
/// before every LLM request, so a change shows in the very next one — the tool-reply step of
/// the same turn included. A tool that is not visible cannot be called either: a call to it
/// gets the unknown-tool error. Without one, a toolset shows all its tools.
///
/// Tool search (`colloquy-toolsets`) shows its `tool_search` tool plus the tools it loaded.
pub trait ToolVisibility: Send + Sync + fmt::Debug {
    /// The names of the visible tools, in the order the model sees them; names that are not
    /// tools of the toolset are ignored.
    fn visible(&self) -> Vec<String>;
}

/// Tools a toolset learns of while the session runs (an MCP server's, listed once it has
/// started, and again when it says its list changed). The runtime reads [`tools`](Self::tools)
/// before every LLM request, after the tools known from the start; a call to a tool no longer
/// listed gets the unknown-tool error. The runtime calls [`start`](Self::start) when the
/// toolset actor that runs the tools starts (with the session, or with its agent), and
/// awaits [`ready`](Self::ready) once before a session's first LLM request, so the first turn
/// already sees the tools.
pub trait ToolSource: Send + Sync + fmt::Debug {
    /// The tools now, in the order the model sees them (cheap: a shared list).
    fn tools(&self) -> Arc<[FunctionTool]>;

    /// Resolves once the first list is known, or with why it will not be (the source bounds
    /// its own wait). Resolves at once after that.
    fn ready(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;

    /// Whether some of its tools may be cancellable (the companion tools are then listed).
    fn may_cancel(&self) -> bool {
        false
    }

    /// The toolset actor that runs its tools has started: begin learning them (start a
    /// server). Called once per toolset actor; `ready` must start it too if it was not.
    fn start(&self) {}
}

impl Toolset {
    /// An empty plain toolset.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            tools: Vec::new(),
            toolsets: Vec::new(),
            is_async: false,
            templates: None,
            visibility: None,
            source: None,
            limits: CallLimits::default(),
            inherited: CallLimits::default(),
            max_concurrent: None,
            shared: Vec::new(),
        }
    }

    /// An empty async toolset: its calls run in its own toolset actor.
    pub fn new_async(id: impl Into<String>) -> Self {
        Self { is_async: true, ..Self::new(id) }
    }

    /// Adds a tool.
    pub fn tool(mut self, mut tool: FunctionTool) -> Self {
        tool.inherit(self.limits(), self.concurrency());
        self.tools.push(tool);
        self
    }

    /// Adds a nested toolset.
    pub fn toolset(mut self, mut toolset: Toolset) -> Self {
        toolset.inherit(self.limits(), self.concurrency());
        self.toolsets.push(toolset);
        self
    }

    /// A deadline for the calls of every tool in this toolset (nested ones and a source's
    /// included) that neither it nor an inner toolset sets; see [`FunctionTool::deadline`].
    /// Builder order does not matter: tools added before and after take it.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.limits.deadline = Some(deadline);
        self.inherit(self.inherited, self.shared.clone());
        self
    }

    /// A heartbeat for the calls of every tool in this toolset that neither it nor an inner
    /// toolset sets; see [`FunctionTool::heartbeat`].
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.limits.heartbeat = Some(heartbeat);
        self.inherit(self.inherited, self.shared.clone());
        self
    }

    /// What a resumed session does with a call of every tool in this toolset that neither it
    /// nor an inner toolset decides, if the call was running when the session's process
    /// ended; see [`FunctionTool::on_interrupted`].
    pub fn on_interrupted(mut self, policy: crate::OnInterrupted) -> Self {
        self.limits.on_interrupted = Some(policy);
        self.inherit(self.inherited, self.shared.clone());
        self
    }

    /// The limits this toolset gives its tools: its own, else an enclosing toolset's.
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn limits(&self) -> CallLimits {
        self.limits.or(self.inherited)
    }

    /// At most `max` calls of this toolset's tools (nested toolsets' included) run at once
    /// in one toolset actor (0 counts as 1); later ones wait in arrival order, as with
    /// [`FunctionTool::max_concurrent`]. The calls of a nested async toolset run in its own
    /// actor and count there only; a source's tools are not capped.
    pub fn max_concurrent(mut self, max: usize) -> Self {
        self.max_concurrent = Some(max.max(1));
        self.inherit(self.inherited, self.shared.clone());
        self
    }

    /// The caps this toolset gives its tools: its own, then the enclosing toolsets'.
    fn concurrency(&self) -> Vec<ConcurrencyLimit> {
        let own = self
            .max_concurrent
            .map(|max| ConcurrencyLimit { group: format!("toolset:{}", self.id).into(), max });
        own.into_iter().chain(self.shared.iter().cloned()).collect()
    }

    /// Takes `outer` as the enclosing toolsets' limits and caps, and passes the result down.
    fn inherit(&mut self, outer: CallLimits, shared: Vec<ConcurrencyLimit>) {
        self.inherited = outer;
        self.shared = shared;
        let limits = self.limits();
        let caps = self.concurrency();
        for tool in &mut self.tools {
            tool.inherit(limits, caps.clone());
        }
        for nested in &mut self.toolsets {
            nested.inherit(limits, caps.clone());
        }
    }

    /// Templates for the calls of this (async) toolset; they replace the agent's and the
    /// session's as a whole (§8).
    pub fn templates(mut self, templates: Templates) -> Self {
        self.templates = Some(templates);
        self
    }

    /// Decides which of its tools the model sees, request by request (see [`ToolVisibility`]).
    pub fn visibility(mut self, visibility: Arc<dyn ToolVisibility>) -> Self {
        self.visibility = Some(visibility);
        self
    }

    /// Adds tools learned while the session runs (see [`ToolSource`]); an async toolset runs
    /// them in its own actor, as its other tools.
    pub fn source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// Every tool source, depth first, with the innermost async toolset that runs its tools and
    /// the limits its tools take unless they set their own.
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn routed_sources(&self) -> Vec<(&Arc<dyn ToolSource>, Option<&Toolset>, CallLimits)> {
        let mut out = Vec::new();
        self.sources_into(None, &mut out);
        out
    }

    fn sources_into<'a>(
        &'a self,
        outer: Option<&'a Toolset>,
        out: &mut Vec<(&'a Arc<dyn ToolSource>, Option<&'a Toolset>, CallLimits)>,
    ) {
        let owner = if self.is_async { Some(self) } else { outer };
        out.extend(self.source.iter().map(|s| (s, owner, self.limits())));
        for nested in &self.toolsets {
            nested.sources_into(owner, out);
        }
    }

    /// The outermost toolsets (this one or nested) that decide their tools' visibility, each
    /// with all its tools.
    pub fn visibility_groups(&self) -> Vec<(&Arc<dyn ToolVisibility>, Vec<&FunctionTool>)> {
        match &self.visibility {
            Some(visibility) => vec![(visibility, self.flatten())],
            None => self.toolsets.iter().flat_map(Toolset::visibility_groups).collect(),
        }
    }

    /// The toolset's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// True for an async toolset.
    pub fn is_async(&self) -> bool {
        self.is_async
    }

    /// The toolset's templates, if it sets any.
    pub fn template_overrides(&self) -> Option<&Templates> {
        self.templates.as_ref()
    }

    /// Every tool, depth first: this toolset's own tools, then each nested toolset's.
    pub fn flatten(&self) -> Vec<&FunctionTool> {
        self.routed().into_iter().map(|(tool, _)| tool).collect()
    }

    /// Every tool with the innermost async toolset that contains it (§4 step 7), if any.
    pub fn routed(&self) -> Vec<(&FunctionTool, Option<&Toolset>)> {
        let mut out = Vec::new();
        self.route_into(None, &mut out);
        out
    }

    fn route_into<'a>(
        &'a self,
        outer: Option<&'a Toolset>,
        out: &mut Vec<(&'a FunctionTool, Option<&'a Toolset>)>,
    ) {
        let owner = if self.is_async { Some(self) } else { outer };
        out.extend(self.tools.iter().map(|t| (t, owner)));
        for nested in &self.toolsets {
            nested.route_into(owner, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_context::RunContext;
    use crate::tool::NoArgs;
    use crate::tool_error::ToolError;

    fn weather() -> FunctionTool {
        FunctionTool::new("get_weather", "Weather.", |_c: RunContext, _a: NoArgs| async move {
            Ok::<_, ToolError>("sunny")
        })
    }

    #[test]
    fn toolsets_flatten_depth_first() {
        let set = Toolset::new("outer")
            .tool(weather())
            .toolset(Toolset::new("inner").tool(weather().cancellable()));
        let names: Vec<_> =
            set.flatten().iter().map(|t| (t.name(), t.flags().cancellable)).collect();
        assert_eq!(names, [("get_weather", false), ("get_weather", true)]);
    }

    #[test]
    fn limits_fall_back_to_the_innermost_toolset_whatever_the_builder_order() {
        let secs = Duration::from_secs;
        let own = weather().deadline(secs(1));
        let inner = Toolset::new("inner").tool(weather()).deadline(secs(2));
        let outer = Toolset::new("outer")
            .tool(own)
            .toolset(inner)
            .deadline(secs(3))
            .heartbeat(secs(4))
            .tool(weather());
        let deadlines: Vec<_> = outer.flatten().iter().map(|t| t.limits().deadline).collect();
        assert_eq!(deadlines, [Some(secs(1)), Some(secs(3)), Some(secs(2))]);
        assert!(outer.flatten().iter().all(|t| t.limits().heartbeat == Some(secs(4))));
        // Set again, the toolset's limit reaches the tools it holds already.
        let again = outer.deadline(secs(5));
        let deadlines: Vec<_> = again.flatten().iter().map(|t| t.limits().deadline).collect();
        assert_eq!(deadlines, [Some(secs(1)), Some(secs(5)), Some(secs(2))]);
    }

    #[test]
    fn concurrency_caps_reach_every_tool_whatever_the_builder_order() {
        let groups = |t: &FunctionTool| -> Vec<(String, usize)> {
            t.concurrency_limits().iter().map(|l| (l.group.to_string(), l.max)).collect()
        };
        let inner = Toolset::new("inner").tool(weather().max_concurrent(1)).max_concurrent(2);
        let outer = Toolset::new_async("outer").tool(weather().renamed("w2")).toolset(inner);
        let outer = outer.max_concurrent(0);
        let tools = outer.flatten();
        assert_eq!(groups(tools[0]), [("toolset:outer".to_string(), 1)]);
        assert_eq!(
            groups(tools[1]),
            [
                ("tool:get_weather".to_string(), 1),
                ("toolset:inner".to_string(), 2),
                ("toolset:outer".to_string(), 1)
            ]
        );
        assert!(weather().concurrency_limits().is_empty());
    }
}
