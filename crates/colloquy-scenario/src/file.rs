//! The scenario file (docs/scenario-format.md "File"), parsed whole before anything runs. Every key
//! of the format is supported; an unknown key fails with its path.

use std::time::Duration;

use colloquy::llm::{ScriptedCall, ScriptedResponse};
use colloquy::templates::Templates;
use serde_json::{Map, Value};

use crate::ScenarioError;
use crate::json::{Obj, expect_true, invalid, ms, parse_strict};
pub use crate::options::Options;
use crate::options::{parse_options, parse_templates};
pub use crate::tool_def::{BodyStep, ToolDef};
use crate::tool_def::{max_concurrent, parse_tool};

/// A parsed scenario.
#[derive(Debug)]
pub struct Scenario {
    /// The scenario's name.
    pub name: Option<String>,
    /// Session options.
    pub options: Options,
    /// Tools by name, in file order.
    pub tools: Vec<ToolDef>,
    /// Toolsets by id, in file order.
    pub toolsets: Vec<ToolsetDef>,
    /// Agents by id, in file order.
    pub agents: Vec<AgentDef>,
    /// The session.
    pub session: SessionDef,
    /// The scripted LLM's answers.
    pub llm: Vec<ScriptedResponse>,
    /// What happens, in order.
    pub steps: Vec<Step>,
}

/// A toolset defined in `toolsets`.
#[derive(Clone, Debug)]
pub struct ToolsetDef {
    /// Id.
    pub id: String,
    /// What it is.
    pub kind: ToolsetKind,
    /// Tool names.
    pub tools: Vec<String>,
    /// Nested toolsets, by id (for `tool_search` / `tool_proxy`: the entries behind the search).
    pub toolsets: Vec<String>,
    /// `templates`.
    pub templates: Option<Templates>,
    /// `max_concurrent` (async and plain toolsets): at most this many calls at once.
    pub max_concurrent: Option<usize>,
}

/// A toolset's `kind`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolsetKind {
    /// `async`: its calls run in a toolset actor of their own.
    Async,
    /// `plain` (colloquy's addition): only groups tools, e.g. a toolset behind a search that
    /// loads as a whole.
    Plain,
    /// `tool_search`.
    ToolSearch {
        /// `strategy`: `bm25` (default) or `keyword`.
        keyword: bool,
        /// `max_results` (default 5).
        max_results: usize,
    },
    /// `tool_proxy`.
    ToolProxy {
        /// `strategy`: `bm25` (default) or `keyword`.
        keyword: bool,
        /// `max_results` (default 5).
        max_results: usize,
    },
    /// `end_call`.
    EndCall {
        /// `extra_description`.
        extra_description: String,
        /// `end_instructions` (absent: the default; `null`: no goodbye).
        end_instructions: Option<String>,
        /// `ignore_on_enter`.
        ignore_on_enter: bool,
    },
}

/// An agent defined in `agents`.
#[derive(Clone, Debug)]
pub struct AgentDef {
    /// Id.
    pub id: String,
    /// Instructions.
    pub instructions: String,
    /// Tool names.
    pub tools: Vec<String>,
    /// Toolset ids.
    pub toolsets: Vec<String>,
    /// `allow_interruptions`.
    pub allow_interruptions: Option<bool>,
    /// `templates`.
    pub templates: Option<Templates>,
    /// `on_enter.generate_reply.instructions`.
    pub on_enter: Option<String>,
}

/// `session`.
#[derive(Debug)]
pub struct SessionDef {
    /// The first agent.
    pub agent: String,
    /// Session-level tool names.
    pub tools: Vec<String>,
    /// Session-level toolset ids.
    pub toolsets: Vec<String>,
}

/// A step, with its optional `at_ms`.
#[derive(Debug)]
pub struct Step {
    /// Sleep until this virtual time first.
    pub at: Option<Duration>,
    /// What to do.
    pub action: Action,
}

/// What a step does.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Only `at_ms`.
    Nothing,
    /// `wait_ms`.
    Wait(Duration),
    /// `user`.
    User(String),
    /// `user_input`: a user message queued behind the current speech.
    UserInput(String),
    /// `user_speaking`.
    UserSpeaking(bool),
    /// `wait_idle`.
    WaitIdle,
    /// `generate_reply`.
    GenerateReply(Option<String>),
    /// `say`.
    Say(String),
    /// `interrupt`.
    Interrupt,
    /// `cancel`: cancel a running call.
    Cancel(String),
    /// `handoff`: `SessionHandle::update_agent`.
    Handoff(String),
    /// `approve`: let a call waiting for approval run.
    Approve(String),
    /// `reject`: reject a call waiting for approval (`id`, `reason`).
    Reject {
        /// The call id.
        id: String,
        /// The `{reason}` of the `approval_rejected` template (by default ``` `NAME` was not
        /// approved: REASON ```).
        reason: String,
    },
    /// `close`.
    Close,
    /// `inspect`: record an actor-tree snapshot.
    Inspect,
    /// `crash`: the session's process dies (docs/scenario-format.md#crash): what its store
    /// holds is kept, nothing else.
    Crash,
    /// `resume`: another process resumes the crashed session from its store.
    Resume,
}

