//! The Activity actor: the current agent. It owns the agent's implicit Toolset
//! (`agent:<id>`, spawned at the agent's first call: `toolsets.rs`), queues speeches and runs
//! each in a task it owns.
//!
//! One speech holds the floor at a time. A speech that waits for blocking tools lends the
//! floor, so other speeches (a `generate_reply`, a deferred reply) may speak meanwhile, and
//! takes it back, or asks for it ahead of the queue if it was given away, for its tool reply
//! (§10.1; `lending.rs` says how lending costs no message). A user turn's reply waits
//! for the speeches it interrupted — and so for their tools — before it starts (§14). The
//! mailbox only takes short messages, so an interrupt always gets through.

mod call_dispatch;
mod env;
mod lending;
mod speech;
mod step;
mod toolsets;

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use colloquy_llm::RequestKind;
use colloquy_model::{Agent, ErrorSource, EventKind, Templates};
use futures_util::FutureExt;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use env::{SpeechEnd, SpeechEnv};
use lending::{Attention, FloorLease};
use toolsets::Toolsets;

use crate::catalog::{Scope, ToolCatalog, implicit_toolset};
use crate::messages::{
    ActivityMsg, ActivityPart, ChildMsg, Report, SessionLink, SpeechContent, SpeechJob, ToolsetMsg,
};
use crate::support::lifecycle_sink::LifecycleGuard;
use crate::support::speech_control::SpeechControl;
use crate::support::task::{OwnedTask, panic_text};
use crate::toolset::{ToolsetActor, ToolsetArgs, toolset_node};
use crate::types::lifecycle::ActorKind;
use crate::types::snapshot::{ActorNode, NodeStatus, SpeechSnapshot, SpeechStatus};

pub(crate) struct ActivityActor;

pub(crate) struct ActivityArgs {
    pub agent: Agent,
    pub catalog: Arc<ToolCatalog>,
    pub session: SessionLink,
    /// The session-scoped async toolsets, by id.
    pub session_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
    /// Agent-scoped async toolsets handed over from the previous agent, by id.
    pub adopted_toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
}

/// A speech whose task runs: it holds the floor or waits for its tools.
struct LiveSpeech {
    control: SpeechControl,
    lease: FloorLease,
    _task: OwnedTask,
}

