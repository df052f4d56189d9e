//! What every command that reaches further than the terminal shares: how it stops
//! ([`CommandError`]) and how it reaches NATS, with a token that never passes on the command
//! line (docs/cluster.md#credentials-and-tls).

use std::fmt;

use colloquy::cluster::{ClusterError, NatsConfig};

use crate::NatsAuthArgs;

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

/// The NATS server at `url` with the credentials and TLS `auth` asks for: a token from the
/// variable `--token-env` names (or [`TOKEN_VARIABLE`] if it is set), a user with the password
/// in `--password-env`'s variable, a credentials file, certificates. A URL with credentials in it is refused, so a
/// secret never shows in a process list or a shell history; no message repeats one.
pub(crate) fn nats_config(url: &str, auth: &NatsAuthArgs) -> Result<NatsConfig, String> {
    // A comma-separated list of servers, each `[scheme://][credentials@]host:port[/…]`.
    let has_credentials = url.split(',').any(|server| {
        let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
        rest.split('/').next().is_some_and(|authority| authority.contains('@'))
    });
    if has_credentials {
        return Err(format!(
            "the NATS URL holds credentials: put a token in an environment variable and name it \
             with --nats-token-env (default {TOKEN_VARIABLE}), or use --nats-user and --nats-password-env"
        ));
    }
    let variable = |name: &str, flag: &str| match std::env::var(name) {
        Ok(value) if !value.is_empty() => Ok(value),
        _ => Err(format!("{flag} {name}: that variable is not set")),
    };
    let mut config = NatsConfig::new(url);
    match (&auth.creds, &auth.token_env, &auth.user, &auth.password_env) {
        (Some(_), Some(_), _, _) | (Some(_), _, Some(_), _) | (None, Some(_), Some(_), _) => {
            return Err("--nats-creds, --nats-token-env and --nats-user: choose one".into());
        }
        (Some(creds), None, None, _) => config = config.credentials_file(creds),
        (None, Some(name), None, _) => config = config.token(variable(name, "--nats-token-env")?),
        (None, None, Some(user), Some(name)) => {
            config = config.user_password(user, variable(name, "--nats-password-env")?);
        }
        _ => {
            if let Some(token) = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty()) {
                config = config.token(token);
            }
        }
    }
    if let Some(ca) = &auth.tls_ca {
        config = config.tls_root_certificates(ca);
    }
    if let (Some(cert), Some(key)) = (&auth.tls_cert, &auth.tls_key) {
        config = config.tls_client_certificate(cert, key);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_credentials_is_refused_without_repeating_them() {
        for url in ["nats://s3cret@127.0.0.1:4222", "u:s3cret@h:1", "nats://a:1,nats://s3cret@b:2"]
        {
            let refused = nats_config(url, &NatsAuthArgs::default()).expect_err(url);
            assert!(!refused.contains("s3cret"), "{refused}");
        }
        let plain = nats_config("nats://127.0.0.1:4222,127.0.0.1:4223/x", &NatsAuthArgs::default());
        assert!(format!("{plain:?}").contains("nats://127.0.0.1:4222,127.0.0.1:4223/x"));
    }

    #[test]
    fn a_named_token_variable_must_be_set() {
        for auth in [
            NatsAuthArgs {
                token_env: Some("COLLOQUY_TEST_NO_SUCH_VARIABLE".into()),
                ..Default::default()
            },
            NatsAuthArgs {
                user: Some("node".into()),
                password_env: Some("COLLOQUY_TEST_NO_SUCH_VARIABLE".into()),
                ..Default::default()
            },
        ] {
            let missing = nats_config("nats://h:1", &auth);
            assert!(missing.err().is_some_and(|e| e.contains("COLLOQUY_TEST_NO_SUCH_VARIABLE")));
        }
    }

    #[test]
    fn a_credentials_file_is_one_way_to_authenticate() {
        let creds = NatsAuthArgs { creds: Some("node.creds".into()), ..Default::default() };
        let config = nats_config("nats://h:1", &creds).expect("a credentials file alone");
        assert!(format!("{config:?}").contains("credentials file"), "{config:?}");
        let both = NatsAuthArgs { token_env: Some("T".into()), ..creds };
        assert!(nats_config("nats://h:1", &both).err().is_some_and(|e| e.contains("choose one")));
    }
}
