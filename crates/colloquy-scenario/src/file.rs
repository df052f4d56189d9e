//! The scenario file (docs/scenario-format.md "File"), parsed whole before anything runs. Every key
//! of the format is supported; an unknown key fails with its path.

use std::time::Duration;

use colloquy::{
    DuplicateScope, OnDuplicate, RetryPolicy, ScriptedCall, ScriptedResponse, Templates,
};
use serde_json::{Map, Value};

use crate::ScenarioError;
use crate::json::{Obj, invalid, kind, parse_strict};
pub use crate::options::Options;
use crate::options::{parse_options, parse_templates};
use crate::template::Template;

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

/// A tool defined in `tools`.
#[derive(Clone, Debug)]
pub struct ToolDef {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON schema of the parameters.
    pub parameters: Value,
    /// The scripted body.
    pub body: Vec<BodyStep>,
    /// `flags` contains `cancellable`.
    pub cancellable: bool,
    /// `flags` contains `ignore_on_enter`.
    pub ignore_on_enter: bool,
    /// `on_duplicate` and `duplicate_scope`.
    pub duplicates: (OnDuplicate, DuplicateScope),
    /// `deadline_ms`.
    pub deadline: Option<Duration>,
    /// `heartbeat_ms`.
    pub heartbeat: Option<Duration>,
    /// `retry`: `{"attempts": N, "backoff_ms": M}` (safe to retry).
    pub retry: Option<RetryPolicy>,
    /// `requires_approval`: every call waits for an `approve` or `reject` step.
    pub requires_approval: bool,
    /// `max_concurrent`: at most this many calls at once, later ones queued.
    pub max_concurrent: Option<usize>,
    /// `idempotent_ms`: how long a `done` result answers the same call again.
    pub idempotent: Option<Duration>,
    /// `note_remembered`: a remembered result tells the model so.
    pub note_remembered: bool,
}

/// One step of a tool body.
#[derive(Clone, Debug)]
pub enum BodyStep {
    /// `update`: `ctx.update()` with a string (placeholders substituted) or any JSON value.
    Update {
        /// The message.
        message: Template,
        /// Record without asking for a reply.
        silent: bool,
        /// A per-call update template.
        template: Option<String>,
    },
    /// `sleep_ms`.
    Sleep(Duration),
    /// `return`.
    Return(Template),
    /// `return_nothing`.
    ReturnNothing,
    /// `tool_result`.
    ToolResult {
        /// The output.
        output: Template,
        /// Whether a reply is asked for.
        reply_required: bool,
    },
    /// `error`: a ToolError.
    Error(Template),
    /// `fail`: an unexpected error.
    Fail(Template),
    /// `panic`.
    Panic(Template),
    /// `stop_response`.
    StopResponse,
    /// `disallow_interruptions`.
    DisallowInterruptions,
    /// `wait_cancelled`: wait for the cooperative cancel signal, then go on.
    WaitCancelled,
    /// An `error` or `fail` step with `first_attempts: N`: it fails the call's first N
    /// attempts only; on later ones it is passed over (how a file scripts a flaky tool that a
    /// retry gets through).
    FailFirst {
        /// How many attempts fail here.
        attempts: u64,
        /// The `error` or `fail` step.
        step: Box<BodyStep>,
    },
    /// `handoff`: return an agent, optionally with a text result.
    Handoff {
        /// The agent's id.
        agent: String,
        /// The call's output, if any.
        result: Option<Template>,
    },
}

impl BodyStep {
    fn is_terminal(&self) -> bool {
        !matches!(
            self,
            BodyStep::Sleep(_)
                | BodyStep::Update { .. }
                | BodyStep::DisallowInterruptions
                | BodyStep::WaitCancelled
                | BodyStep::FailFirst { .. }
        )
    }
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
        /// What the model reads after ``The user rejected `NAME`: ``.
        reason: String,
    },
    /// `close`.
    Close,
    /// `inspect`: record an actor-tree snapshot.
    Inspect,
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

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

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

