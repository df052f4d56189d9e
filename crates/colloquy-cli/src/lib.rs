//! The `colloquy` command's library: its arguments (clap), the demo, the chat and the cluster
//! commands, kept out of `main.rs` so tests can run them.

pub mod chat;
pub mod cluster;
pub mod command;
pub mod console;
pub mod demo;
mod ops;
pub mod serve;
pub mod served;
pub mod sessions;
pub mod transcript;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// colloquy: conversational agents whose tools run in the background.
#[derive(Debug, Parser, PartialEq)]
#[command(name = "colloquy", version, arg_required_else_help = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand, PartialEq)]
pub enum Command {
    /// Play a travel-agent conversation on the scripted LLM (no network, no keys).
    Demo {
        /// Plain text, without colour (also when NO_COLOR is set or stdout is not a terminal).
        #[arg(long)]
        no_color: bool,
        /// Skip the simulated pauses.
        #[arg(long)]
        fast: bool,
    },
    /// Play a scenario file on the paused clock and print its trace as JSON.
    ///
    /// Exit status 2, with nothing on standard output, for a file that is not a valid scenario.
    Run {
        /// The scenario file.
        file: String,
        /// Also write the session's timeline as a self-contained HTML page.
        #[arg(long, value_name = "OUT.html")]
        timeline: Option<String>,
    },
    /// Chat with an agent in the terminal, on a real model or the scripted one.
    ///
    /// The agent's tools run in the background and show their progress as they work. One user
    /// turn a line, from a terminal or a pipe; /help lists the commands. In a terminal, lines
    /// are read while the agent speaks: a new line interrupts it, Ctrl-C interrupts the reply
    /// and twice within a second quits. Without a key or a base URL, --provider scripted works
    /// offline.
    Chat(ChatArgs),
    /// Run a cluster node: sessions that hosts place here over NATS, until SIGTERM or SIGINT.
    ///
    /// It serves the chat's agent (the same model, instructions and tool flags) under each
    /// --agent name, on the scripted model unless --provider says otherwise, and prints a
    /// line when it is ready and for each session it starts or closes. SIGTERM or SIGINT
    /// drain it: no new session; its sessions get --drain-timeout to end, then are closed;
    /// a second signal stops waiting. Exit status 0 once drained.
    Node(NodeArgs),
    /// List the live nodes of the cluster at a NATS server: agents, sessions, load.
    ///
    /// Exit status 1, with a message, when NATS cannot be reached within a few seconds.
    Nodes(NodesArgs),
    /// Serve the chat's agent over HTTP and a WebSocket, with a playground page, until SIGTERM
    /// or SIGINT.
    ///
    /// Clients start sessions with POST /v1/sessions and drive them at
    /// /v1/sessions/{id}/ws (docs/protocol.md). It prints the page's URL when it is ready. On
    /// a signal every session closes with reason server_shutdown; exit status 0. A
    /// non-loopback --addr needs a token (--token-env).
    Serve(ServeArgs),
    /// List the sessions kept in a store (`colloquy chat --store`): id, agent, records, last
    /// activity, open or closed, and the calls that were running when it stopped.
    ///
    /// Exit status 1, with a message, for a file that is not a store or cannot be read.
    Sessions(SessionsArgs),
}

