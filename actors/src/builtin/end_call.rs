//! The end-call tool (§18): the model calls `end_call`, says goodbye in the same
//! speech, and the session closes (reason `end_call`) once that goodbye has finished playing.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use colloquy_model::tool::NoArgs;
use colloquy_model::{FunctionTool, RunContext, ToolError, ToolOutput, Toolset};
use futures_util::FutureExt;

use crate::builtin::tool_context::RunContextExt;
use crate::support::task::panic_text;

/// The tool's (and its toolset's) name.
pub const END_CALL: &str = "end_call";
/// The close reason of a session the tool ended.
pub const END_CALL_REASON: &str = colloquy_model::CloseReason::EndCall.name();
/// The fixed part of the tool's description (decision 18).
pub const END_CALL_DESCRIPTION: &str = "End the call. Use it when the user says goodbye or asks \
to hang up, or when the conversation is clearly over.";
/// The default output: what the model is asked to do before the call ends.
pub const END_INSTRUCTIONS: &str = "say goodbye to the user";

type Called = Arc<dyn Fn(RunContext) -> BoxFut<Result<(), ToolError>> + Send + Sync>;
type Completed = Arc<
    dyn Fn(RunContext, Option<String>) -> BoxFut<Result<Option<String>, ToolError>> + Send + Sync,
>;
type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Builds the `end_call` tool.
///
/// When the model calls it, the session is set to end **before** any callback runs (so a
/// failing callback still ends the call); `on_tool_called` runs, then `on_tool_completed` may
/// replace the output; the output (by default "say goodbye to the user") goes to the model,
/// which says goodbye in the same speech. Once that speech has finished playing (or at once
/// when there is no output to reply to), the session closes gracefully with reason `end_call`:
/// a `session_closed` event, and the builder's [`on_close`](crate::SessionBuilder::on_close)
/// callback where the host hangs up. A watchdog (default 30 s) ends the call if the goodbye
/// never completes.
///
/// ```
/// use colloquy_actors::EndCallTool;
/// use colloquy_model::Agent;
/// let agent = Agent::new("receptionist", "Help, then end the call politely.")
///     .toolset(EndCallTool::new().extra_description("Never end the call during a payment.").toolset());
/// ```
#[derive(Clone)]
pub struct EndCallTool {
    extra_description: String,
    end_instructions: Option<String>,
    on_tool_called: Option<Called>,
    on_tool_completed: Option<Completed>,
    ignore_on_enter: bool,
    watchdog: Option<Duration>,
}

impl Default for EndCallTool {
    fn default() -> Self {
        Self::new()
    }
}

impl EndCallTool {
    /// The tool with the default texts.
    pub fn new() -> Self {
        Self {
            extra_description: String::new(),
            end_instructions: Some(END_INSTRUCTIONS.into()),
            on_tool_called: None,
            on_tool_completed: None,
            ignore_on_enter: false,
            watchdog: Some(Duration::from_secs(30)),
        }
    }

    /// Text appended (after a newline) to the fixed description.
    pub fn extra_description(mut self, text: impl Into<String>) -> Self {
        self.extra_description = text.into();
        self
    }

    /// The output given to the model (default "say goodbye to the user"); `None` gives an
    /// empty output that asks for no reply: the call ends without a goodbye.
    pub fn end_instructions(mut self, instructions: Option<String>) -> Self {
        self.end_instructions = instructions;
        self
    }

    /// Runs when the model calls the tool.
    pub fn on_tool_called<F, Fut>(mut self, callback: F) -> Self
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        self.on_tool_called = Some(Arc::new(move |ctx| Box::pin(callback(ctx))));
        self
    }

    /// Runs after `on_tool_called` with the output about to be returned; returns the output to
    /// use instead.
    pub fn on_tool_completed<F, Fut>(mut self, callback: F) -> Self
    where
        F: Fn(RunContext, Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<String>, ToolError>> + Send + 'static,
    {
        self.on_tool_completed = Some(Arc::new(move |ctx, out| Box::pin(callback(ctx, out))));
        self
    }

    /// Hides the tool from the agent's `on_enter` replies.
    pub fn ignore_on_enter(mut self, ignore: bool) -> Self {
        self.ignore_on_enter = ignore;
        self
    }

    /// How long the goodbye may take before the call ends anyway (default 30 s; `None` waits).
    pub fn watchdog(mut self, watchdog: Option<Duration>) -> Self {
        self.watchdog = watchdog;
        self
    }

    /// The `end_call` tool.
    pub fn tool(&self) -> FunctionTool {
        let description = format!("{END_CALL_DESCRIPTION}\n{}", self.extra_description);
        let this = self.clone();
        let tool = FunctionTool::new(END_CALL, description, move |ctx: RunContext, _a: NoArgs| {
            let this = this.clone();
            async move { this.run(ctx).await }
        });
        if self.ignore_on_enter { tool.ignore_on_enter() } else { tool }
    }

    /// The `end_call` toolset (one tool), to give an agent.
    pub fn toolset(&self) -> Toolset {
        Toolset::new(END_CALL).tool(self.tool())
    }

    async fn run(&self, ctx: RunContext) -> Result<ToolOutput, ToolError> {
        // First: whatever the callbacks do, the call ends after this speech.
        if let Some(session) = ctx.session() {
            let _ = session.end_after_speech(ctx.speech_id(), END_CALL_REASON, self.watchdog);
        }
        if let Some(called) = &self.on_tool_called {
            guarded("on_tool_called", called(ctx.clone())).await?;
        }
        let mut output = self.end_instructions.clone();
        if let Some(completed) = &self.on_tool_completed {
            output = guarded("on_tool_completed", completed(ctx.clone(), output)).await?;
        }
        Ok(match output {
            Some(text) => ToolOutput::text(text),
            None => ToolOutput::nothing(),
        })
    }
}

/// A callback's panic becomes an internal error (the call still ends).
async fn guarded<T>(what: &str, future: BoxFut<Result<T, ToolError>>) -> Result<T, ToolError> {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(ToolError::internal(format!("{what} panicked: {}", panic_text(&*panic)))),
    }
}
