//! A scenario file's `tools`: each tool's declaration, flags, duplicate policy and controls,
//! and its scripted body (docs/scenario-format.md "Tools and bodies"), refused at read time when
//! anything is wrong.

use std::time::Duration;

use colloquy::tools::{DuplicateScope, OnDuplicate, OnInterrupted, RetryPolicy};
use serde_json::Value;

use crate::ScenarioError;
use crate::json::{Obj, expect_true, invalid, kind, ms};
use crate::template::Template;

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
    /// `on_interrupted`: `fail`, `rerun` or `ask` (what a resumed session does with a call
    /// that was running when its process ended).
    pub on_interrupted: Option<OnInterrupted>,
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

pub(crate) fn parse_tool(name: String, mut o: Obj) -> Result<ToolDef, ScenarioError> {
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
    if let Err(e) = colloquy_model::schema_check::check_schema(&parameters) {
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
    let on_interrupted = match o.string("on_interrupted")? {
        None => None,
        Some(policy) => Some(policy.parse().map_err(|e| invalid(&o.at("on_interrupted"), e))?),
    };
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
        on_interrupted,
    })
}

/// `max_concurrent`: a positive integer (no call could run under 0).
pub(crate) fn max_concurrent(o: &mut Obj) -> Result<Option<usize>, ScenarioError> {
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