/// `colloquy serve` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct ServeArgs {
    /// The address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The agent served, its names, model and tools.
    #[command(flatten)]
    pub served: ServedAgentArgs,
    /// The environment variable that holds the bearer token clients must send (required on
    /// a non-loopback --addr; never on the command line).
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// Also accept browsers from this origin (`https://app.example.com`, as
    /// `scheme://host[:port]`, not `*`), besides the server's own. Repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// The most live sessions at once.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_sessions: usize,
    /// Events each session keeps for clients that reconnect.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub replay_events: usize,
    /// Events queued for a connection's socket; past them it waits, until the events it has
    /// yet to read leave the replay buffer (then it is closed as too slow).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_unread_frames: usize,
    /// The most WebSockets open at once from one client IP address (behind a proxy every
    /// client has the proxy's: raise it there).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_websockets_per_client: usize,
    /// The most WebSockets open at once, apart from the plain HTTP requests.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_websockets: usize,
    /// Also serve Prometheus /metrics and /healthz for the sessions this process runs on this
    /// address, besides --addr's port (`127.0.0.1:9464`; port 0 picks a free one). Not with
    /// --nats: the nodes count their sessions (`colloquy node --metrics-addr`).
    #[arg(long, value_name = "ADDR", conflicts_with = "nats")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// How long a session lives with no client attached (`5m`, `30s`).
    #[arg(long, value_name = "TIME", default_value = "5m", value_parser = duration)]
    pub idle_session: Duration,
    /// Place sessions on the nodes of the colloquy cluster at this NATS server (started with
    /// `colloquy node`) instead of running them here: the agents are the nodes' (--agent
    /// names the default), so --provider and the model and tool options are not taken. A NATS
    /// token is read from COLLOQUY_NATS_TOKEN.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// With --nats: how to authenticate to NATS (the flags `node`, `nodes` and `chat` take).
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// Keep every session in this SQLite file (docs/durability.md), its event numbers in the
    /// directory FILE.events: restarted on the same file, the server lists them
    /// (`GET /v1/sessions`) and resumes each when a client attaches, its events numbered on.
    /// Sessions suspend, not close, when idle and at a stop. Not with --nats.
    #[arg(long, value_name = "FILE", conflicts_with = "nats")]
    pub store: Option<std::path::PathBuf>,
}

/// `colloquy chat` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct ChatArgs {
    /// Which API to talk to.
    #[arg(long, value_enum, default_value_t = Provider::Openai)]
    pub provider: Provider,
    /// The model and the agent's settings.
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Plain text, without colour (also when NO_COLOR is set or stdout is not a terminal).
    #[arg(long)]
    pub no_color: bool,
    /// Chat with a session on a node of the colloquy cluster at this NATS server (started
    /// with `colloquy node`) instead of in this process: the model and the tools are the
    /// node's, so --provider and the model and tool options are not taken.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// With --nats: the node to start the session on [default: the least loaded].
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub node: Option<String>,
    /// With --nats: the agent to start, by the name the nodes register it under [default:
    /// demo].
    #[arg(long = "agent", value_name = "NAME", requires = "nats")]
    pub agent_name: Option<String>,
    /// With --nats: how to authenticate to NATS.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// With --nats: how long after its last heartbeat a node is lost, if this chat creates
    /// the cluster's nodes bucket [default: 3s; at least 1s; an existing bucket keeps its own].
    #[arg(long, value_name = "TIME", value_parser = duration, requires = "nats")]
    pub lost_after: Option<Duration>,
    /// Keep the session in this SQLite file, so that it outlives the process
    /// (docs/durability.md): the chat prints the session's id as it starts, and quitting
    /// leaves the session to resume. Not with --nats.
    #[arg(long, value_name = "FILE", conflicts_with = "nats")]
    pub store: Option<std::path::PathBuf>,
    /// With --store: continue this stored session instead of starting one (`colloquy
    /// sessions` lists them).
    #[arg(long, value_name = "ID", requires = "store")]
    pub resume: Option<String>,
    /// With --resume: take the session over from a process that still holds it (one known to
    /// be gone: on another machine that died); that process can no longer write to it.
    #[arg(long, requires = "resume")]
    pub take_over: bool,
}

/// `colloquy sessions` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct SessionsArgs {
    /// The SQLite file the sessions are kept in (`colloquy chat --store`).
    #[arg(long, value_name = "FILE")]
    pub store: std::path::PathBuf,
    /// Delete this stored session instead of listing them.
    #[arg(long, value_name = "ID", conflicts_with = "expire")]
    pub delete: Option<String>,
    /// Delete every stored session not active for this long (`30d`, `12h`), open or closed.
    #[arg(long, value_name = "AGE", value_parser = duration)]
    pub expire: Option<Duration>,
}

