//! What the chat talks to and what `colloquy serve` and `colloquy node` serve: the travel
//! assistant (its instructions, the demo's tools, end_call), its `--mcp` servers' toolsets, and
//! the model `--provider` names (`llm`). Below the commands, above the console.

use std::sync::Arc;
use std::time::Duration;

use colloquy::mcp::McpToolset;
use colloquy::prelude::*;
use colloquy::tools::ToolSource;
use colloquy::toolsets::EndCallTool;
use colloquy_server::Agents;

pub mod llm;
pub mod tools;

use crate::console::clean;
use crate::console::terminal::{Style, Terminal};
use crate::{Provider, ServedAgentArgs};
use tools::{booking_tool, weather_tool};

/// The agent a node serves, and a chat asks for, when no `--agent` names one.
pub const DEFAULT_AGENT: &str = "demo";

/// The chat's agent: a travel assistant with the demo's weather and booking tools (the
/// booking narrates its progress and can be cancelled) and end_call; `instructions` replace
/// the travel assistant's. The tools `approval` names wait for `/approve` or `/reject`.
pub fn agent(instructions: Option<&str>, approval: &[String]) -> Agent {
    let travel = "You are a friendly travel assistant in a terminal chat. Use get_weather for \
                  forecasts and book_flight to book; booking runs in the background and \
                  reports its progress, so keep talking while it works. When the user says \
                  goodbye, say goodbye and call end_call.";
    let approved = |tool: FunctionTool| match approval.iter().any(|name| name == tool.name()) {
        true => tool.requires_approval(),
        false => tool,
    };
    Agent::new("assistant", instructions.unwrap_or(travel))
        .tool(approved(weather_tool(Duration::from_millis(300))))
        .tool(approved(booking_tool(Duration::from_millis(1500)).cancellable()))
        .toolset(EndCallTool::new().toolset())
}

/// An MCP server of `--mcp`: its command and its supervised tool source.
pub(crate) struct McpServer {
    command: String,
    pub(super) source: Arc<dyn ToolSource>,
}

/// `agent` with a supervised toolset for each `--mcp` server (a command run over stdio, split
/// into words as a shell would, never run through one): started with the agent, restarted
/// with backoff when it dies, its tools refreshed when it says they changed. A command that
/// cannot be read is reported and left out.
pub(crate) fn with_mcp_servers(
    mut agent: Agent,
    commands: &[String],
    terminal: &Terminal,
) -> (Agent, Vec<McpServer>) {
    let mut servers = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        let words = match shell_words::split(command) {
            Ok(words) if !words.is_empty() => words,
            _ => {
                let command = clean::line(command);
                terminal.line(Style::Error, &format!("mcp: cannot read the command `{command}`"));
                continue;
            }
        };
        let mut process = tokio::process::Command::new(&words[0]);
        process.args(&words[1..]);
        // The user may stop any call with /cancel: a chat does not know the tools in advance.
        let toolset = McpToolset::stdio(format!("mcp{}", i + 1), process).cancellable_all().build();
        for (source, _, _) in toolset.routed_sources() {
            servers.push(McpServer { command: command.clone(), source: Arc::clone(source) });
        }
        agent = agent.toolset(toolset);
    }
    (agent, servers)
}

/// What `colloquy serve` and `colloquy node` serve: the chat's agent with its `--mcp` servers,
/// on the model `--provider` names (the scripted one by default), under each `--agent` name
/// (`demo` if none), every session configured by the model and tool options.
pub(crate) struct Served {
    /// The one registry both commands hand on (`ServerBuilder::agents`,
    /// `NodeBuilder::agents`), each adding its own started hook.
    pub(crate) agents: Agents,
    /// The model, as the banner names it.
    pub(crate) about: String,
    pub(crate) servers: Vec<McpServer>,
}

impl Served {
    /// The agent `args` describe; a model that cannot be set up is a usage error.
    pub(crate) fn new(args: &ServedAgentArgs, terminal: &Terminal) -> Result<Self, String> {
        let provider = args.provider.unwrap_or(Provider::Scripted);
        let (llm, about) = llm::choose(provider, &args.agent)?;
        let (agent, servers) = with_mcp_servers(
            self::agent(args.agent.instructions.as_deref(), &args.agent.require_approval),
            &args.agent.mcp,
            terminal,
        );
        let names = match args.agent_names.is_empty() {
            true => vec![DEFAULT_AGENT.to_owned()],
            false => args.agent_names.clone(),
        };
        let settings = args.agent.clone();
        let mut agents =
            Agents::new().llm(llm).session(move |session, _| settings.configure(session));
        for name in names {
            let agent = agent.clone();
            agents = agents.agent(name, move || agent.clone());
        }
        Ok(Self { agents, about, servers })
    }

    /// The names the agent is served under, for the banner.
    pub(crate) fn names(&self) -> String {
        self.agents.names().collect::<Vec<_>>().join(", ")
    }
}

/// Says, for each server, how many tools it listed or why it listed none, as soon as it
/// knows (each waits at most the server's start timeout).
pub(crate) fn report_mcp_servers(servers: &[McpServer], terminal: &Terminal) {
    for server in servers {
        let (source, terminal) = (Arc::clone(&server.source), terminal.clone());
        let command = clean::line(&server.command);
        tokio::spawn(async move {
            match source.ready().await {
                Ok(()) => {
                    let count = source.tools().len();
                    terminal.line(Style::Dim, &format!("mcp: {count} tools from `{command}`"));
                }
                Err(why) => terminal.line(Style::Error, &format!("mcp: {}", clean::line(&why))),
            }
        });
    }
}
