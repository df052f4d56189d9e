//! Scenario files for colloquy (`docs/scenario-format.md`): a whole conversation
//! described as JSON (agents, tools with scripted bodies, the scripted LLM's answers, what the
//! user does when), played on tokio's paused clock into a trace that is byte-identical on
//! every run. `colloquy run FILE.json` prints it.
//!
//! ```
//! let file = r#"{
//!   "tools": { "get_weather": {
//!       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
//!       "body": [ {"sleep_ms": 100}, {"return": "sunny in {city}"} ] } },
//!   "agents": { "A": { "instructions": "Be brief.", "tools": ["get_weather"] } },
//!   "session": { "agent": "A" },
//!   "llm": [ { "tool_calls": [ {"id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"} ] },
//!            { "text": "Sunny in Oslo." } ],
//!   "steps": [ { "user": "Weather in Oslo?" } ]
//! }"#;
//! let trace = colloquy_scenario::run_str(file).unwrap();
//! assert_eq!(trace.history.len(), 5); // handoff, user, call, output, answer
//! assert_eq!(trace.to_json(), colloquy_scenario::run_str(file).unwrap().to_json());
//! ```

mod file;
mod json;
mod options;
mod runner;
mod template;
mod tool_def;
pub mod trace;

pub use file::{
    Action, AgentDef, BodyStep, Options, Scenario, SessionDef, Step, ToolDef, ToolsetDef,
    ToolsetKind, parse,
};
pub use runner::play;
pub use template::Template;
pub use trace::Trace;

/// Why a scenario could not be played.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file is wrong: bad JSON, an unknown key, a bad reference, an unsupported feature.
    #[error("{0}")]
    File(String),
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// What went wrong.
        error: std::io::Error,
    },
    /// Playing failed.
    #[error("scenario failed: {0}")]
    Run(String),
}

/// Parses and plays a scenario given as JSON text.
pub fn run_str(text: &str) -> Result<Trace, ScenarioError> {
    play(&parse(text)?)
}

/// Reads, parses and plays a scenario file.
pub fn run_file(path: impl AsRef<std::path::Path>) -> Result<Trace, ScenarioError> {
    run_str(&read_file(path.as_ref())?)
}

/// The largest scenario file read: 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads at most [`MAX_FILE_BYTES`] (a device like `/dev/zero` never ends).
fn read_file(path: &std::path::Path) -> Result<String, ScenarioError> {
    use std::io::Read;
    let io = |error| ScenarioError::Io { path: path.display().to_string(), error };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ScenarioError::File(format!("larger than {} MiB", MAX_FILE_BYTES >> 20)));
    }
    String::from_utf8(bytes).map_err(|_| ScenarioError::File("not UTF-8 text".into()))
}
