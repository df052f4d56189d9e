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
//! use colloquy_mcp::McpToolset;
//! use tokio::process::Command;
//!
//! let mut npx = Command::new("npx");
//! npx.args(["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]);
//! let files = McpToolset::stdio("files", npx).cancellable(["search_files"]).build();
//! let web = McpToolset::http("search", "http://127.0.0.1:9000/mcp").build();
//! let agent = colloquy_model::Agent::new("helper", "…").toolset(files).toolset(web);
//! # drop(agent);
//! ```
//!
//! [`build`](McpToolset::build) gives a toolset the session supervises: the server starts with
//! the toolset's actor (with the session, or with its agent; the first LLM request waits for
//! its list, up to [`start_timeout`](McpToolset::start_timeout)), is restarted with backoff if
//! it dies, has its list refreshed when it says the list changed, and stops with the session.
//! [`connect`](McpToolset::connect) connects at once instead and reports failure to the
//! caller.
//!
//! Tool names: the server's, unless [`McpToolset::prefix`] sets one (`<prefix>_<name>`), made
//! to fit `[A-Za-z0-9_-]{1,64}` as model APIs require; a name another tool of the agent has is
//! refused when the session starts (`duplicate function name`).
//!
//! Bounds, so that no server can freeze, flood or read a session:
//!
//! - a result over [`MAX_RESULT_BYTES`] of text ([`McpToolset::max_result_bytes`]) ends its
//!   call with an error output giving its size and the limit;
//! - a message over 16 MiB (a stdio line, an HTTP JSON body or SSE event), which is dropped
//!   without being read past the limit, ends the call it answered with an error output saying
//!   so (the calls in flight, when the message's start or its stream does not say which call
//!   it answered);
//! - a listed tool whose description rmcp cannot read (a schema nested deeper than
//!   serde_json's limit, a schema that is not an object) is skipped with a warning naming it;
//!   the others load (over stdio and HTTP alike);
//! - progress reaches the call as at most one update per [`PROGRESS_INTERVAL`]
//!   ([`McpToolset::progress_interval`]), the latest winning; an update still held when the
//!   result arrives is dropped, the result being newer;
//! - a stdio server starts with the variables in [`INHERITED_ENV`] from colloquy's
//!   environment (the official SDKs' list), those named with [`McpToolset::inherit_env`], and
//!   those set on its `Command`; never the rest (provider keys included);
//! - a stdio server's whole process group dies with colloquy: when the toolset closes or is
//!   dropped, when the program exits, and when it is killed (even by `SIGKILL`; a guard
//!   process in the group kills it when its pipe from colloquy closes).

mod client;
mod content;
mod frames;
mod http;
mod names;
mod source;
mod spec;
mod stdio;
mod throttle;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use colloquy_model::Toolset;
use tokio::process::Command;

pub use content::render;
pub use names::model_name;
pub use spec::INHERITED_ENV;

use client::{Connection, Handler};
use source::McpSource;
use spec::Spec;
use tools::{Options, Slot, list};

/// How long a session's first LLM request waits for a supervised server's tools by default.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest result text (in bytes) a call gives the model by default: 1 MiB.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// A call's progress becomes at most one update per this interval by default.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long an MCP call may run by default before it ends `timed_out`: the official
/// TypeScript SDK's request timeout. Progress does not extend it; set another with
/// [`McpToolset::deadline`].
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

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

/// An MCP server to load tools from: a child process speaking stdio, or a streamable HTTP
/// endpoint.
pub struct McpToolset {
    id: String,
    spec: Spec,
    options: Options,
    start_timeout: Duration,
    limits: colloquy_model::CallLimits,
}

impl McpToolset {
    /// A server run as a child process: the command is run directly (not through a shell)
    /// as the leader of its own process group, which is stopped as a whole with it. Its
    /// environment: [`INHERITED_ENV`] and [`inherit_env`](Self::inherit_env)'s names from
    /// colloquy's, then what `command` sets (`env`, `env_remove`); nothing else.
    pub fn stdio(id: impl Into<String>, command: Command) -> Self {
        Self::new(id, Spec::stdio(&command))
    }

    /// A server at a streamable HTTP endpoint (`http://127.0.0.1:9000/mcp`).
    pub fn http(id: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(id, Spec::Http(url.into()))
    }

    fn new(id: impl Into<String>, spec: Spec) -> Self {
        let mut limits = colloquy_model::CallLimits::default();
        limits.deadline = Some(DEFAULT_DEADLINE);
        let options = Options::default();
        Self { id: id.into(), spec, options, start_timeout: START_TIMEOUT, limits }
    }