/// Names colloquy's own tools take (the cancel companions, the tool-search and end-call
/// toolsets): a scenario tool with one of them would clash when an agent lists both.
const RESERVED_TOOLS: [&str; 5] = [
    "lk_agents_cancel_task",
    "lk_agents_get_running_tasks",
    "tool_search",
    "call_tool",
    "end_call",
];

/// Parses a whole scenario file.
pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    let value: Value =
        parse_strict(text).map_err(|e| ScenarioError::File(format!("not valid JSON: {e}")))?;
    let mut root = Obj::new(value, "")?;
    let name = root.string("name")?;
    let options = match root.take("options") {
        Some(v) => parse_options(Obj::new(v, "options")?)?,
        None => parse_options(Obj::new(Value::Object(Map::new()), "options")?)?,
    };
    let mut tools = Vec::new();
    for (tool_name, v) in root.entries("tools")? {
        let path = format!("tools.{tool_name}");
        if tool_name.is_empty() {
            return Err(invalid("tools", "a tool needs a name (an empty key)"));
        }
        if RESERVED_TOOLS.contains(&tool_name.as_str()) {
            let why = "is the name of a tool colloquy adds itself";
            return Err(invalid(&path, format!("`{tool_name}` {why}")));
        }
        tools.push(parse_tool(tool_name, Obj::new(v, path)?)?);
    }
    let known_tools: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let mut toolsets = Vec::new();
    for (id, v) in root.entries("toolsets")? {
        let path = format!("toolsets.{id}");
        toolsets.push(parse_toolset(id, Obj::new(v, path)?, &known_tools)?);
    }
    check_nesting(&toolsets)?;
    let known_toolsets: Vec<&str> = toolsets.iter().map(|t| t.id.as_str()).collect();
    let mut agents = Vec::new();
    for (id, v) in root.entries("agents")? {
        let path = format!("agents.{id}");
        agents.push(parse_agent(id, Obj::new(v, path)?, &known_tools, &known_toolsets)?);
    }
    let known_agents: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    for tool in &tools {
        for (i, step) in tool.body.iter().enumerate() {
            if let BodyStep::Handoff { agent, .. } = step
                && !known_agents.contains(&agent.as_str())
            {
                let path = format!("tools.{}.body[{i}].handoff", tool.name);
                return Err(invalid(&path, format!("undefined agent `{agent}`")));
            }
        }
    }
    let session = match root.take("session") {
        Some(v) => parse_session(Obj::new(v, "session")?, &known_tools, &known_toolsets, &agents)?,
        None => return Err(invalid("session", "missing")),
    };
    let llm = root
        .array("llm")?
        .into_iter()
        .enumerate()
        .map(|(i, v)| parse_llm_entry(Obj::new(v, format!("llm[{i}]"))?))
        .collect::<Result<Vec<_>, _>>()?;
    let mut steps = Vec::new();
    for (i, v) in root.array("steps")?.into_iter().enumerate() {
        let path = format!("steps[{i}]");
        if steps.last().is_some_and(|s: &Step| s.action == Action::Close) {
            return Err(invalid(&path, "no step may follow `close`"));
        }
        steps.push(parse_step(Obj::new(v, path)?)?);
    }
    check_crashes(&steps)?;
    for (i, step) in steps.iter().enumerate() {
        if let Action::Handoff(agent) = &step.action
            && !known_agents.contains(&agent.as_str())
        {
            return Err(invalid(
                &format!("steps[{i}].handoff"),
                format!("undefined agent `{agent}`"),
            ));
        }
    }
    root.finish()?;
    Ok(Scenario { name, options, tools, toolsets, agents, session, llm, steps })
}

fn check_tools(names: &[String], known: &[&str], path: &str) -> Result<(), ScenarioError> {
    check_names(names, known, path, "tool")
}

fn check_toolsets(ids: &[String], known: &[&str], path: &str) -> Result<(), ScenarioError> {
    check_names(ids, known, path, "toolset")
}

/// Every name of a list is defined, and listed once (a second listing is a slip; the same
/// tool in the session's and an agent's lists is fine).
fn check_names(
    names: &[String],
    known: &[&str],
    path: &str,
    what: &str,
) -> Result<(), ScenarioError> {
    for (i, name) in names.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if !known.contains(&name.as_str()) {
            return Err(invalid(&at, format!("undefined {what} `{name}`")));
        }
        if names[..i].contains(name) {
            return Err(invalid(&at, format!("`{name}` is listed twice")));
        }
    }
    Ok(())
}

