//! The ToolCall actor: one per running call, a child of its Toolset.
//!
//! It runs the tool's future in a task it owns (aborted if the actor dies), so its mailbox
//! stays free while the tool works. The body's updates (numbered in the order they are
//! posted) and its result go straight to the Toolset, tagged with this actor's id, one message
//! each; a panic in the body is caught and becomes an internal error (`panic: <text>`). The
//! actor never stops itself while its call runs: supervision events overtake messages
//! (docs/ractor-notes.md §2.3 item 4), so the Toolset stops it after consuming its result. Once the
//! call is cancelled nothing more is forwarded, and the actor stops when its body ends or its
//! grace period is over.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use colloquy_model::{
    BeforeCall, BeforeToolCall, CallHooks, FunctionCall, FunctionTool, IntoToolOutput,
    PendingToolCall, PostedUpdate, RunContext, Template, ToolError, ToolOutput, text,
};
use futures_util::FutureExt;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef};
use serde_json::{Map, Value};

use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use crate::messages::handle::SessionHandle;
use crate::messages::{SessionLink, ToolCallMsg, ToolsetMsg};
use crate::support::lifecycle_sink::LifecycleGuard;
use crate::support::speech_control::SpeechControl;
use crate::support::task::{OwnedTask, panic_text};
use crate::types::lifecycle::ActorKind;

pub(crate) struct ToolCallActor;

/// What a call needs to start.
pub(crate) struct ToolCallArgs {
    pub tool: FunctionTool,
    pub call: FunctionCall,
    pub arguments: Map<String, Value>,
    pub speech_id: String,
    pub playout_done: CancellationToken,
    pub speech: SpeechControl,
    pub session: SessionLink,
    pub agent_id: String,
    pub update_template: Template,
    pub toolset: ActorRef<ToolsetMsg>,
    /// The call's `tracing` span; the body runs in it.
    pub span: tracing::Span,
    /// For a call that may wait (for approval, for a place under a cap): the body starts once
    /// its Toolset sends on it, and never if the sender is dropped (the call ended otherwise).
    pub gate: Option<tokio::sync::oneshot::Receiver<()>>,
    /// A remembered result the call is answered with once the hook lets it run.
    pub recalled: Option<ToolOutput>,
}

pub(crate) struct ToolCallState {
    lifecycle: LifecycleGuard,
    /// Fired on cancel; a body that awaited `ctx.cancelled()` is cooperative.
    cancel: CancellationToken,
    /// Shared with the body's task (see [`BodyFlags`]); `cancelled` also tells `post_stop`
    /// why the actor stops.
    flags: Arc<BodyFlags>,
    _grace_timer: Option<OwnedTask>,
    /// Why the call was ended early (cancelled, timed out, aborted), for the stop record.
    ended_early: Option<&'static str>,
    /// Taken by `post_start` to start the body.
    start: Option<ToolCallArgs>,
    /// The body's task; dropping the state aborts it.
    _task: Option<OwnedTask>,
}

/// What the actor and its body's task tell each other without messages. Both sides store
/// their own flag, then read the other's (sequentially consistent): whichever comes second
/// sees the first, so a cancel that races the body's end still stops the actor at once.
#[derive(Default)]
struct BodyFlags {
    /// Set by the actor when the call is cancelled: the body's reports are dropped.
    cancelled: AtomicBool,
    /// Set by the body's task when the body has ended.
    done: AtomicBool,
    /// Set when the body awaits `ctx.cancelled()`: a cancel then gives it its grace period.
    cooperative: AtomicBool,
}

/// Where a body's reports go: its Toolset, tagged with the call and this actor.
struct Reporter {
    toolset: ActorRef<ToolsetMsg>,
    /// Shared: every report names the call.
    call_id: Arc<str>,
    from: ActorId,
    flags: Arc<BodyFlags>,
    /// Updates posted so far; held while one is sent, so concurrent updates (a body may post
    /// from tasks of its own) reach the Toolset in the order of their numbers.
    updates: Mutex<u32>,
}