/// How `colloquy node`, `colloquy nodes`, `colloquy chat --nats` and `colloquy serve --nats`
/// authenticate to NATS, with the same `--nats-*` flags everywhere:
/// secrets come from environment variables, never from the command line.
#[derive(Debug, clap::Args, Clone, Default, PartialEq)]
pub struct NatsAuthArgs {
    /// The environment variable that holds the NATS token [default: COLLOQUY_NATS_TOKEN, if
    /// set].
    #[arg(id = "nats_token_env", long = "nats-token-env", value_name = "VAR")]
    pub token_env: Option<String>,
    /// The NATS user; its password is in the variable --nats-password-env names.
    #[arg(
        id = "nats_user",
        long = "nats-user",
        value_name = "NAME",
        requires = "nats_password_env"
    )]
    pub user: Option<String>,
    /// The environment variable that holds the NATS user's password.
    #[arg(
        id = "nats_password_env",
        long = "nats-password-env",
        value_name = "VAR",
        requires = "nats_user"
    )]
    pub password_env: Option<String>,
    /// A NATS credentials file (user JWT and nkey seed, from `nsc generate creds`), for a
    /// server in operator mode.
    #[arg(
        id = "nats_creds",
        long = "nats-creds",
        value_name = "FILE",
        conflicts_with_all = ["nats_token_env", "nats_user"]
    )]
    pub creds: Option<std::path::PathBuf>,
    /// Require TLS, trusting the certificate authority in this PEM file besides the system's.
    #[arg(id = "nats_tls_ca", long = "nats-tls-ca", value_name = "PEM")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) for a server that verifies its clients; with --nats-tls-key.
    #[arg(
        id = "nats_tls_cert",
        long = "nats-tls-cert",
        value_name = "PEM",
        requires = "nats_tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM); with --nats-tls-cert.
    #[arg(
        id = "nats_tls_key",
        long = "nats-tls-key",
        value_name = "PEM",
        requires = "nats_tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
}

/// The model and the agent, as `colloquy chat` and `colloquy node` configure them.
#[derive(Debug, clap::Args, Clone, Default, PartialEq)]
pub struct AgentArgs {
    /// The model [default: $COLLOQUY_MODEL, else the provider's default].
    #[arg(long)]
    pub model: Option<String>,
    /// The server [default: $OPENAI_BASE_URL (with /v1) or $ANTHROPIC_BASE_URL (without)].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// An MCP server to load tools from, run over stdio: the whole command in one argument
    /// (split into words as a shell would, not run through one). Repeatable.
    #[arg(long = "mcp", value_name = "COMMAND")]
    pub mcp: Vec<String>,
    /// The agent's instructions (its system prompt) instead of the travel assistant's.
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// The sampling temperature sent to the model, 0 to 2 (Anthropic takes 0 to 1) [default:
    /// the server's]. The scripted model ignores it.
    #[arg(long, value_name = "T", value_parser = temperature)]
    pub temperature: Option<f32>,
    /// A tool of the assistant (get_weather, book_flight) whose calls wait for `/approve ID`
    /// or `/reject ID REASON`. Repeatable.
    #[arg(long = "require-approval", value_name = "TOOL")]
    pub require_approval: Vec<String>,
    /// The model's context size in tokens (llama.cpp's `-c`): each request is kept within it,
    /// the oldest turns left out first [default: none; a request the server refuses as too
    /// long is still retried once, trimmed].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(256..))]
    pub max_context_tokens: Option<u32>,
}

impl AgentArgs {
    /// The session settings these arguments make, applied to `builder`.
    pub fn configure(
        &self,
        builder: colloquy::session::SessionBuilder,
    ) -> colloquy::session::SessionBuilder {
        match self.max_context_tokens {
            Some(tokens) => builder.max_context_tokens(tokens),
            None => builder,
        }
    }
}

/// The agent `colloquy serve` and `colloquy node` serve to others: the names it is started
/// by, its model and its settings.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct ServedAgentArgs {
    /// A name clients (or, for a node, hosts: `colloquy chat --nats URL --agent NAME`) start
    /// the agent by. Repeatable [default: demo].
    #[arg(long = "agent", value_name = "NAME")]
    pub agent_names: Vec<String>,
    /// Which API the sessions talk to [default: the embedded scripted model, no network and
    /// no keys].
    #[arg(long, value_enum)]
    pub provider: Option<Provider>,
    /// The model and the agent's settings.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// What `colloquy node` does with its sessions when it drains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnDrainArg {
    /// Hand each to another node (docs/cluster.md#drain-moves).
    Move,
    /// Wait for each to end, then close it `node_draining`.
    Close,
}