fn parse_toolset(id: String, mut o: Obj, known: &[&str]) -> Result<ToolsetDef, ScenarioError> {
    let search = |o: &mut Obj| -> Result<(bool, usize), ScenarioError> {
        let keyword = match o.string("strategy")?.as_deref() {
            None | Some("bm25") => false,
            Some("keyword") => true,
            Some(other) => {
                return Err(invalid(&o.at("strategy"), format!("unknown strategy `{other}`")));
            }
        };
        let max_results = o.u64("max_results")?.unwrap_or(5) as usize;
        Ok((keyword, max_results))
    };
    let kind = match o.string("kind")?.as_deref() {
        Some("async") => ToolsetKind::Async,
        Some("plain") => ToolsetKind::Plain,
        Some("tool_search") => {
            let (keyword, max_results) = search(&mut o)?;
            ToolsetKind::ToolSearch { keyword, max_results }
        }
        Some("tool_proxy") => {
            let (keyword, max_results) = search(&mut o)?;
            ToolsetKind::ToolProxy { keyword, max_results }
        }
        Some("end_call") => {
            let end_instructions = match o.take("end_instructions") {
                None => Some(colloquy::toolsets::END_INSTRUCTIONS.to_string()),
                Some(Value::Null) => None,
                Some(Value::String(text)) => Some(text),
                Some(_) => {
                    return Err(invalid(&o.at("end_instructions"), "expected a string or null"));
                }
            };
            ToolsetKind::EndCall {
                extra_description: o.string("extra_description")?.unwrap_or_default(),
                end_instructions,
                ignore_on_enter: o.bool("ignore_on_enter")?.unwrap_or(false),
            }
        }
        Some(other) => return Err(invalid(&o.at("kind"), format!("unknown kind `{other}`"))),
        None => return Err(invalid(&o.at("kind"), "missing")),
    };
    let tools = o.strings("tools")?;
    check_tools(&tools, known, &o.at("tools"))?;
    let toolsets = o.strings("toolsets")?;
    let templates = parse_templates(&mut o)?;
    let limited = matches!(kind, ToolsetKind::Async | ToolsetKind::Plain);
    if !limited && o.keys().iter().any(|k| k == "max_concurrent") {
        return Err(invalid(&o.at("max_concurrent"), "only async and plain toolsets take it"));
    }
    let max_concurrent = max_concurrent(&mut o)?;
    o.finish()?;
    Ok(ToolsetDef { id, kind, tools, toolsets, templates, max_concurrent })
}

/// Nested toolsets must exist, and no toolset may contain itself.
fn check_nesting(toolsets: &[ToolsetDef]) -> Result<(), ScenarioError> {
    let ids: Vec<&str> = toolsets.iter().map(|t| t.id.as_str()).collect();
    for set in toolsets {
        check_toolsets(&set.toolsets, &ids, &format!("toolsets.{}.toolsets", set.id))?;
    }
    fn visit<'a>(
        id: &'a str,
        all: &'a [ToolsetDef],
        path: &mut Vec<&'a str>,
    ) -> Result<(), ScenarioError> {
        if path.contains(&id) {
            return Err(invalid(&format!("toolsets.{id}.toolsets"), "a toolset contains itself"));
        }
        path.push(id);
        if let Some(set) = all.iter().find(|t| t.id == id) {
            for nested in &set.toolsets {
                visit(nested, all, path)?;
            }
        }
        path.pop();
        Ok(())
    }
    for set in toolsets {
        visit(&set.id, toolsets, &mut Vec::new())?;
    }
    Ok(())
}

fn parse_agent(
    id: String,
    mut o: Obj,
    known: &[&str],
    known_toolsets: &[&str],
) -> Result<AgentDef, ScenarioError> {
    let instructions = o.string("instructions")?.unwrap_or_default();
    let tools = o.strings("tools")?;
    check_tools(&tools, known, &o.at("tools"))?;
    let toolsets = o.strings("toolsets")?;
    check_toolsets(&toolsets, known_toolsets, &o.at("toolsets"))?;
    let allow_interruptions = o.bool("allow_interruptions")?;
    let templates = parse_templates(&mut o)?;
    let on_enter = match o.take("on_enter") {
        None => None,
        Some(v) => {
            let mut e = Obj::new(v, o.at("on_enter"))?;
            let reply = e.take("generate_reply");
            let path = e.at("generate_reply");
            e.finish()?;
            let mut g = Obj::new(reply.ok_or_else(|| invalid(&path, "missing"))?, path)?;
            let instructions = g.string("instructions")?.unwrap_or_default();
            g.finish()?;
            Some(instructions)
        }
    };
    o.finish()?;
    Ok(AgentDef { id, instructions, tools, toolsets, allow_interruptions, templates, on_enter })
}