impl Reporter {
    fn update(&self, update: PostedUpdate) {
        if self.flags.cancelled.load(Ordering::SeqCst) {
            return; // the call already ended `cancelled`: whatever the body does is dropped
        }
        let Ok(mut updates) = self.updates.lock() else { return };
        let index = *updates;
        *updates += 1;
        let (call_id, from) = (self.call_id.clone(), self.from);
        let _ = self.toolset.cast(ToolsetMsg::Updated { call_id, from, index, update });
    }

    /// The hook let the call go on: the Toolset asks for approval (`needs_approval`, showing
    /// `rewritten` arguments if the hook changed them) or a place, then opens the gate.
    fn screened(&self, needs_approval: bool, rewritten: Option<String>) {
        let (call_id, from) = (self.call_id.clone(), self.from);
        let msg = ToolsetMsg::Screened { call_id, from, needs_approval, rewritten };
        let _ = self.toolset.cast(msg);
    }

    /// An attempt failed and `attempt` runs after the backoff.
    fn retrying(&self, attempt: u32, reason: String) {
        if self.flags.cancelled.load(Ordering::SeqCst) {
            return;
        }
        let (call_id, from) = (self.call_id.clone(), self.from);
        let _ = self.toolset.cast(ToolsetMsg::Retrying { call_id, from, attempt, reason });
    }

    /// The body ended: its result goes to the Toolset, or, once the call was cancelled, the
    /// actor is told so it can stop.
    fn finished(
        &self,
        actor: &ActorRef<ToolCallMsg>,
        result: Result<colloquy_model::ToolOutput, ToolError>,
    ) {
        self.flags.done.store(true, Ordering::SeqCst);
        if self.flags.cancelled.load(Ordering::SeqCst) {
            let _ = actor.cast(ToolCallMsg::BodyDone);
            return;
        }
        let (call_id, from) = (self.call_id.clone(), self.from);
        if self.toolset.cast(ToolsetMsg::Finished { call_id, from, result }).is_err() {
            tracing::warn!(call_id = %self.call_id, "toolset gone before the call ended");
        }
    }
}

/// The runtime's side of `RunContext`.
struct Hooks {
    reporter: Arc<Reporter>,
    update_template: Template,
    playout_done: CancellationToken,
    speech: SpeechControl,
    session: SessionLink,
    cancel: CancellationToken,
}

impl CallHooks for Hooks {
    fn update_template(&self) -> Template {
        self.update_template.clone()
    }

    fn post_update(&self, update: PostedUpdate) {
        // After the call ended the Toolset drops it, as §2 says.
        self.reporter.update(update);
    }

    fn wait_for_playout(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let done = self.playout_done.clone();
        Box::pin(async move { done.cancelled().await })
    }

    fn session(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::new(SessionHandle::from_link(&self.session)))
    }

    fn disallow_interruptions(&self) -> Result<(), String> {
        self.speech.disallow().map_err(str::to_string)
    }

    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.reporter.flags.cooperative.store(true, Ordering::SeqCst);
        let cancel = self.cancel.clone();
        Box::pin(async move { cancel.cancelled().await })
    }

    fn session_id(&self) -> Option<&str> {
        Some(&self.session.id)
    }
}

type Outcome = Result<ToolOutput, ToolError>;

/// Runs one attempt of the body: `Ok` with what it returned, `Err` with the internal error a
/// panic becomes (`panic: <text>`; never retried: a panic is a bug, not a transient failure).
async fn attempt(
    tool: &FunctionTool,
    ctx: RunContext,
    arguments: Map<String, Value>,
) -> Result<Outcome, Outcome> {
    match AssertUnwindSafe(tool.invoke(ctx, arguments)).catch_unwind().await {
        Ok(result) => Ok(result),
        Err(payload) => Err(Err(ToolError::internal(format!("panic: {}", panic_text(&*payload))))),
    }
}

/// A call with a `before_tool_call` hook, a gate or a retry policy
/// (docs/decisions.md#retries-and-hook, #tool-control-order): the hook, then the wait at the
/// gate (approval, a place under a cap), then the body's attempts with their backoffs, all in
/// the call's task.
struct Run {
    ctx: RunContext,
    agent_id: String,
    session_id: Arc<str>,
    reporter: Arc<Reporter>,
    /// Fired when the call is cancelled or timed out: a backoff then ends at once.
    cancel: CancellationToken,
}