pub(crate) struct ActivityState {
    env: Arc<SpeechEnv>,
    queue: VecDeque<SpeechJob>,
    live: BTreeMap<String, LiveSpeech>,
    /// The speech holding the floor (it may have lent it: see its lease).
    floor: Option<String>,
    /// Speeches asking for the floor back (they go before the queue).
    floor_requests: VecDeque<(String, RpcReplyPort<()>)>,
    /// Interrupt callers and the speeches they wait for.
    interrupt_waiters: Vec<(Vec<String>, RpcReplyPort<()>)>,
    closing: bool,
    /// A handoff: the live and queued speeches finish (the Session sends no new ones).
    draining: bool,
    /// Toolsets that survive the handoff (the next agent lists them too).
    keep: Vec<String>,
    /// The toolsets this Activity supervises (the others in `env.toolsets` are the Session's).
    own_toolsets: Vec<String>,
    lifecycle: LifecycleGuard,
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
        let agent_id: Arc<str> = args.agent.id().into();
        // The implicit toolset, then the agent-scoped async ones; templates resolve toolset →
        // agent → session (§8).
        let implicit = implicit_toolset(&agent_id);
        let mut specs = vec![(implicit.clone(), None)];
        specs.extend(
            catalog.async_toolsets(Scope::Agent).map(|a| (a.id.clone(), a.templates.clone())),
        );
        let mut toolsets = args.session_toolsets;
        let (mut own_toolsets, mut spawned) = (Vec::new(), Vec::with_capacity(specs.len()));
        // Toolsets handed over from the previous agent keep running: adopt, don't spawn.
        for (id, toolset) in args.adopted_toolsets {
            toolset.get_cell().link(myself.get_cell());
            own_toolsets.push(id.clone());
            toolsets.insert(id, toolset);
        }
        for (id, templates) in specs {
            if toolsets.contains_key(&id) {
                continue;
            }
            let levels = [
                templates.as_ref(),
                args.agent.template_overrides(),
                args.session.options.templates.as_ref(),
            ];
            let toolset_args = ToolsetArgs {
                id: id.clone(),
                agent_id: agent_id.clone(),
                catalog: Arc::clone(&catalog),
                session: args.session.clone(),
                templates: Templates::resolve(&levels),
                scope: Scope::Agent,
            };
            own_toolsets.push(id.clone());
            // The implicit toolset waits for the agent's first call: an idle session holds one
            // actor fewer (docs/decisions.md#deferred-toolset). An async one, or one whose
            // tools a source lists, starts now: its server starts with the agent.
            if id == implicit && !catalog.has_sources_for(&id) {
                spawned.push(toolset_args);
                continue;
            }
            let spec = toolset_args.clone();
            let (toolset, _) =
                Actor::spawn_linked(None, ToolsetActor, toolset_args, myself.get_cell())
                    .await
                    .map_err(|e| format!("could not start toolset {id}: {e}"))?;
            spawned.push(spec);
            toolsets.insert(id, toolset);
        }
        let env = SpeechEnv {
            session: args.session,
            activity: myself,
            agent_id,
            instructions: Arc::from(args.agent.instructions()),
            catalog,
            toolsets: Toolsets::new(toolsets, spawned),
            attention: Attention::default(),
        };
        let id = || format!("activity:{}", env.agent_id);
        let lifecycle = LifecycleGuard::new(env.session.lifecycle.clone(), ActorKind::Activity, id);
        Ok(ActivityState {
            env: Arc::new(env),
            queue: VecDeque::new(),
            live: BTreeMap::new(),
            floor: None,
            floor_requests: VecDeque::new(),
            interrupt_waiters: Vec::new(),
            closing: false,
            draining: false,
            keep: Vec::new(),
            own_toolsets,
            lifecycle,
        })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.started();
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stop the toolsets gracefully rather than letting ractor kill them with us.
        myself.stop_children_and_wait(Some("activity stopped".into()), None).await;
        let reason = match (state.closing, state.draining) {
            (true, _) => Some("close".to_string()),
            (false, true) => Some("handoff".to_string()),
            // Neither drained nor closed: its Session stopped it (a replacement after a failure).
            (false, false) => Some("parent stopped".to_string()),
        };
        state.lifecycle.stopped(reason);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Activity);
        // Still set if this handler panics: the drop guard then stays silent (the Session
        // reports the failure).
        state.lifecycle.busy(true);
        // Speeches that ended since the last message (each told the Session itself).
        state.collect_finished();
        match message {
            ActivityMsg::Speak(job) => state.speak(job),
            ActivityMsg::Interrupt { reply } => state.interrupt(reply, false),
            ActivityMsg::FloorRequest { speech_id, reply } => {
                state.floor_requests.push_back((speech_id, reply));
                state.pump();
            }
            ActivityMsg::Wake => {} // ended speeches collected above, a lent floor in `settle`
            #[cfg(feature = "test-hooks")]
            ActivityMsg::InjectFailure => panic!("injected failure"),
            #[cfg(feature = "test-hooks")]
            ActivityMsg::InjectToolsetFailure(id) => {
                if let Some(toolset) = Box::pin(state.env.started_toolset(&id)).await {
                    let _ = toolset.cast(ToolsetMsg::InjectFailure);
                }
            }
            ActivityMsg::Rerun(calls) => Box::pin(call_dispatch::rerun(&state.env, calls)).await,
            ActivityMsg::Inspect(reply) => {
                let _ = reply.send(state.inspect(&myself));
            }
            ActivityMsg::ReplaceToolset { id, toolset } => state.env.toolsets.replace(&id, toolset),
            ActivityMsg::SetMocks(mocks) => state.env.toolsets.set_mocks(mocks),
            ActivityMsg::Close => {
                state.closing = true;
                state.interrupt(None, true);
                state.report_closed_if_quiet();
            }
            ActivityMsg::Drain { keep } => {
                state.draining = true;
                state.keep = keep;
                state.report_drained_if_quiet();
            }
            // At a close every toolset goes; at a handoff the ones moving on keep theirs.
            ActivityMsg::DrainExpired => state.env.toolsets.expire(&state.keep),
        }
        state.settle();
        state.lifecycle.busy(false);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Activity);
        // The default would stop this actor when its toolset ends; report instead, and start
        // the toolset again so that its tools keep working (its calls ended with it).
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            let toolsets = state.env.toolsets.all();
            let failed = toolsets.iter().find(|(_, t)| t.get_id() == cell.get_id());
            let mut message = format!("toolset failed: {err}");
            if let Some((id, _)) = failed {
                let lifecycle = &state.env.session.lifecycle;
                lifecycle.failed(ActorKind::Toolset, format!("toolset:{id}"), &err);
                if let Some(restarted) = Box::pin(state.restart_toolset(id, &myself)).await {
                    message = format!("toolset `{id}` failed: {err}; {restarted}");
                }
            }
            tracing::error!(agent = %state.env.agent_id, "{message}");
            state.env.session.emit(EventKind::error(ErrorSource::Tool, message));
        }
        Ok(())
    }
}