/// `colloquy node` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct NodeArgs {
    /// The NATS server (nats://HOST:PORT; a token goes in --nats-token-env's variable, not here).
    #[arg(long, value_name = "URL")]
    pub nats: String,
    /// The node's name, unique among live nodes: letters, digits, `-` and `_`.
    #[arg(long)]
    pub name: String,
    /// The agent served, its names, model and tools.
    #[command(flatten)]
    pub served: ServedAgentArgs,
    /// The most sessions the node holds at once.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_sessions: usize,
    /// At or above this load (live sessions over --max-sessions) the node takes no new
    /// session.
    #[arg(long, value_name = "X", default_value_t = 0.7)]
    pub load_threshold: f64,
    /// On SIGTERM or SIGINT the node takes no new session and waits this long for each of
    /// its sessions to be quiet before it hands it to another node (`--on-drain move`; past
    /// it, running calls are in doubt), or to end before it closes it (`close`) (`30s`,
    /// `500ms`, `2m`).
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = duration)]
    pub drain_timeout: Duration,
    /// What a drain does with the node's sessions: hand each to another node that keeps
    /// journals and serves its agent, so a rolling deploy closes no conversation (`move`; a
    /// session no other node takes is closed), or close them (`close`).
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OnDrainArg::Move)]
    pub on_drain: OnDrainArg,
    /// How long after its last heartbeat the node is lost, if it creates the cluster's nodes
    /// bucket (at least 1s; an existing bucket keeps its own).
    #[arg(long, value_name = "TIME", default_value = "3s", value_parser = duration)]
    pub lost_after: Duration,
    /// How long the node keeps a session whose hosts (a chat, a `serve --nats`) have all gone
    /// silent, before it closes it `host_lost` and frees its room (at least 3s).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = duration)]
    pub host_lost_after: Duration,
    /// Publish the agent's text as a whole message only, not as it streams (fewer stored
    /// events; `colloquy chat --nats` then shows each reply once it is complete).
    #[arg(long)]
    pub no_agent_text: bool,
    /// Keep no journal of the node's sessions: they are lost with the node rather than moved
    /// to another (by default each session's journal is kept on the NATS server, JetStream,
    /// until it closes; docs/cluster.md#moves).
    #[arg(long)]
    pub no_durable: bool,
    /// The default (kept for scripts that ask for it).
    #[arg(long, hide = true, conflicts_with = "no_durable")]
    pub durable: bool,
    /// Serve Prometheus /metrics and /healthz on this address (`127.0.0.1:9464`; port 0
    /// picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// How to authenticate to NATS.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
}

/// `colloquy nodes` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct NodesArgs {
    /// The NATS server (nats://HOST:PORT; a token goes in --nats-token-env's variable, not here).
    #[arg(long, value_name = "URL")]
    pub nats: String,
    /// The nodes as a JSON array (every field of their announcements) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How long after its last heartbeat a node is lost, if this command creates the
    /// cluster's nodes bucket [default: 3s; at least 1s; an existing bucket keeps its own].
    #[arg(long, value_name = "TIME", value_parser = duration)]
    pub lost_after: Option<Duration>,
    /// How to authenticate to NATS.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
}

/// `--drain-timeout`, `--lost-after`: a number and a unit, `ms`, `s` or `m`.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("`{text}` is not a duration like 30s"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number * 60)),
        "h" => Ok(Duration::from_secs(number * 3_600)),
        "d" => Ok(Duration::from_secs(number * 86_400)),
        _ => Err(format!("`{text}` is not a duration like 30s (units: ms, s, m, h, d)")),
    }
}

/// `--temperature`: a number from 0 to 2.
fn temperature(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(t) if (0.0..=2.0).contains(&t) => Ok(t),
        _ => Err(format!("`{text}` is not a temperature from 0 to 2")),
    }
}

