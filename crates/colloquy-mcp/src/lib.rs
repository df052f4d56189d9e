//! Tools of [Model Context Protocol](https://modelcontextprotocol.io) servers as colloquy
//! toolsets, on the official Rust SDK ([rmcp]).
//!
//! A server's tools become function tools with the server's JSON schemas (validated as any
//! tool's arguments are), run by an async toolset of their own: duplicate policies,
//! cancellation, events and inspection work as for colloquy's own tools. The server's progress
//! notifications become `ctx.update()` updates, so a long MCP tool is a background tool;
//! cancelling a call sends MCP's cancellation; a result with `isError` is an error output the
//! model reads; every content block reaches the model (non-text ones described).
//!
//! ```no_run
//! # async fn demo() -> Result<(), colloquy_mcp::McpError> {
//! use colloquy_mcp::McpToolset;
//! use tokio::process::Command;
//!
//! let mut npx = Command::new("npx");
//! npx.args(["-y", "@modelcontextprotocol/server-everything"]);
//! let everything = McpToolset::stdio("everything", npx).cancellable(["sleep"]).connect().await?;
//! let agent = colloquy_core::Agent::new("helper", "Use the tools.").toolset(everything.toolset());
//! # drop(agent);
//! # Ok(())
//! # }
//! ```
//!
//! Tool names: the server's, unless [`McpToolset::prefix`] sets one (`<prefix>_<name>`), made
//! to fit `[A-Za-z0-9_-]{1,64}` as model APIs require; a name another tool of the agent has is
//! refused when the session starts (`duplicate function name`).

mod client;
mod content;
mod names;

use std::collections::BTreeSet;
use std::sync::Arc;

use colloquy_core::{FunctionTool, RunContext, Toolset};
use rmcp::ServiceExt;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};
use tokio::process::Command;

pub use content::render;
pub use names::model_name;

use client::{Connection, Handler};

/// Why a server's tools could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server process could not be started.
    #[error("cannot start MCP server `{id}`: {source}")]
    Spawn {
        /// The toolset's id.
        id: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The protocol handshake or the tool listing failed.
    #[error("MCP server `{id}`: {message}")]
    Protocol {
        /// The toolset's id.
        id: String,
        /// What went wrong.
        message: String,
    },
}

enum Transport {
    Stdio(Command),
    Http(String),
}

/// An MCP server to load tools from: a child process speaking stdio, or a streamable HTTP
/// endpoint.
pub struct McpToolset {
    id: String,
    transport: Transport,
    prefix: Option<String>,
    cancellable: BTreeSet<String>,
}

impl McpToolset {
    /// A server run as a child process (the command is run directly, not through a shell; its
    /// whole process group is stopped with the connection).
    pub fn stdio(id: impl Into<String>, command: Command) -> Self {
        Self::new(id, Transport::Stdio(command))
    }

    /// A server at a streamable HTTP endpoint (`http://127.0.0.1:9000/mcp`).
    pub fn http(id: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(id, Transport::Http(url.into()))
    }

    fn new(id: impl Into<String>, transport: Transport) -> Self {
        Self { id: id.into(), transport, prefix: None, cancellable: BTreeSet::new() }
    }

    /// Names the model sees are `<prefix>_<tool>` (default: the server's names).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// These tools (by the server's names) can be cancelled: by the model, a `replace`
    /// duplicate or a drain; the server gets MCP's cancellation notification.
    pub fn cancellable<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.cancellable.extend(names.into_iter().map(Into::into));
        self
    }

    /// Starts (or reaches) the server, lists its tools and returns them as a toolset.
    pub async fn connect(mut self) -> Result<McpServer, McpError> {
        let id = self.id.clone();
        let protocol = |message: String| McpError::Protocol { id: id.clone(), message };
        let handler = Handler::default();
        let transport = std::mem::replace(&mut self.transport, Transport::Http(String::new()));
        let service = match transport {
            Transport::Stdio(command) => {
                let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
                let (transport, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|source| McpError::Spawn { id: id.clone(), source })?;
                if let Some(stderr) = stderr {
                    log_stderr(id.clone(), stderr);
                }
                handler.clone().serve(transport).await.map_err(|e| protocol(e.to_string()))?
            }
            Transport::Http(url) => {
                // rustls without a built-in provider, as the LLM transport: ring, installed
                // here unless the host installed one (docs/decisions.md).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let transport = StreamableHttpClientTransport::from_uri(url);
                handler.clone().serve(transport).await.map_err(|e| protocol(e.to_string()))?
            }
        };
        let connection = Connection::new(service, &handler);
        let listed = connection.tools().await.map_err(|e| protocol(e.to_string()))?;
        let mut toolset = Toolset::new_async(&self.id);
        let mut skipped = Vec::new();
        for tool in listed {
            let tool = serde_json::to_value(&tool).unwrap_or(Value::Null);
            match self.function_tool(&tool, &connection) {
                Ok(function) => toolset = toolset.tool(function),
                Err(why) => skipped.push(why),
            }
        }
        for why in &skipped {
            tracing::warn!(server = %self.id, "MCP tool skipped: {why}");
        }
        Ok(McpServer { toolset, skipped })
    }

    /// One server tool (as the protocol lists it) as a function tool.
    fn function_tool(
        &self,
        tool: &Value,
        connection: &Arc<Connection>,
    ) -> Result<FunctionTool, String> {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let Some(model_name) = model_name(self.prefix.as_deref(), &name) else {
            return Err(format!("a tool without a usable name ({name:?})"));
        };
        let description = tool.get("description").and_then(Value::as_str).unwrap_or("");
        let schema = tool
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let connection = Arc::clone(connection);
        let server_name = name.clone();
        let body = move |ctx: RunContext, arguments: Map<String, Value>| {
            let (connection, server_name) = (Arc::clone(&connection), server_name.clone());
            async move { connection.call(&ctx, &server_name, arguments).await }
        };
        let function = FunctionTool::from_schema(model_name, description, schema, body)
            .map_err(|e| format!("`{name}`: {e}"))?;
        Ok(if self.cancellable.contains(&name) { function.cancellable() } else { function })
    }
}

/// The server's standard error, line by line, into the log (`debug`, target `colloquy_mcp`):
/// a server's own diagnostics never mix with the host's output.
fn log_stderr(id: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %id, "{line}");
        }
    });
}

/// A connected server: its tools as a toolset, and the tools it offered that could not be
/// used (with why). The connection lives as long as the toolset's tools do.
pub struct McpServer {
    toolset: Toolset,
    skipped: Vec<String>,
}

impl McpServer {
    /// The server's tools, as an async toolset to give an agent or a session.
    pub fn toolset(&self) -> Toolset {
        self.toolset.clone()
    }

    /// Tools the server listed that were left out, and why (a bad name or schema).
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }
}