    /// How long each call of the server's tools may run before it ends `timed_out` and the
    /// model reads why (default [`DEFAULT_DEADLINE`]; `None`: none of its own, so an enclosing
    /// toolset's or the session's `tool_deadline`, if any). The server then gets MCP's
    /// cancellation, as for a cancelled call (within the session's `cancel_grace`; with a
    /// zero grace the call is only dropped).
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.limits.deadline = deadline;
        self
    }

    /// How long a call may go without an update before it ends `timed_out` (default: no
    /// heartbeat). Updates are progress notifications after the throttle
    /// ([`progress_interval`](Self::progress_interval)), so keep it well above that interval.
    pub fn heartbeat(mut self, heartbeat: Option<Duration>) -> Self {
        self.limits.heartbeat = heartbeat;
        self
    }

    /// An async toolset with this server's limits.
    fn toolset(&self) -> Toolset {
        let mut toolset = Toolset::new_async(&self.id);
        if let Some(deadline) = self.limits.deadline {
            toolset = toolset.deadline(deadline);
        }
        if let Some(heartbeat) = self.limits.heartbeat {
            toolset = toolset.heartbeat(heartbeat);
        }
        toolset
    }

    /// Names the model sees are `<prefix>_<tool>` (default: the server's names).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = Some(prefix.into());
        self
    }

    /// These tools (by the server's names) can be cancelled: by the model, a `replace`
    /// duplicate or a drain; the server gets MCP's cancellation notification.
    pub fn cancellable<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.options.cancellable.extend(names.into_iter().map(Into::into));
        self
    }

    /// Every tool of the server can be cancelled (a chat where the user may stop any call).
    pub fn cancellable_all(mut self) -> Self {
        self.options.cancellable_all = true;
        self
    }

    /// The duplicate policy of the server's tool `name` (§6.1; default: allow).
    pub fn on_duplicate(
        mut self,
        name: impl Into<String>,
        policy: colloquy_model::OnDuplicate,
        scope: colloquy_model::DuplicateScope,
    ) -> Self {
        self.options.on_duplicate.insert(name.into(), (policy, scope));
        self
    }

    /// These variables of colloquy's environment reach a stdio server too, if set (the
    /// server's token, say); no effect on an HTTP server.
    pub fn inherit_env<S: Into<std::ffi::OsString>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.spec.inherit(names.into_iter().map(Into::into));
        self
    }

    /// The longest result, in bytes of the text the model would read, a call may give
    /// (default [`MAX_RESULT_BYTES`]); a longer one ends the call with an error output giving
    /// its size and this limit.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.options.bounds.max_result_bytes = bytes;
        self
    }

    /// A call's progress notifications become at most one update per `interval` (default
    /// [`PROGRESS_INTERVAL`]; zero lets every one through): the first at once, then the
    /// latest when the interval has passed.
    pub fn progress_interval(mut self, interval: Duration) -> Self {
        self.options.bounds.progress_interval = interval;
        self
    }

    /// How long the session's first LLM request waits for a supervised server's first tool
    /// list (default [`START_TIMEOUT`]); past it the session goes on without them, with an
    /// `error` event saying so.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// The server's tools as an async toolset the session supervises (see the crate docs).
    pub fn build(self) -> Toolset {
        let toolset = self.toolset();
        let source = McpSource::new(self.id, self.spec, self.options, self.start_timeout);
        toolset.source(Arc::new(source))
    }

    /// Starts (or reaches) the server now and lists its tools; the connection lives as long
    /// as the returned toolset's tools do (it is not restarted).
    pub async fn connect(self) -> Result<McpServer, McpError> {
        let handler = Handler::default();
        let service = self.spec.open(&self.id, handler.clone()).await?;
        let connection = Connection::owning(service, &handler);
        let slot = Arc::new(Slot::default());
        slot.set(Some(Arc::clone(&connection)));
        let (tools, skipped) = list(&self.id, &connection, &self.options, &slot)
            .await
            .map_err(|e| McpError::Protocol { id: self.id.clone(), message: e.to_string() })?;
        let toolset = tools.into_iter().fold(self.toolset(), Toolset::tool);
        Ok(McpServer { toolset, skipped })
    }
}

/// A connected server: its tools as a toolset, and the tools it offered that could not be
/// used (with why). The connection lives as long as the toolset's tools: it closes when the
/// last of them is dropped (the session that had them closed).
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