/// What a call does before its body: the hook's decision, or the gate's opening.
struct Before {
    hook: Option<BeforeToolCall>,
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
    recalled: Option<ToolOutput>,
}

impl Run {
    /// `None` when the gate was dropped: the Toolset has ended the call already.
    async fn supervised(
        self,
        tool: FunctionTool,
        arguments: Map<String, Value>,
        before: Before,
    ) -> Option<Outcome> {
        // Validated once: the hook sees what the body would get, and a bad call is never
        // retried.
        let mut arguments = match tool.validate(arguments) {
            Ok(arguments) => arguments,
            Err(e) => return Some(Err(e)),
        };
        if let Some(hook) = before.hook {
            let recalled = before.recalled.is_some();
            let rewritten = match self.screen(&tool, &arguments, hook, recalled).await {
                Ok(rewritten) => rewritten,
                Err(outcome) => return Some(outcome),
            };
            if let Some(output) = before.recalled {
                return Some(Ok(output));
            }
            // An approver is shown the arguments that will run.
            let shown = rewritten.as_ref().map(|a| Value::Object(a.clone()).to_string());
            if let Some(rewritten) = rewritten {
                arguments = rewritten;
            }
            if before.gate.is_some() {
                // The Toolset waits for the hook before it asks for approval (decision 70).
                self.reporter.screened(tool.needs_approval(&arguments), shown);
            }
        }
        if let Some(gate) = before.gate
            && gate.await.is_err()
        {
            return None;
        }
        Some(self.attempts(tool, arguments).await)
    }

    /// Asks the hook: `Ok` with the arguments it rewrote, if any; `Err` with the call's outcome
    /// when the body must not run.
    async fn screen(
        &self,
        tool: &FunctionTool,
        arguments: &Map<String, Value>,
        hook: BeforeToolCall,
        remembered: bool,
    ) -> Result<Option<Map<String, Value>>, Outcome> {
        let mut pending = PendingToolCall::new(
            self.ctx.call_id(),
            tool.name(),
            arguments.clone(),
            self.agent_id.clone(),
        );
        pending.session_id = self.session_id.to_string();
        pending.needs_approval = !remembered && tool.needs_approval(arguments);
        pending.remembered = remembered;
        let decision = match AssertUnwindSafe(hook(pending)).catch_unwind().await {
            Ok(decision) => decision.map_err(Err)?,
            Err(payload) => {
                let why = format!("before_tool_call panicked: {}", panic_text(&*payload));
                return Err(Err(ToolError::internal(why)));
            }
        };
        match decision {
            BeforeCall::Run => Ok(None),
            BeforeCall::Rewrite(rewritten) => tool.validate(rewritten).map(Some).map_err(Err),
            BeforeCall::Skip(output) => Err(output.into_tool_output()),
            BeforeCall::Reject(reason) => {
                Err(Err(ToolError::new(text::tool_rejected_by_host(tool.name(), &reason))))
            }
        }
    }

    /// The body's attempts, with the tool's retry policy if it has one.
    async fn attempts(self, tool: FunctionTool, arguments: Map<String, Value>) -> Outcome {
        let Some(policy) = tool.retry_policy() else {
            return attempt(&tool, self.ctx, arguments).await.unwrap_or_else(|e| e);
        };
        let mut tried = 1;
        loop {
            let run = attempt(&tool, self.ctx.clone(), arguments.clone());
            let (outcome, reason) = match policy.attempt_timeout {
                Some(limit) => match tokio::time::timeout(limit, run).await {
                    Ok(Ok(Err(e))) => (Err(e.clone()), e.message().to_string()),
                    Ok(done) => return done.unwrap_or_else(|e| e),
                    Err(_) => {
                        let why = text::tool_timed_out(tool.name(), limit);
                        (Err(ToolError::new(why.clone())), why)
                    }
                },
                None => match run.await {
                    Ok(Err(e)) => (Err(e.clone()), e.message().to_string()),
                    done => return done.unwrap_or_else(|e| e),
                },
            };
            if tried >= policy.attempts {
                return outcome;
            }
            tried += 1;
            self.reporter.retrying(tried, reason);
            tokio::select! {
                biased;
                // Cancelled or timed out meanwhile: the Toolset has ended the call already.
                () = self.cancel.cancelled() => return outcome,
                () = tokio::time::sleep(policy.delay(tried - 1)) => {}
            }
        }
    }
}

