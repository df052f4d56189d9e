//! Tool declarations (§1): typed function tools built from an async closure over an argument
//! struct, and raw tools with an explicit JSON schema. Toolsets are in `toolset.rs`, what
//! supervises a call (limits, retries, caps, approval) in `controls.rs`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::args::validate_arguments;
use crate::controls::{CallLimits, ConcurrencyLimit, Controls, RetryPolicy};
use crate::duplicate::{
    DuplicateScope, OnDuplicate, chosen_args_json, sorted_json, with_confirm_param,
};
use crate::output::{IntoToolOutput, ToolOutput};
use crate::run_context::RunContext;
use crate::tool_error::ToolError;
pub use crate::tool_schema::parameters_schema;
use crate::tool_schema::shared_schema;

/// The future a tool body returns once its arguments are bound.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

type Body = dyn Fn(RunContext, Value) -> ToolFuture + Send + Sync;

/// Flags of a tool (§1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFlags {
    /// The running call may be cancelled (by the model, `replace`, or a drain).
    pub cancellable: bool,
    /// Hidden from the model while the agent's `on_enter` replies run.
    pub ignore_on_enter: bool,
}

/// A tool as the model sees it: name, description, JSON schema of its parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON schema of the parameters (an object schema).
    pub parameters: Arc<Value>,
}

/// Declaration errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolDeclarationError {
    /// A raw tool needs a name.
    #[error("raw function name cannot be empty")]
    EmptyName,
    /// A raw tool's parameters must be a JSON object schema.
    #[error("raw function description must contain a parameters key")]
    MissingParameters,
    /// The parameters schema could make validation loop or exhaust the stack.
    #[error("the parameters schema of `{name}` is refused: {error}")]
    UnsafeSchema {
        /// The tool.
        name: String,
        /// Why.
        error: crate::schema_check::SchemaError,
    },
    /// A [`DuplicateScope::args`] scope names an argument the tool does not declare: its
    /// key would never tell calls apart, so every call would be a duplicate.
    #[error(
        "the duplicate scope of `{tool}` names `{argument}`, which is not one of its parameters"
    )]
    UnknownDuplicateArgument {
        /// The tool.
        tool: String,
        /// The name it does not declare.
        argument: String,
    },
}

/// An argument struct for tools that take no arguments.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// A function tool: metadata plus an async body.
///
/// ```
/// use colloquy_model::{FunctionTool, RunContext, ToolError};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Weather {
///     /// City name.
///     location: String,
///     #[serde(default = "one")]
///     days: u32,
/// }
/// fn one() -> u32 { 1 }
///
/// let tool = FunctionTool::new("get_weather", "Current weather.", |_ctx: RunContext, a: Weather| async move {
///     Ok::<_, ToolError>(format!("sunny in {} for {} day(s)", a.location, a.days))
/// });
/// assert_eq!(tool.name(), "get_weather");
/// assert_eq!(tool.schema().parameters["required"], serde_json::json!(["location"]));
/// ```
#[derive(Clone)]
pub struct FunctionTool {
    name: String,
    description: String,
    parameters: Arc<Value>,
    flags: ToolFlags,
    on_duplicate: OnDuplicate,
    duplicate_scope: DuplicateScope,
    /// Deadlines, retries, approval, caps and memory: shared, since a tool is cloned for
    /// every call and these are rarely set (copy-on-write in the builders).
    controls: Arc<Controls>,
    raw: bool,
    body: Arc<Body>,
}