fn parse_session(
    mut o: Obj,
    known: &[&str],
    known_toolsets: &[&str],
    agents: &[AgentDef],
) -> Result<SessionDef, ScenarioError> {
    let agent = o.required_string("agent")?;
    if !agents.iter().any(|a| a.id == agent) {
        return Err(invalid(&o.at("agent"), format!("undefined agent `{agent}`")));
    }
    let tools = o.strings("tools")?;
    check_tools(&tools, known, &o.at("tools"))?;
    let toolsets = o.strings("toolsets")?;
    check_toolsets(&toolsets, known_toolsets, &o.at("toolsets"))?;
    o.finish()?;
    Ok(SessionDef { agent, tools, toolsets })
}

fn parse_llm_entry(mut o: Obj) -> Result<ScriptedResponse, ScenarioError> {
    let mut response = ScriptedResponse::text(o.string("text")?.unwrap_or_default());
    let calls_path = o.at("tool_calls");
    for (i, v) in o.array("tool_calls")?.into_iter().enumerate() {
        let mut c = Obj::new(v, format!("{calls_path}[{i}]"))?;
        let id = c.required_string("id")?;
        let name = c.required_string("name")?;
        let arguments = c.string("arguments")?.unwrap_or_default();
        c.finish()?;
        response = response.with_call(ScriptedCall::new(id, name, arguments));
    }
    if let Some(latency) = o.millis("latency_ms")? {
        response = response.with_latency(latency);
    }
    if let Some(message) = o.string("error")? {
        response.error = Some(message);
    }
    o.finish()?;
    Ok(response)
}

/// Between a `crash` and its `resume` the session does not exist: only waits may come there,
/// and the file may not end crashed.
fn check_crashes(steps: &[Step]) -> Result<(), ScenarioError> {
    let mut crashed = false;
    for (i, step) in steps.iter().enumerate() {
        let path = format!("steps[{i}]");
        match (&step.action, crashed) {
            (Action::Crash, false) => crashed = true,
            (Action::Resume, true) => crashed = false,
            (Action::Resume, false) => {
                return Err(invalid(&path, "`resume` needs a `crash` before it"));
            }
            (Action::Wait(_) | Action::Nothing, _) | (_, false) => {}
            (_, true) => {
                return Err(invalid(&path, "the session has crashed: only waits until `resume`"));
            }
        }
    }
    match crashed {
        true => Err(invalid("steps", "the scenario ends crashed: `resume` it")),
        false => Ok(()),
    }
}

fn parse_step(mut o: Obj) -> Result<Step, ScenarioError> {
    let at = o.millis("at_ms")?;
    let keys = o.keys();
    let action = match keys.as_slice() {
        [] if at.is_some() => Action::Nothing,
        [key] => {
            let path = o.at(key);
            match key.as_str() {
                "wait_ms" => Action::Wait(o.millis("wait_ms")?.unwrap_or(ms(0))),
                "user" => Action::User(o.required_string("user")?),
                "user_input" => Action::UserInput(o.required_string("user_input")?),
                "user_speaking" => Action::UserSpeaking(o.bool("user_speaking")?.unwrap_or(false)),
                "wait_idle" => {
                    expect_true(o.take("wait_idle"), &path)?;
                    Action::WaitIdle
                }
                "generate_reply" => {
                    let mut g = Obj::new(o.take("generate_reply").unwrap_or(Value::Null), path)?;
                    let instructions = g.string("instructions")?;
                    g.finish()?;
                    Action::GenerateReply(instructions)
                }
                "say" => Action::Say(o.required_string("say")?),
                "cancel" => Action::Cancel(o.required_string("cancel")?),
                "handoff" => Action::Handoff(o.required_string("handoff")?),
                "approve" => Action::Approve(o.required_string("approve")?),
                "reject" => {
                    let mut r = Obj::new(o.take("reject").unwrap_or(Value::Null), path)?;
                    let id = r.required_string("id")?;
                    let reason = r.required_string("reason")?;
                    r.finish()?;
                    Action::Reject { id, reason }
                }
                "interrupt" => {
                    expect_true(o.take("interrupt"), &path)?;
                    Action::Interrupt
                }
                "close" => {
                    expect_true(o.take("close"), &path)?;
                    Action::Close
                }
                "inspect" => {
                    expect_true(o.take("inspect"), &path)?;
                    Action::Inspect
                }
                "crash" => {
                    expect_true(o.take("crash"), &path)?;
                    Action::Crash
                }
                "resume" => {
                    expect_true(o.take("resume"), &path)?;
                    Action::Resume
                }
                _ => return Err(invalid(&path, "unknown key")),
            }
        }
        _ => return Err(invalid(&o.path, "a step needs exactly one action")),
    };
    o.finish()?;
    Ok(Step { at, action })
}
