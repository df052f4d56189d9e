//! Agent declarations: a persona with instructions and its own tools.

use crate::templates::Templates;
use crate::tool::FunctionTool;
use crate::toolset::Toolset;

/// An agent: id, instructions, tools. The session runs one agent at a time in an Activity.
///
/// ```
/// use colloquy_model::Agent;
/// let agent = Agent::new("travel", "You are a travel agent.").allow_interruptions(false);
/// assert_eq!(agent.id(), "travel");
/// ```
#[derive(Clone, Debug)]
pub struct Agent {
    id: String,
    instructions: String,
    tools: Vec<FunctionTool>,
    toolsets: Vec<Toolset>,
    allow_interruptions: Option<bool>,
    templates: Option<Templates>,
    on_enter: Option<String>,
}

impl Agent {
    /// An agent with no tools.
    pub fn new(id: impl Into<String>, instructions: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            instructions: instructions.into(),
            tools: Vec::new(),
            toolsets: Vec::new(),
            allow_interruptions: None,
            templates: None,
            on_enter: None,
        }
    }

    /// Adds a tool to the agent's implicit toolset `agent:<id>`.
    pub fn tool(mut self, tool: FunctionTool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds several tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = FunctionTool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a toolset; its tools join the agent's implicit toolset.
    pub fn toolset(mut self, toolset: Toolset) -> Self {
        self.toolsets.push(toolset);
        self
    }

    /// Overrides the session's `allow_interruptions` for this agent's speeches.
    pub fn allow_interruptions(mut self, allow: bool) -> Self {
        self.allow_interruptions = Some(allow);
        self
    }

    /// Templates for this agent's calls and deferred replies; they replace the session's
    /// templates as a whole (§8: missing keys fall back to the defaults).
    pub fn templates(mut self, templates: Templates) -> Self {
        self.templates = Some(templates);
        self
    }

    /// The agent's templates, if it sets any.
    pub fn template_overrides(&self) -> Option<&Templates> {
        self.templates.as_ref()
    }

    /// When the agent becomes active (after a handoff), it greets with a reply generated with
    /// these instructions (the `on_enter` hook of §11.3). Tools marked `ignore_on_enter` are
    /// hidden from that reply.
    pub fn on_enter_reply(mut self, instructions: impl Into<String>) -> Self {
        self.on_enter = Some(instructions.into());
        self
    }

    /// The `on_enter` reply instructions, if any.
    pub fn on_enter_instructions(&self) -> Option<&str> {
        self.on_enter.as_deref()
    }

    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The agent's instructions (the system prompt of its LLM requests).
    pub fn instructions(&self) -> &str {
        &self.instructions
    }

    /// The agent's interruption setting, if it overrides the session's.
    pub fn interruptions_override(&self) -> Option<bool> {
        self.allow_interruptions
    }

    /// Every tool of the agent in the order the model sees them: its own tools, then each
    /// toolset's tools.
    pub fn all_tools(&self) -> Vec<&FunctionTool> {
        self.routed_tools().into_iter().map(|(tool, _)| tool).collect()
    }

    /// The toolsets added with [`Agent::toolset`], in order.
    pub fn declared_toolsets(&self) -> &[Toolset] {
        &self.toolsets
    }

    /// Every tool with the innermost async toolset that runs it (`None`: the agent's implicit
    /// toolset `agent:<id>`).
    pub fn routed_tools(&self) -> Vec<(&FunctionTool, Option<&Toolset>)> {
        let mut out: Vec<(&FunctionTool, Option<&Toolset>)> =
            self.tools.iter().map(|t| (t, None)).collect();
        for set in &self.toolsets {
            out.extend(set.routed());
        }
        out
    }
}
