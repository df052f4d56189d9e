//! Scenario files for colloquy (`../shared/design/SCENARIO-FORMAT.md`): a whole conversation
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
mod runner;
mod template;
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
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|error| ScenarioError::Io { path: path.display().to_string(), error })?;
    run_str(&text)
}
