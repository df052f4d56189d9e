//! How to reach a server, kept so it can be reached again after it dies: a command (rebuilt
//! from its parts each time: a `Command` cannot be cloned) or a URL. A command starts with an
//! allow-listed environment, never colloquy's whole one (which holds the provider keys).

use std::ffi::OsString;
use std::path::PathBuf;

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::service::RunningService;
use tokio::process::Command;

use crate::McpError;
use crate::client::Handler;

/// The variables a server inherits from colloquy's environment, as the official SDKs' stdio
/// clients do (`DEFAULT_INHERITED_ENV_VARS`); anything else only if the host passes it.
#[cfg(not(windows))]
pub const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
/// The variables a server inherits from colloquy's environment, as the official SDKs' stdio
/// clients do (`DEFAULT_INHERITED_ENV_VARS`); anything else only if the host passes it.
#[cfg(windows)]
pub const INHERITED_ENV: &[&str] = &[
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PATHEXT",
    "PROCESSOR_ARCHITECTURE",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
];

#[derive(Clone, Debug)]
pub(crate) enum Spec {
    Stdio {
        program: OsString,
        args: Vec<OsString>,
        envs: Vec<(OsString, Option<OsString>)>,
        /// More variables inherited from colloquy's environment, by name.
        inherit: Vec<OsString>,
        cwd: Option<PathBuf>,
    },
    Http(String),
}

impl Spec {
    pub(crate) fn stdio(command: &Command) -> Self {
        let std = command.as_std();
        Spec::Stdio {
            program: std.get_program().to_owned(),
            args: std.get_args().map(ToOwned::to_owned).collect(),
            envs: std.get_envs().map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned))).collect(),
            inherit: Vec::new(),
            cwd: std.get_current_dir().map(ToOwned::to_owned),
        }
    }

    /// Variables `names` are inherited from colloquy's environment too (a stdio server's).
    pub(crate) fn inherit(&mut self, names: impl IntoIterator<Item = OsString>) {
        if let Spec::Stdio { inherit, .. } = self {
            inherit.extend(names);
        }
    }

    /// Starts (or reaches) the server and completes the protocol's handshake.
    pub(crate) async fn open(
        &self,
        id: &str,
        handler: Handler,
    ) -> Result<RunningService<RoleClient, Handler>, McpError> {
        let protocol = |message: String| McpError::Protocol { id: id.to_string(), message };
        match self {
            Spec::Stdio { program, args, envs, inherit, cwd } => {
                let mut command = Command::new(program);
                command.args(args).env_clear();
                let allowed = INHERITED_ENV.iter().map(OsString::from).chain(inherit.clone());
                for name in allowed {
                    match std::env::var_os(&name) {
                        // Shell functions (`BASH_FUNC_…=() {…}`) are skipped, as the SDKs do.
                        Some(value) if !value.as_encoded_bytes().starts_with(b"()") => {
                            command.env(name, value);
                        }
                        _ => {}
                    }
                }
                // What the host set on its command, last: it wins, and a removal holds.
                for (key, value) in envs {
                    match value {
                        Some(value) => command.env(key, value),
                        None => command.env_remove(key),
                    };
                }
                if let Some(cwd) = cwd {
                    command.current_dir(cwd);
                }
                let (transport, stderr) =
                    crate::stdio::spawn(id, command, std::sync::Arc::clone(&handler.edges))
                        .map_err(|source| McpError::Spawn { id: id.to_string(), source })?;
                if let Some(stderr) = stderr {
                    log_stderr(id.to_string(), stderr);
                }
                handler.serve(transport).await.map_err(|e| protocol(e.to_string()))
            }
            Spec::Http(url) => {
                let edges = std::sync::Arc::clone(&handler.edges);
                let transport = crate::http::transport(id, url, edges);
                handler.serve(transport).await.map_err(|e| protocol(e.to_string()))
            }
        }
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