/// The model providers `colloquy chat` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// OpenAI's Chat Completions, or any OpenAI-compatible server.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// The embedded scripted model: no network, no keys.
    Scripted,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, clap::error::ErrorKind> {
        let args = std::iter::once("colloquy").chain(args.iter().copied());
        Cli::try_parse_from(args).map(|cli| cli.command).map_err(|e| e.kind())
    }

    #[test]
    fn a_context_size_is_a_number_of_tokens_not_too_small() {
        let agent = |args: &[&str]| match parse(args) {
            Ok(Command::Chat(chat)) => Ok(chat.agent.max_context_tokens),
            other => Err(other.err()),
        };
        assert_eq!(agent(&["chat", "--max-context-tokens", "4096"]), Ok(Some(4096)));
        assert_eq!(agent(&["chat"]), Ok(None));
        let small = Err(Some(clap::error::ErrorKind::ValueValidation));
        assert_eq!(agent(&["chat", "--max-context-tokens", "100"]), small);
        assert_eq!(agent(&["chat", "--max-context-tokens", "lots"]), small);
    }

    #[test]
    fn parses_every_command_and_rejects_unknown_input() {
        assert_eq!(parse(&["demo"]), Ok(Command::Demo { no_color: false, fast: false }));
        assert_eq!(
            parse(&["demo", "--no-color", "--fast"]),
            Ok(Command::Demo { no_color: true, fast: true })
        );
        assert_eq!(parse(&["demo", "--loud"]), Err(clap::error::ErrorKind::UnknownArgument));
        assert_eq!(parse(&["dance"]), Err(clap::error::ErrorKind::InvalidSubcommand));
        assert_eq!(
            parse(&["run", "a.json", "--timeline", "t.html"]),
            Ok(Command::Run { file: "a.json".into(), timeline: Some("t.html".into()) })
        );
        assert!(parse(&["run"]).is_err());
        assert!(parse(&["run", "a.json", "b.json"]).is_err());
        assert_eq!(
            parse(&["chat", "--provider", "anthropic", "--model", "m"]),
            Ok(Command::Chat(ChatArgs {
                provider: Provider::Anthropic,
                agent: AgentArgs { model: Some("m".into()), ..AgentArgs::default() },
                no_color: false,
                nats: None,
                node: None,
                agent_name: None,
                nats_auth: NatsAuthArgs::default(),
                lost_after: None,
                store: None,
                resume: None,
                take_over: false,
            }))
        );
        match parse(&["chat", "--store", "s.db", "--resume", "abc"]) {
            Ok(Command::Chat(args)) => {
                assert_eq!(args.store.as_deref(), Some(std::path::Path::new("s.db")));
                assert_eq!(args.resume.as_deref(), Some("abc"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["chat", "--resume", "abc"]).is_err(), "--resume needs --store");
        assert!(parse(&["chat", "--store", "s.db", "--take-over"]).is_err(), "and --resume");
        assert!(parse(&["chat", "--store", "s.db", "--nats", "nats://x"]).is_err());
        assert!(parse(&["sessions"]).is_err(), "sessions needs --store");
        match parse(&["serve", "--store", "s.db"]) {
            Ok(Command::Serve(args)) => {
                assert_eq!(args.store.as_deref(), Some(std::path::Path::new("s.db")));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["serve", "--store", "s.db", "--nats", "nats://x"]).is_err());
        match parse(&["chat", "--instructions", "Be brief.", "--temperature", "0.2"]) {
            Ok(Command::Chat(args)) => {
                assert_eq!(args.agent.instructions.as_deref(), Some("Be brief."));
                assert_eq!(args.agent.temperature, Some(0.2));
            }
            other => panic!("{other:?}"),
        }
        for bad in ["-1", "2.5", "hot", "NaN"] {
            assert_eq!(
                parse(&["chat", &format!("--temperature={bad}")]),
                Err(clap::error::ErrorKind::ValueValidation),
                "{bad}"
            );
        }
        assert_eq!(parse(&["chat", "--provider", "x"]), Err(clap::error::ErrorKind::InvalidValue));
    }

    #[test]
    fn parses_serve() {
        match parse(&["serve"]) {
            Ok(Command::Serve(args)) => {
                assert_eq!(args.addr, "127.0.0.1:8080".parse().unwrap());
                assert_eq!((args.max_sessions, args.replay_events), (100, 10_000));
                assert_eq!(args.idle_session, Duration::from_secs(300));
                // The flags' defaults are the server's.
                let limits = colloquy_server::Limits::default();
                let sockets = (args.max_websockets, args.max_websockets_per_client);
                assert_eq!(sockets, (limits.max_websockets, limits.max_websockets_per_client));
                assert!(args.token_env.is_none() && args.served.provider.is_none());
            }
            other => panic!("{other:?}"),
        }
        match parse(&["serve", "--addr", "0.0.0.0:0", "--token-env", "T", "--allow-origin", "o"]) {
            Ok(Command::Serve(args)) => {
                assert_eq!(args.token_env.as_deref(), Some("T"));
                assert_eq!(args.allow_origins, ["o"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(&["serve", "--addr", "here"]),
            Err(clap::error::ErrorKind::ValueValidation)
        );
        match parse(&["serve", "--nats", "u", "--nats-creds", "n.creds", "--nats-tls-ca", "ca"]) {
            Ok(Command::Serve(args)) => {
                let auth = args.nats_auth;
                assert_eq!(auth.creds.as_deref(), Some(std::path::Path::new("n.creds")));
                assert_eq!(auth.tls_ca.as_deref(), Some(std::path::Path::new("ca")));
            }
            other => panic!("{other:?}"),
        }
        // The server's own token and NATS's are two flags.
        match parse(&["serve", "--token-env", "T", "--nats", "u", "--nats-token-env", "N"]) {
            Ok(Command::Serve(args)) => {
                assert_eq!(args.token_env.as_deref(), Some("T"));
                assert_eq!(args.nats_auth.token_env.as_deref(), Some("N"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_the_cluster_commands() {
        match parse(&["node", "--nats", "nats://h:1", "--name", "n1", "--drain-timeout", "500ms"]) {
            Ok(Command::Node(args)) => {
                assert_eq!((args.nats.as_str(), args.name.as_str()), ("nats://h:1", "n1"));
                assert!(args.served.agent_names.is_empty() && args.served.provider.is_none());
                assert_eq!(args.drain_timeout, Duration::from_millis(500));
                assert_eq!((args.max_sessions, args.load_threshold), (100, 0.7));
                assert_eq!(args.lost_after, Duration::from_secs(3));
                assert_eq!(args.host_lost_after, colloquy::cluster::HOST_LOST_AFTER);
                assert!(!args.no_agent_text);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["node", "--nats", "u", "--name", "n", "--agent", "a", "--agent", "b"]) {
            Ok(Command::Node(args)) => assert_eq!(args.served.agent_names, ["a", "b"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(&["node", "--nats", "u"]),
            Err(clap::error::ErrorKind::MissingRequiredArgument)
        );
        for bad in ["30", "1w", "s", "1.5s"] {
            let args = ["node", "--nats", "u", "--name", "n", "--drain-timeout", bad];
            assert_eq!(parse(&args), Err(clap::error::ErrorKind::ValueValidation), "{bad}");
        }
        match parse(&["nodes", "--nats", "u", "--json", "--lost-after", "2s"]) {
            Ok(Command::Nodes(args)) => {
                assert!(args.json);
                assert_eq!(args.lost_after, Some(Duration::from_secs(2)));
            }
            other => panic!("{other:?}"),
        }
        match parse(&["chat", "--nats", "u", "--node", "n1", "--agent", "a"]) {
            Ok(Command::Chat(args)) => {
                assert_eq!(args.nats.as_deref(), Some("u"));
                assert_eq!(
                    (args.node.as_deref(), args.agent_name.as_deref()),
                    (Some("n1"), Some("a"))
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(&["chat", "--lost-after", "2s"]),
            Err(clap::error::ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            parse(&["chat", "--node", "n1"]),
            Err(clap::error::ErrorKind::MissingRequiredArgument)
        );
    }
}