impl FunctionTool {
    /// A typed tool: arguments are validated against `A`'s schema (lax rules, §5.2) and
    /// deserialized into `A` before the body runs.
    pub fn new<A, F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        body: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(RunContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolOutput,
    {
        let name = name.into();
        let tool_name = name.clone();
        let body = move |ctx: RunContext, args: Value| -> ToolFuture {
            match serde_json::from_value::<A>(args) {
                Ok(args) => {
                    let fut = body(ctx, args);
                    Box::pin(async move { fut.await.and_then(IntoToolOutput::into_tool_output) })
                }
                Err(e) => {
                    let text = format!("{}{e}", crate::text::argument_error_prefix(&tool_name));
                    Box::pin(std::future::ready(Err(ToolError::new(text))))
                }
            }
        };
        Self::assemble(name, description.into(), shared_schema::<A>(), false, body)
    }

    /// A tool of `body`, every control at its default.
    fn assemble(
        name: String,
        description: String,
        parameters: Arc<Value>,
        raw: bool,
        body: impl Fn(RunContext, Value) -> ToolFuture + Send + Sync + 'static,
    ) -> Self {
        // Shared until a builder sets a control (copy-on-write): most tools set none.
        static DEFAULT_CONTROLS: LazyLock<Arc<Controls>> = LazyLock::new(Arc::default);
        Self {
            name,
            description,
            parameters,
            flags: ToolFlags::default(),
            on_duplicate: OnDuplicate::default(),
            duplicate_scope: DuplicateScope::default(),
            controls: Arc::clone(&DEFAULT_CONTROLS),
            raw,
            body: Arc::new(body),
        }
    }

    /// A raw tool with an explicit JSON schema; the body receives the decoded argument object
    /// unvalidated.
    pub fn raw<F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        body: F,
    ) -> Result<Self, ToolDeclarationError>
    where
        F: Fn(RunContext, Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolOutput,
    {
        let name = name.into();
        if name.is_empty() {
            return Err(ToolDeclarationError::EmptyName);
        }
        if !parameters.is_object() {
            return Err(ToolDeclarationError::MissingParameters);
        }
        if let Err(error) = crate::schema_check::check_schema(&parameters) {
            return Err(ToolDeclarationError::UnsafeSchema { name, error });
        }
        let body = move |ctx: RunContext, args: Value| -> ToolFuture {
            let map = match args {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            let fut = body(ctx, map);
            Box::pin(async move { fut.await.and_then(IntoToolOutput::into_tool_output) })
        };
        Ok(Self::assemble(name, description.into(), Arc::new(parameters), true, body))
    }

    /// A tool with an explicit JSON schema whose arguments are validated like a typed tool's
    /// (§5.2), for tools defined as data (scenario files, tool servers). The body receives the
    /// validated argument object.
    pub fn from_schema<F, Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        body: F,
    ) -> Result<Self, ToolDeclarationError>
    where
        F: Fn(RunContext, Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
        R: IntoToolOutput,
    {
        let mut tool = Self::raw(name, description, parameters, body)?;
        tool.raw = false;
        Ok(tool)
    }

    /// Marks the tool cancellable.
    pub fn cancellable(mut self) -> Self {
        self.flags.cancellable = true;
        self
    }

    /// Hides the tool during `on_enter` replies.
    pub fn ignore_on_enter(mut self) -> Self {
        self.flags.ignore_on_enter = true;
        self
    }

    /// Every call waits for the host's approval (`SessionHandle::approve`) before its body
    /// runs; `reject`, or no answer within the session's approval timeout, ends it `rejected`.
    pub fn requires_approval(self) -> Self {
        self.requires_approval_if(|_| true)
    }

    /// A call waits for the host's approval when `check`, over its validated arguments
    /// (defaults filled), says so; a call whose arguments do not validate never waits (it
    /// fails validation instead).
    pub fn requires_approval_if(
        mut self,
        check: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.controls).approval = Some(Arc::new(check));
        self
    }

    /// Whether some call of this tool may wait for the host's approval.
    pub fn may_need_approval(&self) -> bool {
        self.controls.approval.is_some()
    }

    /// Whether a call with `arguments` must wait for the host's approval.
    pub fn needs_approval(&self, arguments: &Map<String, Value>) -> bool {
        let Some(check) = &self.controls.approval else { return false };
        if self.raw {
            return check(&Value::Object(arguments.clone()));
        }
        validate_arguments(&self.name, &self.parameters, arguments.clone())
            .is_ok_and(|valid| check(&valid))
    }

    /// Ends each call `timed_out` once it has run this long, updates or not: the body gets the
    /// cooperative cancel signal and the grace period, then is aborted, even if the tool is not
    /// cancellable, and the model reads ``Tool `NAME` timed out after N s``.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        Arc::make_mut(&mut self.controls).limits.deadline = Some(deadline);
        self
    }