impl ActivityState {
    /// Spawns toolset `id`, one this Activity started, again after it failed (not while the
    /// Activity winds down); what became of it, for the error event.
    async fn restart_toolset(&self, id: &str, myself: &ActorRef<ActivityMsg>) -> Option<String> {
        let spec = self.env.toolsets.spec(id).filter(|_| !self.closing && !self.draining)?.clone();
        match Actor::spawn_linked(None, ToolsetActor, spec, myself.get_cell()).await {
            Ok((toolset, _)) => {
                self.env.toolsets.replace(id, toolset);
                Some("started again".into())
            }
            Err(e) => Some(format!("could not start it again: {e}")),
        }
    }

    /// This Activity, its speeches and the toolsets it supervises (`SessionHandle::inspect`).
    fn inspect(&self, myself: &ActorRef<ActivityMsg>) -> ActivityPart {
        let status = match (self.closing, self.draining) {
            (true, _) => NodeStatus::Closing,
            (false, true) => NodeStatus::Draining,
            (false, false) => NodeStatus::Running,
        };
        let id = format!("activity:{}", self.env.agent_id);
        let mut node = ActorNode::new(ActorKind::Activity, id, status, &myself.get_cell());
        node.agent = Some(self.env.agent_id.to_string());
        // A holder that lent the floor waits for its tools.
        let lent = |id: &String| self.live.get(id).is_some_and(|s| s.lease.is_lent());
        let holder = self.floor.as_ref().filter(|id| !lent(id));
        let speaking = holder.map(|id| (id.clone(), SpeechStatus::Speaking)).into_iter();
        let waiting = self
            .live
            .keys()
            .filter(|id| holder != Some(*id))
            .map(|id| (id.clone(), SpeechStatus::WaitingForTools));
        let queued = self.queue.iter().map(|job| (job.speech_id.clone(), SpeechStatus::Queued));
        let speeches = speaking
            .chain(waiting)
            .chain(queued)
            .map(|(speech_id, status)| SpeechSnapshot { speech_id, status })
            .collect();
        // Toolsets kept for the next agent move to the Session once the drain begins.
        let toolsets = self
            .own_toolsets
            .iter()
            .filter(|id| !(self.draining && self.keep.contains(id)))
            .filter_map(|id| self.env.toolsets.get(id))
            .collect();
        let unstarted = self.env.toolsets.unstarted();
        let unstarted = unstarted.into_iter().map(|args| toolset_node(args, ActorId::Local(0)));
        ActivityPart { node, speeches, toolsets, unstarted: unstarted.collect() }
    }

