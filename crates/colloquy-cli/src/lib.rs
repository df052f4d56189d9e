//! The `colloquy` command's library: argument handling and the demo, kept out of `main.rs`
//! so tests can run them.

pub mod demo;
pub mod transcript;

/// Usage text.
pub const USAGE: &str = "\
usage: colloquy <command> [options]

commands:
  demo [--no-color] [--fast]   play a travel-agent conversation on the scripted LLM
                               (no network, no keys); --fast skips the pauses
  run FILE.json [--timeline OUT.html]
                               play a scenario file on the paused clock and print its
                               trace as JSON (exit 2 on a bad file); --timeline also
                               writes the session's timeline as a self-contained page
  help                         show this text
";

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Play the demo.
    Demo {
        /// Colour the transcript.
        color: bool,
        /// Skip the simulated latencies.
        fast: bool,
    },
    /// Play a scenario file and print its trace.
    Run {
        /// The scenario file.
        path: String,
        /// Where to write the timeline page, if asked.
        timeline: Option<String>,
    },
    /// Print usage.
    Help,
}

/// Parses the arguments after the program name. `color_default` is what `demo` uses without
/// `--no-color` (the caller checks the terminal and `NO_COLOR`).
pub fn parse_args(args: &[String], color_default: bool) -> Result<Command, String> {
    let mut it = args.iter().map(String::as_str);
    match it.next() {
        None | Some("help" | "--help" | "-h") => Ok(Command::Help),
        Some("demo") => {
            let (mut color, mut fast) = (color_default, false);
            for arg in it {
                match arg {
                    "--no-color" => color = false,
                    "--fast" => fast = true,
                    other => return Err(format!("demo: unknown option `{other}`")),
                }
            }
            Ok(Command::Demo { color, fast })
        }
        Some("run") => {
            let (mut path, mut timeline) = (None, None);
            while let Some(arg) = it.next() {
                match arg {
                    "--timeline" => match it.next() {
                        Some(out) if !out.starts_with('-') => timeline = Some(out.to_string()),
                        _ => return Err("run: --timeline needs an output file".into()),
                    },
                    other if other.starts_with('-') => {
                        return Err(format!("run: unknown option `{other}`"));
                    }
                    file if path.is_none() => path = Some(file.to_string()),
                    _ => return Err("run: expected exactly one scenario file".into()),
                }
            }
            match path {
                Some(path) => Ok(Command::Run { path, timeline }),
                None => Err("run: missing the scenario file".into()),
            }
        }
        Some(other) => Err(format!("unknown command `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_demo_options_and_rejects_unknown_input() {
        assert_eq!(parse_args(&args(&[]), true), Ok(Command::Help));
        assert_eq!(
            parse_args(&args(&["demo"]), true),
            Ok(Command::Demo { color: true, fast: false })
        );
        assert_eq!(
            parse_args(&args(&["demo", "--no-color", "--fast"]), true),
            Ok(Command::Demo { color: false, fast: true })
        );
        assert_eq!(
            parse_args(&args(&["demo", "--loud"]), true),
            Err("demo: unknown option `--loud`".into())
        );
        assert_eq!(parse_args(&args(&["dance"]), true), Err("unknown command `dance`".into()));
        assert_eq!(
            parse_args(&args(&["run", "a.json"]), true),
            Ok(Command::Run { path: "a.json".into(), timeline: None })
        );
        assert_eq!(
            parse_args(&args(&["run", "a.json", "--timeline", "t.html"]), true),
            Ok(Command::Run { path: "a.json".into(), timeline: Some("t.html".into()) })
        );
        assert!(parse_args(&args(&["run", "a.json", "--timeline"]), true).is_err());
        assert!(parse_args(&args(&["run", "a.json", "--fast"]), true).is_err());
        assert!(parse_args(&args(&["run"]), true).is_err());
        assert!(parse_args(&args(&["run", "a.json", "b.json"]), true).is_err());
    }
}
