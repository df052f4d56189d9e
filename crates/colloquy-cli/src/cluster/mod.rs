//! The cluster commands: `colloquy node` runs a node ([`node::run`]), `colloquy nodes` lists
//! the live ones ([`nodes::run`]); `colloquy chat --nats` is the chat's (`chat/remote.rs`).
//! What they share: reaching NATS, with a token that never passes on the command line
//! (docs/cluster.md).

pub mod node;
pub mod nodes;

use std::fmt;

use colloquy::cluster::ClusterError;

/// The agent a node serves, and a chat asks for, when no `--agent` names one.
pub const DEFAULT_AGENT: &str = "demo";

/// The variable a token is read from when no `--token-env` names one.
pub const TOKEN_VARIABLE: &str = "COLLOQUY_NATS_TOKEN";

/// Why a cluster command stopped.
#[derive(Debug)]
pub enum CommandError {
    /// A usage problem (a URL with credentials, a token variable that is not set): exit
    /// status 2.
    Usage(String),
    /// The cluster failed: NATS cannot be reached or refused the token, the node's name is
    /// taken: exit status 1.
    Cluster(ClusterError),
    /// Anything else that stops the command (the metrics address cannot be bound): exit 1.
    Failed(String),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Usage(message) | CommandError::Failed(message) => f.write_str(message),
            CommandError::Cluster(e) => e.fmt(f),
        }
    }
}

/// A NATS server and the token it asks for.
pub(crate) struct Nats {
    /// The URL, which holds no credentials.
    pub(crate) url: String,
    pub(crate) token: Option<String>,
}

impl Nats {
    /// `url`, and the token from the variable `token_env` names (or [`TOKEN_VARIABLE`] if it
    /// is set). A URL with credentials in it is refused, so a token never shows in a process
    /// list or a shell history; the message does not repeat it.
    pub(crate) fn from_args(url: &str, token_env: Option<&str>) -> Result<Self, String> {
        // A comma-separated list of servers, each `[scheme://][credentials@]host:port[/…]`.
        let has_credentials = url.split(',').any(|server| {
            let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
            rest.split('/').next().is_some_and(|authority| authority.contains('@'))
        });
        if has_credentials {
            return Err(format!(
                "the NATS URL holds credentials: put the token in an environment variable and \
                 name it with --token-env (default {TOKEN_VARIABLE})"
            ));
        }
        let token = match token_env {
            Some(variable) => match std::env::var(variable) {
                Ok(token) if !token.is_empty() => Some(token),
                _ => return Err(format!("--token-env {variable}: that variable is not set")),
            },
            None => std::env::var(TOKEN_VARIABLE).ok().filter(|token| !token.is_empty()),
        };
        Ok(Self { url: url.to_owned(), token })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_credentials_is_refused_without_repeating_them() {
        for url in ["nats://s3cret@127.0.0.1:4222", "u:s3cret@h:1", "nats://a:1,nats://s3cret@b:2"]
        {
            let refused = Nats::from_args(url, None).err().expect(url);
            assert!(!refused.contains("s3cret"), "{refused}");
        }
        let plain = Nats::from_args("nats://127.0.0.1:4222,127.0.0.1:4223/x", None);
        assert_eq!(
            plain.map(|n| n.url).ok().as_deref(),
            Some("nats://127.0.0.1:4222,127.0.0.1:4223/x")
        );
    }

    #[test]
    fn a_named_token_variable_must_be_set() {
        let missing = Nats::from_args("nats://h:1", Some("COLLOQUY_TEST_NO_SUCH_VARIABLE"));
        assert!(missing.err().is_some_and(|e| e.contains("COLLOQUY_TEST_NO_SUCH_VARIABLE")));
    }
}