    fn speak(&mut self, job: SpeechJob) {
        if self.closing {
            self.report_done(job.speech_id, true);
            return;
        }
        self.queue.push_back(job);
        self.pump();
    }

    /// Hands the floor on when it is free or lent: first to a speech asking for it back, then
    /// to the queue. A user turn's reply waits until the speeches it interrupted are gone.
    fn pump(&mut self) {
        loop {
            if self.floor_requests.is_empty() {
                let Some(job) = self.queue.front() else { return };
                let is_user_turn =
                    matches!(job.content, SpeechContent::Reply { kind: RequestKind::UserTurn, .. });
                if is_user_turn && self.live.values().any(|s| s.control.is_interrupted()) {
                    return;
                }
            }
            if !self.take_floor() {
                return; // its holder tells us if it lends it or ends (see `settle`)
            }
            if let Some((speech_id, reply)) = self.floor_requests.pop_front() {
                if let Some(speech) = self.live.get(&speech_id)
                    && reply.send(()).is_ok()
                {
                    speech.lease.hold();
                    self.floor = Some(speech_id);
                }
                continue;
            }
            if let Some(job) = self.queue.pop_front() {
                self.start(job);
            }
        }
    }

    /// True once the floor is free: nobody holds it, or its holder had lent it and the
    /// Activity took it now.
    fn take_floor(&mut self) -> bool {
        let Some(holder) = &self.floor else { return true };
        let Some(speech) = self.live.get(holder) else {
            self.floor = None;
            return true;
        };
        if speech.lease.take() {
            self.floor = None;
            return true;
        }
        false
    }

