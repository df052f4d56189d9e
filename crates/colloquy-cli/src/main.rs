//! `colloquy`: the command-line front of colloquy. Thin glue over `colloquy_cli`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use colloquy_cli::chat::{self, ChatError};
use colloquy_cli::cluster::{self, CommandError};
use colloquy_cli::console::clean;
use colloquy_cli::{Cli, Command, demo, serve, sessions};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let terminal = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Logs go to stderr; RUST_LOG chooses them. The chat shows failures as lines of its own,
    // so by default it logs errors only, the rest warnings too. The NATS client's own logs
    // repeat what the cluster's errors and warnings say (a refused token, a reconnection).
    let default = if matches!(cli.command, Command::Chat(_)) { "error" } else { "warn" };
    let default = format!("{default},async_nats=off");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
        Command::Run { file, timeline } => run(&file, timeline),
        Command::Demo { no_color, fast } => {
            let pace = if fast { Duration::ZERO } else { Duration::from_millis(100) };
            let color = terminal && !no_color;
            runtime(|| demo::run(std::io::stdout().lock(), color, pace), "demo failed")
        }
        Command::Chat(args) => {
            let (console, restore) = chat::console(terminal && !args.no_color);
            let Some(runtime) = new_runtime() else { return ExitCode::FAILURE };
            let ended = runtime.block_on(async move { chat::run(&args, console).await });
            // Whatever is left (a tool body blocking a thread, say) gets a moment, then is
            // left behind: quitting always quits.
            runtime.shutdown_timeout(SHUTDOWN_WAIT);
            if let Some(restore) = restore {
                restore.finish();
            }
            match ended {
                Ok(chat::Ending::Left) => ExitCode::SUCCESS,
                Ok(chat::Ending::Signal(number)) => ExitCode::from(128 + number as u8),
                Err(ChatError::Usage(message)) => {
                    eprintln!("colloquy chat: {message}");
                    ExitCode::from(2)
                }
                Err(ChatError::Session(e)) => {
                    // A resume's error names what the store held: printed safe.
                    eprintln!("colloquy chat: {}", clean::line(&e.to_string()));
                    ExitCode::FAILURE
                }
                Err(ChatError::Store(e)) => {
                    eprintln!("colloquy chat: the store: {}", clean::line(&e));
                    ExitCode::FAILURE
                }
                Err(ChatError::Cluster(e)) => {
                    eprintln!("colloquy chat: {e}");
                    ExitCode::FAILURE
                }
                Err(ChatError::Lost(e)) => {
                    eprintln!("colloquy chat: the session is lost: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Node(args) => {
            let out = Box::new(std::io::stdout());
            cluster_command("node", |runtime| runtime.block_on(cluster::node::run(&args, out)))
        }
        Command::Nodes(args) => cluster_command("nodes", |runtime| {
            runtime.block_on(cluster::nodes::run(&args, &mut std::io::stdout().lock()))
        }),
        Command::Serve(args) => {
            let out = Box::new(std::io::stdout());
            cluster_command("serve", |runtime| runtime.block_on(serve::run(&args, out)))
        }
        Command::Sessions(args) => match sessions::run(&args, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("colloquy sessions: {}", clean::line(&e.to_string()));
                ExitCode::FAILURE
            }
        },
    }
}

/// Runs a cluster command: exit status 0, 2 for a usage error, 1 for any other.
fn cluster_command(
    name: &str,
    work: impl FnOnce(&tokio::runtime::Runtime) -> Result<(), CommandError>,
) -> ExitCode {
    let Some(runtime) = new_runtime() else { return ExitCode::FAILURE };
    let ended = work(&runtime);
    // As for the chat: MCP servers and tasks still running get a moment, then are left.
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    match ended {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ CommandError::Usage(_)) => {
            eprintln!("colloquy {name}: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("colloquy {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How long the chat's runtime waits, once the chat is over, for work still running.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(500);

fn run(path: &str, timeline: Option<String>) -> ExitCode {
    match colloquy_scenario::run_file(path) {
        Ok(trace) => {
            if let Some(out) = timeline {
                let title = std::path::Path::new(path)
                    .file_stem()
                    .map_or(path.to_string(), |s| s.to_string_lossy().into_owned());
                if let Err(e) = std::fs::write(&out, trace.timeline_html(&title)) {
                    eprintln!("colloquy: cannot write {out}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            print!("{}", trace.to_json());
            ExitCode::SUCCESS
        }
        Err(e @ colloquy_scenario::ScenarioError::Run(_)) => {
            eprintln!("colloquy: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("colloquy: {path}: {e}");
            ExitCode::from(2)
        }
    }
}

fn new_runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("colloquy: cannot start the runtime: {e}");
            None
        }
    }
}

fn runtime<F, E>(work: impl FnOnce() -> F, what: &str) -> ExitCode
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let Some(runtime) = new_runtime() else { return ExitCode::FAILURE };
    match runtime.block_on(work()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("colloquy: {what}: {e}");
            ExitCode::FAILURE
        }
    }
}
