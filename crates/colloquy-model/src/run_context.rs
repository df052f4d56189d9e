//! What a running tool sees of its call and its session (§2).

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::chat::FunctionCall;
use crate::templates::{Template, update_values};
use crate::tool_error::ToolError;

/// What a tool reports through [`RunContext::update`]: text (wrapped by the update template)
/// or any JSON value (rendered as compact JSON, not wrapped).
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateMessage {
    /// A text message.
    Text(String),
    /// A structured value.
    Value(Value),
}

impl From<&str> for UpdateMessage {
    fn from(text: &str) -> Self {
        UpdateMessage::Text(text.to_string())
    }
}

impl From<String> for UpdateMessage {
    fn from(text: String) -> Self {
        UpdateMessage::Text(text)
    }
}

impl From<Value> for UpdateMessage {
    fn from(value: Value) -> Self {
        match value {
            Value::String(s) => UpdateMessage::Text(s),
            other => UpdateMessage::Value(other),
        }
    }
}

/// Options of one update (decision 15, §7).
#[derive(Clone, Debug, Default)]
pub struct UpdateOptions {
    /// Record the update for the model without asking for a reply; the user hears nothing.
    pub silent: bool,
    /// A template for this call's text updates instead of the resolved one.
    pub template: Option<Template>,
}

/// An update as a tool posted it.
#[derive(Clone, Debug, PartialEq)]
pub struct PostedUpdate {
    /// The raw message (a value as compact JSON), as events carry it.
    pub message: String,
    /// The text the model sees (a text message wrapped by the update template).
    pub output: String,
    /// Whether the update asks for no reply.
    pub silent: bool,
}

