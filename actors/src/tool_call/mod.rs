//! The ToolCall actor: one per running call, a child of its Toolset.
//!
//! It runs the tool's future in a task it owns (aborted if the actor dies), so its mailbox
//! stays free while the tool works. The tool's `RunContext` posts updates here; the actor
//! numbers them and forwards them, then the result, to its Toolset in the order they happened.
//! A panic in the body is caught and becomes an internal error (`panic: <text>`). The actor
//! never stops itself: supervision events overtake messages (RACTOR-NOTES §2.3 item 4), so the
//! Toolset stops it after consuming its result.

pub(crate) mod messages;

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use colloquy_core::{
    CallHooks, FunctionCall, FunctionTool, PostedUpdate, RunContext, Template, ToolError,
};
use futures_util::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Map, Value};

pub(crate) use messages::ToolCallMsg;

use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use crate::handle::SessionHandle;
use crate::lifecycle::{ActorKind, LifecycleGuard};
use crate::session::SessionLink;
use crate::speech_control::SpeechControl;
use crate::task::{OwnedTask, panic_text};
use crate::toolset::ToolsetMsg;

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
    pub userdata: Option<Arc<dyn Any + Send + Sync>>,
    pub update_template: Template,
    pub toolset: ActorRef<ToolsetMsg>,
    /// The call's `tracing` span; the body runs in it.
    pub span: tracing::Span,
}

pub(crate) struct ToolCallState {
    call_id: String,
    lifecycle: LifecycleGuard,
    toolset: ActorRef<ToolsetMsg>,
    /// Updates posted so far.
    updates: u32,
    /// Fired on cancel; a body that awaited `ctx.cancelled()` is cooperative.
    cancel: CancellationToken,
    cooperative: Arc<AtomicBool>,
    /// Cancelled: nothing is forwarded any more, the actor only waits to stop.
    cancelling: bool,
    _grace_timer: Option<OwnedTask>,
    /// Taken by `post_start` to start the body.
    start: Option<ToolCallArgs>,
    /// The body's task; dropping the state aborts it.
    _task: Option<OwnedTask>,
}

/// The runtime's side of `RunContext`: updates become messages to this actor.
struct Hooks {
    actor: ActorRef<ToolCallMsg>,
    update_template: Template,
    playout_done: CancellationToken,
    speech: SpeechControl,
    session: SessionLink,
    cancel: CancellationToken,
    cooperative: Arc<AtomicBool>,
}

impl CallHooks for Hooks {
    fn update_template(&self) -> Template {
        self.update_template.clone()
    }

    fn post_update(&self, update: PostedUpdate) {
        // After the call ended the actor is gone: the update is dropped, as §2 says.
        let _ = self.actor.cast(ToolCallMsg::Update(update));
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
        self.cooperative.store(true, Ordering::SeqCst);
        let cancel = self.cancel.clone();
        Box::pin(async move { cancel.cancelled().await })
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
            call_id: args.call.call_id.clone(),
            lifecycle: LifecycleGuard::new(
                args.session.lifecycle.clone(),
                ActorKind::ToolCall,
                format!("tool_call:{}", args.call.call_id),
            ),
            toolset: args.toolset.clone(),
            updates: 0,
            cancel: CancellationToken::new(),
            cooperative: Arc::new(AtomicBool::new(false)),
            cancelling: false,
            _grace_timer: None,
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
        let hooks = Arc::new(Hooks {
            actor: myself.clone(),
            update_template: args.update_template,
            playout_done: args.playout_done,
            speech: args.speech,
            session: args.session,
            cancel: state.cancel.clone(),
            cooperative: Arc::clone(&state.cooperative),
        });
        let ctx =
            RunContext::with_hooks(args.call, args.speech_id, args.agent_id, args.userdata, hooks);
        let (tool, arguments) = (args.tool, args.arguments);
        let body = tracing::Instrument::instrument(
            async move { tool.invoke(ctx, arguments).await },
            args.span,
        );
        state._task = Some(OwnedTask::spawn(async move {
            let result = match AssertUnwindSafe(body).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => {
                    Err(ToolError::internal(format!("panic: {}", panic_text(&*payload))))
                }
            };
            let _ = myself.cast(ToolCallMsg::Finished(result));
        }));
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let reason = if state.cancelling { "cancelled" } else { "finished" };
        state.lifecycle.stopped(Some(reason.into()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let call_id = state.call_id.clone();
        let forward = match message {
            // Decision 20: a cooperative body gets the grace period to clean up, any other is
            // aborted at once (stopping drops the state, which aborts the task).
            ToolCallMsg::Cancel { grace } => {
                state.cancelling = true;
                if state.cooperative.load(Ordering::SeqCst) && !grace.is_zero() {
                    state.cancel.cancel();
                    let me = myself.clone();
                    state._grace_timer = Some(OwnedTask::spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = me.cast(ToolCallMsg::GraceOver);
                    }));
                } else {
                    myself.stop(Some("cancelled".into()));
                }
                return Ok(());
            }
            ToolCallMsg::GraceOver => {
                myself.stop(Some("cancelled".into()));
                return Ok(());
            }
            _ if state.cancelling => {
                // The call already ended `cancelled`: whatever the body does now is dropped.
                if matches!(message, ToolCallMsg::Finished(_)) {
                    myself.stop(Some("cancelled".into()));
                }
                return Ok(());
            }
            ToolCallMsg::Update(update) => {
                let index = state.updates;
                state.updates += 1;
                ToolsetMsg::Updated { call_id, index, update }
            }
            ToolCallMsg::Finished(result) => ToolsetMsg::Finished { call_id, result },
        };
        if state.toolset.cast(forward).is_err() {
            tracing::warn!(call_id = %state.call_id, "toolset gone before the call ended");
        }
        Ok(())
    }
}
