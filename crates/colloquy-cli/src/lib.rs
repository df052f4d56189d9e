//! The `colloquy` command's library: its arguments (clap), the demo and the chat, kept out of
//! `main.rs` so tests can run them.

pub mod chat;
pub mod demo;
pub mod transcript;

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
}

/// `colloquy chat` options.
#[derive(Debug, clap::Args, Clone, PartialEq)]
pub struct ChatArgs {
    /// Which API to talk to.
    #[arg(long, value_enum, default_value_t = Provider::Openai)]
    pub provider: Provider,
    /// The model [default: $COLLOQUY_MODEL, else the provider's default].
    #[arg(long)]
    pub model: Option<String>,
    /// The server [default: $OPENAI_BASE_URL (with /v1) or $ANTHROPIC_BASE_URL (without)].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Plain text, without colour (also when NO_COLOR is set or stdout is not a terminal).
    #[arg(long)]
    pub no_color: bool,
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
                model: Some("m".into()),
                base_url: None,
                no_color: false,
                mcp: vec![],
                instructions: None,
                temperature: None,
                require_approval: vec![],
            }))
        );
        match parse(&["chat", "--instructions", "Be brief.", "--temperature", "0.2"]) {
            Ok(Command::Chat(args)) => {
                assert_eq!(args.instructions.as_deref(), Some("Be brief."));
                assert_eq!(args.temperature, Some(0.2));
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
}