/// `duplicate_scope`: `"name"` (the default), `"name_and_args"`, or a non-empty array of
/// declared argument names (colloquy's `DuplicateScope::args`).
fn parse_duplicate_scope(
    o: &mut Obj,
    declared: &[String],
) -> Result<DuplicateScope, ScenarioError> {
    let path = o.at("duplicate_scope");
    let names = match o.take("duplicate_scope") {
        None => return Ok(DuplicateScope::Name),
        Some(Value::String(scope)) => match scope.as_str() {
            "name" => return Ok(DuplicateScope::Name),
            "name_and_args" => return Ok(DuplicateScope::NameAndArgs),
            other => return Err(invalid(&path, format!("unknown scope `{other}`"))),
        },
        Some(Value::Array(names)) if names.is_empty() => {
            return Err(invalid(&path, "name at least one argument (or use \"name\")"));
        }
        Some(Value::Array(names)) => names,
        Some(other) => {
            return Err(invalid(
                &path,
                format!(
                    "expected \"name\", \"name_and_args\" or an array of argument names, got {}",
                    kind(&other)
                ),
            ));
        }
    };
    let mut scope = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let path = format!("{path}[{i}]");
        match name {
            Value::String(name) if declared.contains(&name) => scope.push(name),
            Value::String(name) => {
                return Err(invalid(&path, format!("`{name}` is not a declared property")));
            }
            other => {
                return Err(invalid(&path, format!("expected a string, got {}", kind(&other))));
            }
        }
    }
    Ok(DuplicateScope::args(scope))
}

fn parse_tool(name: String, mut o: Obj) -> Result<ToolDef, ScenarioError> {
    let description = o.string("description")?.unwrap_or_default();
    let parameters = match o.take("parameters") {
        None => serde_json::json!({"type": "object", "properties": {}}),
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            return Err(invalid(
                &o.at("parameters"),
                format!("expected a JSON schema object, got {}", kind(&other)),
            ));
        }
    };
    // Refused here, before anything runs, like every other mistake a file can make.
    if let Err(e) = colloquy::schema_check::check_schema(&parameters) {
        return Err(invalid(&o.at("parameters"), e.to_string()));
    }
    let declared: Vec<String> = parameters
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let flags_path = o.at("flags");
    let (mut cancellable, mut ignore_on_enter) = (false, false);
    for (i, flag) in o.strings("flags")?.iter().enumerate() {
        match flag.as_str() {
            "cancellable" => cancellable = true,
            "ignore_on_enter" => ignore_on_enter = true,
            other => {
                return Err(invalid(
                    &format!("{flags_path}[{i}]"),
                    format!("unknown flag `{other}`"),
                ));
            }
        }
    }
    let policy = match o.string("on_duplicate")?.as_deref() {
        None | Some("allow") => OnDuplicate::Allow,
        Some("reject") => OnDuplicate::Reject,
        Some("replace") => OnDuplicate::Replace,
        Some("confirm") => OnDuplicate::Confirm,
        Some(other) => {
            return Err(invalid(&o.at("on_duplicate"), format!("unknown policy `{other}`")));
        }
    };
    let scope = parse_duplicate_scope(&mut o, &declared)?;
    let deadline = o.positive_millis("deadline_ms")?;
    let heartbeat = o.positive_millis("heartbeat_ms")?;
    let retry = match o.take("retry") {
        None => None,
        Some(v) => {
            let mut r = Obj::new(v, o.at("retry"))?;
            let attempts = match r.u64("attempts")? {
                Some(n @ 1..=100) => n as u32,
                _ => return Err(invalid(&r.at("attempts"), "expected a number from 1 to 100")),
            };
            let backoff = r.millis("backoff_ms")?.unwrap_or(Duration::ZERO);
            r.finish()?;
            Some(RetryPolicy::new(attempts, backoff))
        }
    };
    let requires_approval = o.bool("requires_approval")?.unwrap_or(false);
    let max_concurrent = max_concurrent(&mut o)?;
    let idempotent = o.positive_millis("idempotent_ms")?;
    let note_remembered = o.bool("note_remembered")?.unwrap_or(false);
    let body_path = o.at("body");
    let mut body: Vec<BodyStep> = Vec::new();
    for (i, v) in o.array("body")?.into_iter().enumerate() {
        let path = format!("{body_path}[{i}]");
        if body.last().is_some_and(BodyStep::is_terminal) {
            return Err(invalid(&path, "unreachable: the step before it ends the body"));
        }
        body.push(parse_body_step(Obj::new(v, path)?, &declared)?);
    }
    o.finish()?;
    Ok(ToolDef {
        name,
        description,
        parameters,
        body,
        cancellable,
        ignore_on_enter,
        duplicates: (policy, scope),
        deadline,
        heartbeat,
        retry,
        requires_approval,
        max_concurrent,
        idempotent,
        note_remembered,
    })
}