    /// Handles the speeches whose task ended as if each had said so; true if there were any.
    fn collect_finished(&mut self) -> bool {
        let ended: Vec<String> = self
            .live
            .iter()
            .filter(|(_, s)| s.lease.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        let any = !ended.is_empty();
        for speech_id in ended {
            self.speech_finished(speech_id);
        }
        any
    }

    /// After every message: says whether a speech that lends its floor or ends must tell the
    /// Activity at once — it must while the Activity waits for the floor (a queued speech, a
    /// floor request) or for speeches to end (interrupt callers, a drain, a close). Announced
    /// first, then checked again: a speech that lent or ended before it could see the
    /// announcement is handled here (`lending.rs`).
    fn settle(&mut self) {
        loop {
            let wants_floor = !self.queue.is_empty() || !self.floor_requests.is_empty();
            let waiting =
                wants_floor || !self.interrupt_waiters.is_empty() || self.closing || self.draining;
            self.env.attention.set(waiting);
            if !waiting {
                return;
            }
            if self.collect_finished() {
                continue;
            }
            let holder = self.floor.as_ref().and_then(|id| self.live.get(id));
            if !(wants_floor && holder.is_some_and(|s| s.lease.is_lent())) {
                return;
            }
            let before = self.floor.clone();
            self.pump();
            if self.floor == before {
                return;
            }
        }
    }

    fn start(&mut self, job: SpeechJob) {
        let control = SpeechControl::new(job.allow_interruptions);
        let lease = FloorLease::default();
        let speech_id = job.speech_id.clone();
        let env = Arc::clone(&self.env);
        let (task_control, task_lease) = (control.clone(), lease.clone());
        let span = job.span.clone();
        // Boxed: a speech's future is kilobytes, and spawning moves it several times (into the
        // span's wrapper, the task's cell) and tokio moves a task's stage again as it ends.
        let task = OwnedTask::spawn(tracing::Instrument::instrument(
            Box::pin(async move {
                let id = job.speech_id.clone();
                let speech = speech::run(Arc::clone(&env), job, task_control, task_lease.clone());
                let end = match AssertUnwindSafe(speech).catch_unwind().await {
                    Ok(end) => end,
                    Err(payload) => {
                        let message = format!("speech {id} failed: {}", panic_text(&*payload));
                        tracing::error!(agent = %env.agent_id, "{message}");
                        env.session.emit(EventKind::error(ErrorSource::Session, message));
                        SpeechEnd::new(true)
                    }
                };
                // The Session hears first, in one message with the last commit: anything the
                // Activity reports once the speech is gone (drained, closed) comes after it.
                let SpeechEnd { interrupted, mut tail } = end;
                tail.push(Report::SpeechDone { speech_id: id, interrupted });
                env.session.reports(tail);
                // The Activity collects the speech at its next message, and hears now if it
                // waits for something (`lending.rs`).
                task_lease.finish();
                env.wake_activity_if_waiting();
            }),
            span,
        ));
        self.live.insert(speech_id.clone(), LiveSpeech { control, lease, _task: task });
        self.floor = Some(speech_id);
    }

    /// Interrupts live speeches and drops queued ones, skipping those that disallow
    /// interruptions unless `force`. `reply` answers once every interrupted speech has ended
    /// (at once if none was).
    fn interrupt(&mut self, reply: Option<RpcReplyPort<()>>, force: bool) {
        let (dropped, kept): (Vec<_>, Vec<_>) =
            self.queue.drain(..).partition(|job| force || job.allow_interruptions);
        self.queue = kept.into();
        for job in dropped {
            self.report_done(job.speech_id, true);
        }
        let mut waiting_for = Vec::new();
        for (id, speech) in &self.live {
            if force || speech.control.allows_interruptions() {
                speech.control.interrupt();
                waiting_for.push(id.clone());
            }
        }
        match reply {
            Some(reply) if waiting_for.is_empty() => {
                let _ = reply.send(());
            }
            Some(reply) => self.interrupt_waiters.push((waiting_for, reply)),
            None => {}
        }
    }

    /// A speech's task ended (it told the Session itself): it leaves, the floor and interrupt
    /// callers waiting for it are freed, and a drain or close may be over.
    fn speech_finished(&mut self, speech_id: String) {
        self.live.remove(&speech_id);
        if self.floor.as_deref() == Some(speech_id.as_str()) {
            self.floor = None;
        }
        let live = &self.live;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.interrupt_waiters)
            .into_iter()
            .partition(|(ids, _)| ids.iter().all(|id| !live.contains_key(id)));
        self.interrupt_waiters = waiting;
        for (_, reply) in done {
            let _ = reply.send(());
        }
        if self.closing {
            self.report_closed_if_quiet();
            return;
        }
        // A drain lets the queue run out too: a speech queued before it is played, not lost.
        self.pump();
        if self.draining {
            self.report_drained_if_quiet();
        }
    }

    /// A queued speech that never ran is done.
    fn report_done(&self, speech_id: String, interrupted: bool) {
        self.env.session.report(Report::SpeechDone { speech_id, interrupted });
    }

    /// Once quiet: re-parents the toolsets to keep under the Session (inside this handler, so
    /// this actor cannot be exiting meanwhile, docs/ractor-notes.md §2.2) and reports them.
    fn report_drained_if_quiet(&self) {
        if !self.live.is_empty() || !self.queue.is_empty() {
            return;
        }
        let session = self.env.session.actor.get_cell();
        let mut kept = BTreeMap::new();
        for id in &self.keep {
            if let Some(toolset) = self.env.toolsets.get(id) {
                toolset.get_cell().link(session.clone());
                kept.insert(id.clone(), toolset);
            }
        }
        let _ = self.env.session.actor.cast(ChildMsg::ActivityDrained { kept }.into());
    }

    fn report_closed_if_quiet(&self) {
        if self.live.is_empty() {
            let _ = self.env.session.actor.cast(ChildMsg::ActivityClosed.into());
        }
    }
}
