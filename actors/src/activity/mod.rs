//! The Activity actor: the current agent. It owns the agent's implicit Toolset
//! (`agent:<id>`), queues speeches and runs one at a time in a task it owns.
//!
//! Its mailbox only takes short messages (queue, interrupt, speech finished, close), so an
//! interrupt always gets through while a speech streams or waits for tools.

mod dispatch;
pub(crate) mod messages;
mod speech;

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use colloquy_core::{Agent, ErrorSource, EventKind};
use colloquy_llm::Llm;
use futures_util::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio_util::sync::CancellationToken;

pub(crate) use messages::{ActivityMsg, SpeechContent, SpeechJob};
use speech::SpeechEnv;

use crate::catalog::ToolCatalog;
use crate::session::{SessionLink, SessionMsg};
use crate::speech_sink::SpeechSink;
use crate::task::{OwnedTask, panic_text};
use crate::toolset::{ToolsetActor, ToolsetArgs};

pub(crate) struct ActivityActor;

pub(crate) struct ActivityArgs {
    pub agent: Agent,
    pub catalog: Arc<ToolCatalog>,
    pub session: SessionLink,
    pub llm: Arc<dyn Llm>,
    pub sink: Option<Arc<dyn SpeechSink>>,
    pub max_tool_steps: u32,
    pub userdata: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

struct CurrentSpeech {
    speech_id: String,
    allow_interruptions: bool,
    interrupt: CancellationToken,
    _task: OwnedTask,
}

pub(crate) struct ActivityState {
    env: Arc<SpeechEnv>,
    queue: VecDeque<SpeechJob>,
    current: Option<CurrentSpeech>,
    /// Interrupt callers waiting for the current speech to end.
    interrupt_waiters: Vec<RpcReplyPort<()>>,
    closing: bool,
}

impl Actor for ActivityActor {
    type Msg = ActivityMsg;
    type State = ActivityState;
    type Arguments = ActivityArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let catalog = args.catalog;
        let agent_id = args.agent.id().to_string();
        let toolset_args = ToolsetArgs {
            id: format!("agent:{agent_id}"),
            agent_id: agent_id.clone(),
            catalog: Arc::clone(&catalog),
            session: args.session.clone(),
            userdata: args.userdata,
        };
        let (toolset, _) = Actor::spawn_linked(None, ToolsetActor, toolset_args, myself.get_cell())
            .await
            .map_err(|e| format!("could not start toolset agent:{agent_id}: {e}"))?;
        let env = SpeechEnv {
            session: args.session,
            llm: args.llm,
            sink: args.sink,
            agent_id,
            instructions: Arc::from(args.agent.instructions()),
            catalog,
            toolset,
            max_tool_steps: args.max_tool_steps,
        };
        Ok(ActivityState {
            env: Arc::new(env),
            queue: VecDeque::new(),
            current: None,
            interrupt_waiters: Vec::new(),
            closing: false,
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stop the toolset gracefully rather than letting ractor kill it with us.
        myself.stop_children_and_wait(Some("activity stopped".into()), None).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ActivityMsg::Speak(job) => state.speak(&myself, job),
            ActivityMsg::Interrupt { reply } => state.interrupt(reply, false),
            ActivityMsg::SpeechFinished { speech_id, interrupted } => {
                state.speech_finished(&myself, speech_id, interrupted)
            }
            ActivityMsg::SetMocks(mocks) => {
                let _ = state.env.toolset.cast(crate::toolset::ToolsetMsg::SetMocks(mocks));
            }
            ActivityMsg::Close => {
                state.closing = true;
                state.interrupt(None, true);
                state.report_closed_if_quiet();
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The default would stop this actor when its toolset ends; report instead.
        if let SupervisionEvent::ActorFailed(_, err) = event {
            let message = format!("toolset failed: {err}");
            tracing::error!(agent = %state.env.agent_id, "{message}");
            state.env.session.emit(EventKind::Error { source: ErrorSource::Tool, message });
        }
        Ok(())
    }
}

impl ActivityState {
    fn speak(&mut self, myself: &ActorRef<ActivityMsg>, job: SpeechJob) {
        if self.closing {
            self.report_done(job.speech_id, true);
            return;
        }
        self.queue.push_back(job);
        if self.current.is_none() {
            self.start_next(myself);
        }
    }

    fn start_next(&mut self, myself: &ActorRef<ActivityMsg>) {
        let Some(job) = self.queue.pop_front() else { return };
        let interrupt = CancellationToken::new();
        let speech_id = job.speech_id.clone();
        let allow_interruptions = job.allow_interruptions;
        let env = Arc::clone(&self.env);
        let token = interrupt.clone();
        let activity = myself.clone();
        let task = OwnedTask::spawn(async move {
            let id = job.speech_id.clone();
            let interrupted = match AssertUnwindSafe(speech::run(Arc::clone(&env), job, token))
                .catch_unwind()
                .await
            {
                Ok(interrupted) => interrupted,
                Err(payload) => {
                    let message = format!("speech {id} failed: {}", panic_text(&*payload));
                    tracing::error!(agent = %env.agent_id, "{message}");
                    env.session.emit(EventKind::Error { source: ErrorSource::Session, message });
                    true
                }
            };
            let _ = activity.cast(ActivityMsg::SpeechFinished { speech_id: id, interrupted });
        });
        self.current =
            Some(CurrentSpeech { speech_id, allow_interruptions, interrupt, _task: task });
    }

    /// Interrupts the current speech and drops queued ones, skipping those that disallow
    /// interruptions unless `force`.
    fn interrupt(&mut self, reply: Option<RpcReplyPort<()>>, force: bool) {
        let (dropped, kept): (Vec<_>, Vec<_>) =
            self.queue.drain(..).partition(|job| force || job.allow_interruptions);
        self.queue = kept.into();
        for job in dropped {
            self.report_done(job.speech_id, true);
        }
        let waiting = match &self.current {
            Some(current) if force || current.allow_interruptions => {
                current.interrupt.cancel();
                true
            }
            _ => false,
        };
        if let Some(reply) = reply {
            if waiting {
                self.interrupt_waiters.push(reply);
            } else {
                let _ = reply.send(());
            }
        }
    }

    fn speech_finished(
        &mut self,
        myself: &ActorRef<ActivityMsg>,
        speech_id: String,
        interrupted: bool,
    ) {
        if self.current.as_ref().is_some_and(|c| c.speech_id == speech_id) {
            self.current = None;
        }
        self.report_done(speech_id, interrupted);
        for waiter in self.interrupt_waiters.drain(..) {
            let _ = waiter.send(());
        }
        if self.closing {
            self.report_closed_if_quiet();
        } else {
            self.start_next(myself);
        }
    }

    fn report_done(&self, speech_id: String, interrupted: bool) {
        let _ = self.env.session.actor.cast(SessionMsg::SpeechDone { speech_id, interrupted });
    }

    fn report_closed_if_quiet(&self) {
        if self.current.is_none() {
            let _ = self.env.session.actor.cast(SessionMsg::ActivityClosed);
        }
    }
}