    /// Ends each call `timed_out` once this long passes without an update from its body
    /// (`ctx.update`), as [`deadline`](Self::deadline) does: a liveness check for long tools.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        Arc::make_mut(&mut self.controls).limits.heartbeat = Some(heartbeat);
        self
    }

    /// What a resumed session does with a call of this tool that was running when its process
    /// ended (docs/durability.md#on-interrupted): `Fail` (the default), `Rerun` with the same
    /// [`RunContext::idempotency_key`], or `Ask` the host. Overrides its toolsets' and the
    /// session's.
    pub fn on_interrupted(mut self, policy: crate::OnInterrupted) -> Self {
        Arc::make_mut(&mut self.controls).limits.on_interrupted = Some(policy);
        self
    }

    /// Marks the tool safe to retry: a failed or timed-out attempt runs again under `policy`,
    /// each retry reported as an `x_tool_call_retry` event. Only for bodies that may run twice
    /// (a lookup, not a payment).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        Arc::make_mut(&mut self.controls).retry = Some(policy);
        self
    }

    /// The tool's retry policy, if it is safe to retry.
    pub fn retry_policy(&self) -> Option<RetryPolicy> {
        self.controls.retry
    }

    /// At most `max` calls of this tool run at once in a session (0 counts as 1): later ones
    /// wait, in arrival order, with status `queued` in `inspect()`, until one ends. A queued
    /// call has started (`tool_call_started`), so it can be cancelled and times out like a
    /// running one; its deadline counts from then.
    pub fn max_concurrent(mut self, max: usize) -> Self {
        Arc::make_mut(&mut self.controls).admission.max_concurrent = Some(max.max(1));
        self
    }

    /// Remembers each result that ends `done` for `window` on the session clock: a later call
    /// with the same duplicate key (name and validated arguments, or the tool's duplicate
    /// scope) gets it without running, its `tool_call_ended` marked `"cached": true`.
    pub fn idempotent(mut self, window: Duration) -> Self {
        Arc::make_mut(&mut self.controls).admission.remember_for = Some(window);
        self
    }

    /// A remembered result ([`idempotent`](Self::idempotent)) tells the model so: its output
    /// ends with ``(Remembered from a call N s ago; `NAME` did not run again.)``. Without it the
    /// model reads the remembered output as it was; the event says `cached` either way.
    pub fn note_remembered(mut self) -> Self {
        Arc::make_mut(&mut self.controls).admission.note_remembered = true;
        self
    }

    /// Whether a remembered result tells the model so ([`note_remembered`](Self::note_remembered)).
    pub fn notes_remembered(&self) -> bool {
        self.controls.admission.note_remembered
    }

    /// The caps a call of this tool counts against: its own first, then its toolsets'.
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn concurrency_limits(&self) -> Vec<ConcurrencyLimit> {
        let own = self
            .controls
            .admission
            .max_concurrent
            .map(|max| ConcurrencyLimit { group: format!("tool:{}", self.name).into(), max });
        own.into_iter().chain(self.controls.admission.shared.iter().cloned()).collect()
    }

    /// How long this tool's finished results answer the same call again, if it is idempotent.
    pub fn remembers_for(&self) -> Option<Duration> {
        self.controls.admission.remember_for
    }

    /// The key a remembered result is found by: the duplicate key
    /// ([`duplicate_key`](Self::duplicate_key)) of a tool with a duplicate policy; the name
    /// and validated arguments for an `allow` tool, whose scope is not its own choice.
    pub fn result_key(&self, arguments: &Map<String, Value>) -> String {
        if self.on_duplicate != OnDuplicate::Allow
            && let Some(key) = self.duplicate_key(arguments)
        {
            return key;
        }
        let keyed = FunctionTool {
            on_duplicate: OnDuplicate::Reject,
            duplicate_scope: DuplicateScope::NameAndArgs,
            ..self.clone()
        };
        keyed.duplicate_key(arguments).unwrap_or_else(|| self.name.clone())
    }

    /// The tool's limits: its own, else its innermost toolset's that sets one (unset ones
    /// fall back to the session's).
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn limits(&self) -> CallLimits {
        self.controls.limits.or(self.controls.inherited)
    }

    /// This tool with each limit it does not set itself taken from `defaults`.
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn with_default_limits(mut self, defaults: CallLimits) -> Self {
        let controls = Arc::make_mut(&mut self.controls);
        controls.inherited = controls.inherited.or(defaults);
        self
    }

    /// Takes its toolsets' limits and caps (copying the controls only when they change).
    pub(crate) fn inherit(&mut self, limits: CallLimits, caps: Vec<ConcurrencyLimit>) {
        if self.controls.inherited != limits || self.controls.admission.shared != caps {
            let controls = Arc::make_mut(&mut self.controls);
            controls.inherited = limits;
            controls.admission.shared = caps;
        }
    }

    /// The duplicate key of a call, or `None` for `allow` tools (they never match). For
    /// `name_and_args` and `args` the validated arguments are used (defaults filled, values
    /// coerced), or the arguments as sent if they do not validate (fail-open: the call then
    /// fails validation itself).
    pub fn duplicate_key(&self, arguments: &Map<String, Value>) -> Option<String> {
        if self.on_duplicate == OnDuplicate::Allow {
            return None;
        }
        let validated = || {
            if self.is_raw() {
                Value::Object(arguments.clone())
            } else {
                validate_arguments(self.name(), self.parameters(), arguments.clone())
                    .unwrap_or_else(|_| Value::Object(arguments.clone()))
            }
        };
        match &self.duplicate_scope {
            DuplicateScope::Name => Some(self.name().to_string()),
            DuplicateScope::NameAndArgs => {
                Some(format!("{}\u{0}{}", self.name(), sorted_json(&validated())))
            }
            DuplicateScope::Args(names) => {
                Some(format!("{}\u{0}{}", self.name(), chosen_args_json(&validated(), names)))
            }
        }
    }

    /// Checks that every argument a [`DuplicateScope::args`] scope names is a property of the
    /// tool's schema. Sessions run it on every tool of an agent they build (at the start and
    /// at each handoff), since [`on_duplicate`](Self::on_duplicate) cannot fail.
    pub fn check_duplicate_scope(&self) -> Result<(), ToolDeclarationError> {
        let Some(names) = self.duplicate_scope.arg_names() else {
            return Ok(());
        };
        // The confirm flag is taken out before keys are made: it is no argument to compare.
        let declared = self.parameters.get("properties").and_then(Value::as_object);
        let unknown = |n: &&String| {
            n.as_str() == crate::duplicate::CONFIRM_PARAM
                || !declared.is_some_and(|d| d.contains_key(n.as_str()))
        };
        match names.iter().find(unknown) {
            Some(argument) => Err(ToolDeclarationError::UnknownDuplicateArgument {
                tool: self.name.clone(),
                argument: argument.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Sets the duplicate policy (§6.1). A `confirm` tool gets the optional boolean parameter
    /// `lk_agents_confirm_duplicate` in its schema (§1.3); its body never sees it.
    pub fn on_duplicate(mut self, policy: OnDuplicate, scope: DuplicateScope) -> Self {
        if policy == OnDuplicate::Confirm && self.on_duplicate != OnDuplicate::Confirm {
            let schema = with_confirm_param((*self.parameters).clone());
            self.parameters = Arc::new(schema);
        }
        self.on_duplicate = policy;
        self.duplicate_scope = scope;
        self
    }

    /// Tool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Flags.
    pub fn flags(&self) -> ToolFlags {
        self.flags
    }

    /// Duplicate policy (the scope is cheap to clone: an `args` scope shares its names).
    pub fn duplicate_policy(&self) -> (OnDuplicate, DuplicateScope) {
        (self.on_duplicate, self.duplicate_scope.clone())
    }

    /// True for raw tools (no validation).
    pub fn is_raw(&self) -> bool {
        self.raw
    }

    /// This tool with `mock`'s body (decision 6): the model still sees this tool's schema and
    /// arguments are validated against it, then deserialized into the mock's own argument type.
    ///
    /// ```
    /// # use colloquy_model::{FunctionTool, RunContext, ToolError};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct City { city: String }
    /// let real = FunctionTool::new("get_weather", "Weather.", |_c: RunContext, a: City| async move {
    ///     Ok::<_, ToolError>(format!("calling the weather service for {}", a.city))
    /// });
    /// let mock = FunctionTool::new("get_weather", "", |_c: RunContext, a: City| async move {
    ///     Ok::<_, ToolError>(format!("mock sunny in {}", a.city))
    /// });
    /// let mocked = real.with_body_of(&mock);
    /// assert_eq!(mocked.schema(), real.schema());
    /// ```
    pub fn with_body_of(&self, mock: &FunctionTool) -> FunctionTool {
        FunctionTool { body: Arc::clone(&mock.body), raw: self.raw, ..self.clone() }
    }

    /// This tool under another name (the body is the same): how the runtime lists a learned
    /// tool whose name another tool already has.
    pub fn renamed(mut self, name: impl Into<String>) -> FunctionTool {
        self.name = name.into();
        self
    }

    /// True when `other` is this very tool (a clone of the same declaration).
    pub fn same_as(&self, other: &FunctionTool) -> bool {
        Arc::ptr_eq(&self.body, &other.body)
    }

    /// The JSON schema of the parameters.
    pub fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// What the model sees.
    pub fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: Arc::clone(&self.parameters),
        }
    }

    /// The arguments as the body will receive them: validated (defaults filled, values
    /// coerced) for typed tools, as sent for raw ones; a failure is the error the model reads.
    pub fn validate(&self, arguments: Map<String, Value>) -> Result<Map<String, Value>, ToolError> {
        if self.raw {
            return Ok(arguments);
        }
        match validate_arguments(&self.name, &self.parameters, arguments) {
            Ok(Value::Object(valid)) => Ok(valid),
            Ok(_) => Ok(Map::new()),
            Err(e) => Err(ToolError::new(e.to_string())),
        }
    }

    /// Validates `arguments` (typed tools) and starts the body. Validation failures become a
    /// [`ToolError`] the model sees, with the texts of decision 19.
    pub fn invoke(&self, ctx: RunContext, arguments: Map<String, Value>) -> ToolFuture {
        if self.raw {
            return (self.body)(ctx, Value::Object(arguments));
        }
        match validate_arguments(&self.name, &self.parameters, arguments) {
            Ok(valid) => (self.body)(ctx, valid),
            Err(e) => Box::pin(std::future::ready(Err(ToolError::new(e.to_string())))),
        }
    }
}

impl fmt::Debug for FunctionTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionTool")
            .field("name", &self.name)
            .field("flags", &self.flags)
            .field("on_duplicate", &self.on_duplicate)
            .field("duplicate_scope", &self.duplicate_scope)
            .field("limits", &self.limits())
            .field("requires_approval", &self.controls.approval.is_some())
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::FunctionCall;
    use crate::time::Timestamp;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    struct Weather {
        location: String,
        #[serde(default)]
        days: Option<u32>,
    }

    #[test]
    fn approval_is_decided_over_the_validated_arguments() {
        let body = |_c: RunContext, a: Weather| async move { Ok::<_, ToolError>(a.location) };
        let plain = FunctionTool::new("w", "", body);
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(!plain.needs_approval(&args(json!({"location": "Oslo"}))));
        let always = FunctionTool::new("w", "", body).requires_approval();
        assert!(always.needs_approval(&args(json!({"location": "Oslo"}))));
        // The predicate sees coerced values ("5" becomes 5 for an integer)...
        let long = FunctionTool::new("w", "", body)
            .requires_approval_if(|a| a["days"].as_u64().is_some_and(|d| d > 3));
        assert!(long.needs_approval(&args(json!({"location": "Oslo", "days": "5"}))));
        assert!(!long.needs_approval(&args(json!({"location": "Oslo", "days": 2}))));
        // ...and a call that will fail validation never waits.
        assert!(!always.needs_approval(&args(json!({"days": 2}))));
    }

    fn ctx() -> RunContext {
        let call = FunctionCall {
            id: "i".into(),
            call_id: "c1".into(),
            name: "get_weather".into(),
            arguments: "{}".into(),
            extra: Map::new(),
            created_at: Timestamp::default(),
        };
        RunContext::new(call, "s1", "a", None)
    }

    fn weather() -> FunctionTool {
        FunctionTool::new("get_weather", "Weather.", |_ctx, a: Weather| async move {
            Ok(format!("sunny in {} ({:?})", a.location, a.days))
        })
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        // The bodies here never wait, so a single poll with a no-op waker finishes them.
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("tool body did not finish"),
        }
    }

    #[test]
    fn typed_tools_validate_then_deserialize() {
        let args = json!({"location": "Tokyo", "days": "2"}).as_object().unwrap().clone();
        let out = block_on(weather().invoke(ctx(), args)).unwrap();
        assert_eq!(out.output_text(), "sunny in Tokyo (Some(2))");
    }

    #[test]
    fn typed_tools_report_validation_errors_as_tool_errors() {
        let err = block_on(weather().invoke(ctx(), Map::new())).unwrap_err();
        assert_eq!(
            err.model_text(),
            "Error parsing arguments for `get_weather`: location: missing"
        );
    }

    #[test]
    fn schema_has_no_title_and_lists_required_fields() {
        let schema = weather().schema();
        assert_eq!(schema.parameters.get("title"), None);
        assert_eq!(schema.parameters["required"], json!(["location"]));
        assert_eq!(schema.parameters["type"], json!("object"));
    }

    #[test]
    fn raw_tools_need_a_name_and_parameters() {
        let body = |_c: RunContext, _a: Map<String, Value>| async { Ok::<_, ToolError>("x") };
        assert_eq!(
            FunctionTool::raw("", "", json!({}), body).unwrap_err().to_string(),
            "raw function name cannot be empty"
        );
        assert_eq!(
            FunctionTool::raw("r", "", Value::Null, body).unwrap_err().to_string(),
            "raw function description must contain a parameters key"
        );
        let raw = FunctionTool::raw("r", "", json!({"type": "object"}), |_c, a| async move {
            Ok::<_, ToolError>(Value::Object(a))
        })
        .unwrap();
        let args = json!({"anything": [1]}).as_object().unwrap().clone();
        assert_eq!(block_on(raw.invoke(ctx(), args)).unwrap().output_text(), r#"{"anything":[1]}"#);
    }

    #[test]
    fn result_keys_use_the_duplicate_scope_or_name_and_arguments() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        let allow = weather().idempotent(Duration::from_secs(60));
        assert_eq!(allow.remembers_for(), Some(Duration::from_secs(60)));
        let a = allow.result_key(&args(json!({"location": "Oslo"})));
        assert_ne!(a, allow.result_key(&args(json!({"location": "Lima"}))));
        let by_name = weather().on_duplicate(OnDuplicate::Reject, DuplicateScope::Name);
        let b = by_name.result_key(&args(json!({"location": "Oslo"})));
        assert_eq!(b, by_name.result_key(&args(json!({"location": "Lima"}))));
    }
}