impl Actor for ToolCallActor {
    type Msg = ToolCallMsg;
    type State = ToolCallState;
    type Arguments = ToolCallArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Kept cheap: this runs inside the Toolset's handler.
        Ok(ToolCallState {
            lifecycle: LifecycleGuard::new(
                args.session.lifecycle.clone(),
                ActorKind::ToolCall,
                || format!("tool_call:{}", args.call.call_id),
            ),
            cancel: CancellationToken::new(),
            flags: Arc::default(),
            _grace_timer: None,
            ended_early: None,
            start: Some(args),
            _task: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.started();
        let Some(args) = state.start.take() else { return Ok(()) };
        let reporter = Arc::new(Reporter {
            toolset: args.toolset,
            call_id: Arc::from(args.call.call_id.as_str()),
            from: myself.get_id(),
            flags: Arc::clone(&state.flags),
            updates: Mutex::new(0),
        });
        // The host's data and hook, from what the session shares (no copy per call).
        let plugins = &args.session.plugins;
        let session_id = Arc::clone(&args.session.id);
        let (userdata, before_call) = (plugins.userdata.clone(), plugins.before_call.clone());
        let hooks = Arc::new(Hooks {
            reporter: Arc::clone(&reporter),
            update_template: args.update_template,
            playout_done: args.playout_done,
            speech: args.speech,
            session: args.session,
            cancel: state.cancel.clone(),
        });
        let agent_id = args.agent_id.clone();
        let ctx = RunContext::with_hooks(args.call, args.speech_id, args.agent_id, userdata, hooks);
        let (tool, arguments) = (args.tool, args.arguments);
        let before = Before { hook: before_call, gate: args.gate, recalled: args.recalled };
        let run = Run {
            ctx,
            agent_id,
            session_id,
            reporter: Arc::clone(&reporter),
            cancel: state.cancel.clone(),
        };
        let plain = before.hook.is_none() && before.gate.is_none() && before.recalled.is_none();
        let body = if plain && tool.retry_policy().is_none() {
            // The common path: one attempt, nothing validated twice.
            let ctx = run.ctx;
            Box::pin(
                async move { Some(attempt(&tool, ctx, arguments).await.unwrap_or_else(|e| e)) },
            ) as std::pin::Pin<Box<dyn Future<Output = _> + Send>>
        } else {
            Box::pin(run.supervised(tool, arguments, before))
        };
        let body = tracing::Instrument::instrument(body, args.span);
        state._task = Some(OwnedTask::spawn(async move {
            // `None`: the gate was dropped, and the Toolset has ended the call already.
            if let Some(result) = body.await {
                reporter.finished(&myself, result);
            }
        }));
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let reason = state.ended_early.unwrap_or("finished");
        state.lifecycle.stopped(Some(reason.into()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::ToolCall);
        match message {
            // Decision 20: a cooperative body gets the grace period to clean up, any other is
            // aborted at once (stopping drops the state, which aborts the task).
            ToolCallMsg::Cancel { grace, why } => {
                state.ended_early = Some(why);
                state.flags.cancelled.store(true, Ordering::SeqCst);
                let done = state.flags.done.load(Ordering::SeqCst);
                if !done && state.flags.cooperative.load(Ordering::SeqCst) && !grace.is_zero() {
                    state.cancel.cancel();
                    let me = myself.clone();
                    state._grace_timer = Some(OwnedTask::spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = me.cast(ToolCallMsg::GraceOver);
                    }));
                } else {
                    myself.stop(Some(why.into()));
                }
            }
            ToolCallMsg::GraceOver | ToolCallMsg::BodyDone => {
                myself.stop(state.ended_early.map(String::from));
            }
            // Busy as it panics: its Toolset reports it `failed`, its guard stays silent.
            #[cfg(feature = "test-hooks")]
            ToolCallMsg::InjectFailure => {
                state.lifecycle.busy(true);
                panic!("injected failure")
            }
        }
        Ok(())
    }
}
