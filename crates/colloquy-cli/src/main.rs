//! `colloquy`: the command-line front of colloquy. Thin glue over `colloquy_cli`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use colloquy_cli::{Command, USAGE, demo, parse_args};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let command = match parse_args(&args, color) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("colloquy: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Command::Run { path, timeline } => match colloquy_scenario::run_file(&path) {
            Ok(trace) => {
                if let Some(out) = timeline {
                    let title = std::path::Path::new(&path)
                        .file_stem()
                        .map_or(path.clone(), |s| s.to_string_lossy().into_owned());
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
        },
        Command::Demo { color, fast } => {
            let pace = if fast { Duration::ZERO } else { Duration::from_millis(100) };
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("colloquy: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(demo::run(std::io::stdout().lock(), color, pace)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("colloquy: demo failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