/// How a running call reports to the runtime. The runtime implements it; a context without
/// hooks (standalone execution) records updates instead (see [`RunContext::recorded_updates`]).
pub trait CallHooks: Send + Sync {
    /// The update template resolved for this call (toolset → agent → session → default).
    fn update_template(&self) -> Template;
    /// Delivers an update. Updates after the call ended are ignored.
    fn post_update(&self, update: PostedUpdate);
    /// Resolves once the text of the LLM step that made this call has finished playing.
    fn wait_for_playout(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    /// The runtime's handle to the session, type-erased (the runtime crate downcasts it).
    fn session(&self) -> Option<Arc<dyn Any + Send + Sync>>;
    /// Forbids interrupting the speech that dispatched this call; fails if it already was.
    fn disallow_interruptions(&self) -> Result<(), String>;
    /// Resolves when the call is cancelled; asking marks the call cooperative (decision 20).
    fn cancelled(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    /// The id of the session the call runs in (`None` outside one).
    fn session_id(&self) -> Option<&str> {
        None
    }
}

/// The context handed to every tool body: the call it answers, the speech that dispatched it,
/// the agent, and the session's user data. Cheap to clone.
///
/// ```
/// use colloquy_model::{FunctionCall, RunContext, Timestamp};
/// let call = FunctionCall { id: "g/fnc_0".into(), call_id: "c1".into(), name: "t".into(),
///     arguments: "{}".into(), extra: Default::default(), created_at: Timestamp::default() };
/// let ctx = RunContext::new(call, "s1", "travel", Some(std::sync::Arc::new(7u32)));
/// assert_eq!(ctx.call_id(), "c1");
/// assert_eq!(ctx.userdata::<u32>(), Some(&7));
/// ```
#[derive(Clone)]
pub struct RunContext {
    inner: Arc<Inner>,
}

struct Inner {
    function_call: FunctionCall,
    speech_id: String,
    agent_id: String,
    userdata: Option<Arc<dyn Any + Send + Sync>>,
    hooks: Option<Arc<dyn CallHooks>>,
    recorded: Mutex<Vec<PostedUpdate>>,
}

impl RunContext {
    /// A context for one call. The runtime builds these; tests and standalone runs may too
    /// (updates are then recorded, see [`RunContext::recorded_updates`]).
    pub fn new(
        function_call: FunctionCall,
        speech_id: impl Into<String>,
        agent_id: impl Into<String>,
        userdata: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        Self::build(function_call, speech_id.into(), agent_id.into(), userdata, None)
    }

    /// A context whose updates go to `hooks` (the runtime's side of a running call).
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn with_hooks(
        function_call: FunctionCall,
        speech_id: impl Into<String>,
        agent_id: impl Into<String>,
        userdata: Option<Arc<dyn Any + Send + Sync>>,
        hooks: Arc<dyn CallHooks>,
    ) -> Self {
        Self::build(function_call, speech_id.into(), agent_id.into(), userdata, Some(hooks))
    }

    fn build(
        function_call: FunctionCall,
        speech_id: String,
        agent_id: String,
        userdata: Option<Arc<dyn Any + Send + Sync>>,
        hooks: Option<Arc<dyn CallHooks>>,
    ) -> Self {
        let recorded = Mutex::new(Vec::new());
        let inner = Inner { function_call, speech_id, agent_id, userdata, hooks, recorded };
        Self { inner: Arc::new(inner) }
    }

    /// Reports progress (§7): the first update is handed to the model at once as this call's
    /// output and the conversation goes on while the tool keeps working; later updates and the
    /// final result are delivered together when the session is idle. Text is wrapped by the
    /// update template; other values render as compact JSON. A template that cannot be
    /// rendered is an error here, at the point of use.
    ///
    /// ```
    /// # use colloquy_model::{FunctionCall, RunContext, Timestamp};
    /// # let call = FunctionCall { id: "i".into(), call_id: "c1".into(), name: "book".into(),
    /// #     arguments: "{}".into(), extra: Default::default(), created_at: Timestamp::default() };
    /// let ctx = RunContext::new(call, "s1", "travel", None); // standalone: updates are recorded
    /// # futures_executor_free_block_on(async {
    /// ctx.update("Looking up flights…").await.unwrap();
    /// # });
    /// assert_eq!(ctx.recorded_updates()[0].message, "Looking up flights…");
    /// # fn futures_executor_free_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     match f.as_mut().poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
    /// # }
    /// ```
    pub async fn update(&self, message: impl Into<UpdateMessage>) -> Result<(), ToolError> {
        self.update_with(message, UpdateOptions::default()).await
    }

    /// [`RunContext::update`] with options (`silent`, a per-call template).
    pub async fn update_with(
        &self,
        message: impl Into<UpdateMessage>,
        options: UpdateOptions,
    ) -> Result<(), ToolError> {
        let (message, output) = match message.into() {
            UpdateMessage::Text(text) => {
                let template = match (&options.template, &self.inner.hooks) {
                    (Some(t), _) => t.clone(),
                    (None, Some(hooks)) => hooks.update_template(),
                    (None, None) => Template::text(crate::templates::defaults::UPDATE),
                };
                let call = &self.inner.function_call;
                let values = update_values(&call.name, &call.call_id, &text);
                let output = template.render_with(&values).map_err(ToolError::internal)?;
                (text, output)
            }
            UpdateMessage::Value(value) => {
                let text = value.to_string();
                (text.clone(), text)
            }
        };
        let update = PostedUpdate { message, output, silent: options.silent };
        match &self.inner.hooks {
            Some(hooks) => hooks.post_update(update),
            None => {
                if let Ok(mut recorded) = self.inner.recorded.lock() {
                    recorded.push(update);
                }
            }
        }
        Ok(())
    }

    /// Waits until the text of the LLM step that made this call has finished playing (the
    /// "Let me check…" said before the tool's result). Returns at once in a standalone context.
    pub async fn wait_for_playout(&self) {
        if let Some(hooks) = &self.inner.hooks {
            hooks.wait_for_playout().await;
        }
    }

    /// Forbids interrupting the speech that dispatched this call (§2): a user turn or
    /// `interrupt()` leaves it alone, and the call cannot be cancelled by the model or by a
    /// `replace` duplicate. Fails if that speech was already interrupted. No effect standalone.
    pub fn disallow_interruptions(&self) -> Result<(), ToolError> {
        match &self.inner.hooks {
            Some(hooks) => hooks.disallow_interruptions().map_err(ToolError::new),
            None => Ok(()),
        }
    }

    /// Resolves when this call is cancelled. A tool that asks is *cooperative*: on cancel it
    /// gets a grace period (default 2 s) to clean up — revert a write, close a connection —
    /// before its task is aborted; a tool that never asks is aborted at once (decision 20).
    /// Never resolves in a standalone context. Typically raced against the work in a
    /// `tokio::select!`, with the clean-up in the cancelled branch.
    pub async fn cancelled(&self) {
        match &self.inner.hooks {
            Some(hooks) => hooks.cancelled().await,
            None => std::future::pending::<()>().await,
        }
    }

    /// The runtime's session handle, type-erased; `colloquy` offers it typed as
    /// `RunContextExt::session`. `None` in a standalone context.
    #[doc(hidden)] // the runtime's seam, not an API: docs/decisions.md#facade
    pub fn session_any(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        self.inner.hooks.as_ref().and_then(|h| h.session())
    }

    /// Updates recorded by a standalone context (one without runtime hooks).
    pub fn recorded_updates(&self) -> Vec<PostedUpdate> {
        self.inner.recorded.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The function-call item (with canonical arguments).
    pub fn function_call(&self) -> &FunctionCall {
        &self.inner.function_call
    }

    /// The call id the model gave.
    pub fn call_id(&self) -> &str {
        &self.inner.function_call.call_id
    }

    /// A key that names this call and no other, the same each time its body runs: every
    /// attempt of a retried call, and a call run again after a restart
    /// (`on_interrupted = "rerun"`, docs/durability.md#on-interrupted). Pass it to a service
    /// that deduplicates requests (a payment API's idempotency key), so that work done once
    /// is not done twice. `<session id>:<call id>`; outside a session, the call id.
    ///
    /// ```
    /// # use colloquy_model::{FunctionCall, RunContext, Timestamp};
    /// # let call = FunctionCall { id: "g/fnc_0".into(), call_id: "c1".into(), name: "pay".into(),
    /// #     arguments: "{}".into(), extra: Default::default(), created_at: Timestamp::default() };
    /// let ctx = RunContext::new(call, "s1", "billing", None);
    /// assert_eq!(ctx.idempotency_key(), "c1");
    /// ```
    pub fn idempotency_key(&self) -> String {
        let session = self.inner.hooks.as_deref().and_then(CallHooks::session_id);
        match session {
            Some(session) => format!("{session}:{}", self.call_id()),
            None => self.call_id().to_string(),
        }
    }

    /// The id of the speech that dispatched this call (`s1`, `s2`, …).
    pub fn speech_id(&self) -> &str {
        &self.inner.speech_id
    }

    /// The id of the agent whose turn dispatched this call.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }

    /// The session's user data, if it is of type `T` (see `SessionBuilder::userdata`). Use a
    /// `Mutex` or atomics inside `T` for state tools change.
    pub fn userdata<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.inner.userdata.as_deref()?.downcast_ref::<T>()
    }
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("call_id", &self.call_id())
            .field("name", &self.inner.function_call.name)
            .field("speech_id", &self.inner.speech_id)
            .field("agent_id", &self.inner.agent_id)
            .finish_non_exhaustive()
    }
}