/// `max_concurrent`: a positive integer (no call could run under 0).
fn max_concurrent(o: &mut Obj) -> Result<Option<usize>, ScenarioError> {
    match o.u64("max_concurrent")? {
        Some(0) => Err(invalid(&o.at("max_concurrent"), "must be at least 1")),
        other => Ok(other.map(|n| usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

fn parse_body_step(mut o: Obj, declared: &[String]) -> Result<BodyStep, ScenarioError> {
    if o.keys().iter().any(|k| k == "handoff") {
        let agent = o.required_string("handoff")?;
        let result = match o.take("result") {
            Some(v) => Some(Template::parse(v, declared, &o.at("result"))?),
            None => None,
        };
        o.finish()?;
        return Ok(BodyStep::Handoff { agent, result });
    }
    if o.keys().iter().any(|k| k == "update") {
        let at = o.at("update");
        let message = Template::parse(o.take("update").unwrap_or(Value::Null), declared, &at)?;
        let silent = o.bool("silent")?.unwrap_or(false);
        let template = o.string("template")?;
        o.finish()?;
        return Ok(BodyStep::Update { message, silent, template });
    }
    let first_attempts = o.u64("first_attempts")?;
    let actions = o.keys();
    let [action] = actions.as_slice() else {
        return Err(invalid(&o.path, "a body step needs exactly one action"));
    };
    let at = o.at(action);
    let template = |value: Value| Template::parse(value, declared, &at);
    let step = match action.as_str() {
        "sleep_ms" => BodyStep::Sleep(o.millis("sleep_ms")?.unwrap_or(ms(0))),
        "return" => BodyStep::Return(template(o.take("return").unwrap_or(Value::Null))?),
        "return_nothing" => {
            expect_true(o.take("return_nothing"), &at)?;
            BodyStep::ReturnNothing
        }
        "stop_response" => {
            expect_true(o.take("stop_response"), &at)?;
            BodyStep::StopResponse
        }
        "disallow_interruptions" => {
            expect_true(o.take("disallow_interruptions"), &at)?;
            BodyStep::DisallowInterruptions
        }
        "wait_cancelled" => {
            expect_true(o.take("wait_cancelled"), &at)?;
            BodyStep::WaitCancelled
        }
        "tool_result" => {
            let mut r = Obj::new(o.take("tool_result").unwrap_or(Value::Null), at.clone())?;
            let output = match r.take("output") {
                Some(v) => Template::parse(v, declared, &r.at("output"))?,
                None => return Err(invalid(&r.at("output"), "missing")),
            };
            let reply_required = r.bool("reply_required")?.unwrap_or(true);
            r.finish()?;
            BodyStep::ToolResult { output, reply_required }
        }
        "error" | "fail" | "panic" => {
            let text = o.string(action)?.unwrap_or_default();
            let t = template(Value::String(text))?;
            match action.as_str() {
                "error" => BodyStep::Error(t),
                "fail" => BodyStep::Fail(t),
                _ => BodyStep::Panic(t),
            }
        }
        _ => return Err(invalid(&at, "unknown key")),
    };
    let first_attempts_at = o.at("first_attempts");
    o.finish()?;
    match first_attempts {
        None => Ok(step),
        Some(attempts @ 1..) if matches!(step, BodyStep::Error(_) | BodyStep::Fail(_)) => {
            Ok(BodyStep::FailFirst { attempts, step: Box::new(step) })
        }
        Some(_) => Err(invalid(
            &first_attempts_at,
            "expected a positive number, on an `error` or `fail` step",
        )),
    }
}

fn expect_true(value: Option<Value>, path: &str) -> Result<(), ScenarioError> {
    match value {
        Some(Value::Bool(true)) => Ok(()),
        _ => Err(invalid(path, "expected true")),
    }
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
                _ => return Err(invalid(&path, "unknown key")),
            }
        }
        _ => return Err(invalid(&o.path, "a step needs exactly one action")),
    };
    o.finish()?;
    Ok(Step { at, action })
}
