//! The Toolset actor: runs the calls of one toolset, each in its own ToolCall child.
//!
//! An agent's Activity supervises its implicit toolset `agent:<id>` (the agent's tools outside
//! any async toolset; spawned at their first call, decision 81) and one Toolset per
//! agent-scoped async toolset it lists; the Session supervises the session-scoped ones, which
//! survive handoffs (decision 16). A Toolset registers a call, spawns its ToolCall, and turns
//! what the body reports into what the model sees:
//! - before any update, the result is the call's output (dispatch waits for it);
//! - the first update's text is the call's provisional output: dispatch is released and the
//!   call goes on in the background;
//! - later updates and the final result become synthetic pairs (`<id>_update_<n>`,
//!   `<id>_final`) inserted into the agent's context and the history at once, then queued on
//!   the ReplyCoalescer for a deferred reply.
//!
//! Every call ends with exactly one `tool_call_ended`, whose status follows the output the
//! model receives (decision 13); it is emitted after the final pair is inserted and before the
//! pair is queued, so it always precedes the reply that carries it (decision 5).

mod approval;
mod execute;
mod queue;
mod watch;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::time::Duration;

use colloquy_model::{
    ChatItem, ConcurrencyLimit, EventKind, FunctionCall, FunctionTool, PostedUpdate,
    ResolvedTemplates, ToolCallStatus, ToolError, ToolErrorKind, ToolOutput, text,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::catalog::{Scope, ToolCatalog};
use crate::messages::{
    CallOutcome, PendingReply, Report, SessionLink, ToolCallMsg, ToolsetMsg, mark_non_blocking,
};
use crate::support::lifecycle_sink::LifecycleGuard;
use crate::support::pair::Pair;
use crate::support::speech_control::SpeechControl;
use crate::types::error::CancelError;
use crate::types::lifecycle::ActorKind;
use crate::types::snapshot::{ActorNode, NodeStatus, ToolsetScope};

pub(crate) struct ToolsetActor;

#[derive(Clone)]
pub(crate) struct ToolsetArgs {
    pub id: String,
    pub agent_id: Arc<str>,
    pub catalog: Arc<ToolCatalog>,
    pub session: SessionLink,
    /// Templates resolved for this toolset (toolset → agent → session → default).
    pub templates: ResolvedTemplates,
    /// Session-scoped toolsets survive handoffs; agent-scoped ones are drained.
    pub scope: Scope,
}

struct RunningCall {
    actor: ActorRef<ToolCallMsg>,
    keys: execute::CallKeys,
    cancellable: bool,
    /// The dispatching speech: a call whose speech disallows interruptions cannot be
    /// cancelled by the model or `replace` (§12.2); a drain cancels it anyway.
    speech: SpeechControl,
    /// Answered with the result, or with the first update.
    reply: Option<RpcReplyPort<CallOutcome>>,
    /// The call's item, for synthetic pairs.
    call: FunctionCall,
    updates: u32,
    started: tokio::time::Instant,
    /// Its deadline and heartbeat, if any.
    watch: watch::Watch,
    /// Where the call is on its way to its body (docs/decisions.md#tool-control-order).
    stage: Stage,
    /// Opens the body's gate, for a call that may wait (for approval, for a place).
    gate: Option<tokio::sync::oneshot::Sender<()>>,
    /// Added to the body's update numbers: 1 when dispatch was answered provisionally while
    /// the call waited (the wait took the place of the first update).
    update_offset: u32,
    /// The concurrency caps it counts against while its body may run.
    limits: Vec<ConcurrencyLimit>,
    /// Answered from memory once the hook let it go on: it ends `cached` and is not
    /// remembered again.
    cached: bool,
    /// It waited for approval or a place: in a durable session its let-through is written
    /// ahead of its body, so a resume knows whether the body began.
    held: bool,
}

/// Where a started call is before it ends (decision 70): hook, approval, a place, its body.
enum Stage {
    /// The before-call hook decides (its ToolCall says when with `Screened`). `drained`: a
    /// drain (handoff, close) asked meanwhile, with its reason — nobody will be asked to
    /// approve the call then.
    Screening { drained: Option<String> },
    /// Waits for the host's approval; the timer rejects it if nobody answers.
    AwaitingApproval { _timer: Option<crate::support::task::OwnedTask> },
    /// Waits for a place under its caps, in `places`.
    Queued,
    /// Its body may run: it holds its places.
    Running,
}

pub(crate) struct ToolsetState {
    args: ToolsetArgs,
    /// Running calls by call id (ordered: anything observable iterates deterministically).
    /// Boxed: a map's first node holds room for eleven entries, and a running call is large.
    running: BTreeMap<String, Box<RunningCall>>,
    /// Mocked bodies by tool name (the testing API).
    mocks: Arc<BTreeMap<String, FunctionTool>>,
    /// Cancelled calls whose ToolCall actor has not terminated yet (stopping, or a body
    /// winding down in its grace period), until its supervision event arrives. A call that
    /// ended with its result is unlinked and stopped at once, and not kept.
    stopping: BTreeMap<String, Box<RunningCall>>,
    /// `post_stop` ran: calls left when the state drops were not killed with the toolset.
    graceful: bool,
    /// A drain ran out of time: new calls are refused (decision 7).
    expired: bool,
    /// Calls waiting for a place under a concurrency cap, oldest first (their ids; a call
    /// that ended meanwhile is dropped when met).
    places: VecDeque<String>,
    /// A `GrantPlaces` is in this mailbox.
    grant_pending: bool,
    /// In a durable session: calls whose start is not on disk yet, whose body waits for it
    /// even once let through (docs/durability.md#write-ahead).
    unjournaled: std::collections::BTreeSet<String>,
    /// Idempotent tools' `done` results by result key.
    remembered: BTreeMap<String, queue::Remembered>,
    lifecycle: LifecycleGuard,
}

impl Drop for ToolsetState {
    /// Drop guard: a toolset killed with its parent (an Activity or Session that failed) runs
    /// no `post_stop`, and its ToolCalls die with it; each call still running ends `error`
    /// here, exactly once, its `_final` pair delivered if it had updated.
    fn drop(&mut self) {
        if self.graceful || self.running.is_empty() {
            return;
        }
        let why = match (self.lifecycle.failed_in_handler(), self.args.scope) {
            (true, _) => "toolset failed",
            (false, Scope::Agent) => "activity failed",
            (false, Scope::Session) => "session failed",
        };
        let calls: Vec<String> = self.running.keys().cloned().collect();
        for call_id in calls {
            self.finish(&call_id, Err(ToolError::internal(why)));
        }
    }
}

impl Actor for ToolsetActor {
    type Msg = ToolsetMsg;
    type State = ToolsetState;
    type Arguments = ToolsetArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let id = || format!("toolset:{}", args.id);
        let lifecycle = LifecycleGuard::new(args.session.lifecycle.clone(), ActorKind::Toolset, id);
        let remembered = queue::resumed_memory(&args.session.remembered);
        Ok(ToolsetState {
            args,
            running: BTreeMap::new(),
            mocks: Arc::default(),
            stopping: BTreeMap::new(),
            graceful: false,
            expired: false,
            places: VecDeque::new(),
            grant_pending: false,
            unjournaled: Default::default(),
            remembered,
            lifecycle,
        })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.started();
        // Servers behind this toolset's tools start with it (an MCP server's supervisor).
        state.args.catalog.start_sources(&state.args.id);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.graceful = true;
        // Calls still winding down (a cooperative grace period) stop gracefully, not killed.
        myself.stop_children_and_wait(Some("toolset stopped".into()), None).await;
        // Only its parent stops a toolset: its Activity (handoff, close) or the Session (close).
        state.lifecycle.stopped(Some("parent stopped".into()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Toolset);
        // Still set if this handler panics: the drop guard then knows the toolset itself failed.
        state.lifecycle.busy(true);
        // Granting places frees none: it offers no more.
        let may_free = !matches!(message, ToolsetMsg::GrantPlaces);
        match message {
            ToolsetMsg::Execute(call, reply) => 'execute: {
                // A `let`, not an `if let`: the handler's future then holds no `Admitted`.
                let Some(admitted) = state.admit(&myself, *call, reply) else { break 'execute };
                // Boxed: its future holds a call's whole start, and inline it would size
                // every message's future (docs/decisions.md#boxed-futures).
                Box::pin(state.start(myself.clone(), admitted)).await;
            }
            ToolsetMsg::SetMocks(mocks) => state.mocks = mocks,
            ToolsetMsg::SetOwner { agent_id } => state.args.agent_id = agent_id,
            ToolsetMsg::Abort { call_id } => state.abort(&call_id),
            ToolsetMsg::Expire => {
                state.expired = true;
                let calls: Vec<String> = state.running.keys().cloned().collect();
                for call_id in calls {
                    state.abort(&call_id);
                }
            }
            ToolsetMsg::Cancel { call_id, reply, drain } => {
                let result = state.cancel(&call_id, drain);
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            ToolsetMsg::Updated { call_id, from, index, update } => {
                if state.runs(&call_id, from) {
                    state.updated(&call_id, index, update);
                }
            }
            ToolsetMsg::Retrying { call_id, from, attempt, reason } => {
                if state.runs(&call_id, from) {
                    state.retrying(&call_id, attempt, reason);
                }
            }
            ToolsetMsg::Screened { call_id, from, needs_approval, rewritten } => {
                if state.runs(&call_id, from) {
                    state.screened(&myself, &call_id, needs_approval, rewritten);
                }
            }
            ToolsetMsg::Release { step_id } => state.release(&step_id),
            ToolsetMsg::GrantPlaces => {
                state.grant_pending = false;
                state.grant_places(&myself);
            }
            ToolsetMsg::Journaled { call_id, let_through } => {
                state.journaled(&myself, &call_id, let_through);
            }
            ToolsetMsg::Watch { call_id, from } => state.check_watch(&myself, &call_id, from),
            ToolsetMsg::Approve { call_id, reply } => {
                let result = state.approve(&myself, &call_id);
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            ToolsetMsg::Reject { call_id, reason, reply, drain } => {
                let result = state.reject(&call_id, &reason, drain);
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
            ToolsetMsg::ApprovalTimeout { call_id, from } => {
                state.approval_timed_out(&call_id, from);
            }
            ToolsetMsg::Finished { call_id, from, result } => {
                if state.runs(&call_id, from) {
                    state.finish(&call_id, result);
                }
            }
            #[cfg(feature = "test-hooks")]
            ToolsetMsg::InjectFailure => panic!("injected failure"),
            #[cfg(feature = "test-hooks")]
            ToolsetMsg::InjectCallFailure(call_id) => {
                if let Some(call) = state.running.get(&call_id) {
                    let _ = call.actor.cast(crate::messages::ToolCallMsg::InjectFailure);
                }
            }
            ToolsetMsg::Inspect(reply) => {
                let _ = reply.send(state.inspect(&myself));
            }
        }
        // A call that ended may have freed a place for waiting ones.
        if may_free {
            state.offer_places(&myself);
        }
        state.lifecycle.busy(false);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Toolset);
        // A ToolCall that dies before reporting (it is killed, or its actor code fails) still
        // ends its call exactly once.
        let (cell, why) = match &event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.clone().unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        if let SupervisionEvent::ActorFailed(_, err) = &event {
            let calls = state.running.iter().chain(state.stopping.iter());
            if let Some((call_id, _)) =
                calls.into_iter().find(|(_, c)| c.actor.get_id() == cell.get_id())
            {
                let lifecycle = &state.args.session.lifecycle;
                lifecycle.failed(ActorKind::ToolCall, format!("tool_call:{call_id}"), err);
            }
        }
        state.stopping.retain(|_, call| call.actor.get_id() != cell.get_id());
        let orphan = state
            .running
            .iter()
            .find(|(_, call)| call.actor.get_id() == cell.get_id())
            .map(|(id, _)| id.clone());
        if let Some(call_id) = orphan {
            let error =
                ToolError::internal(format!("tool call actor ended before its call: {why}"));
            state.finish(&call_id, Err(error));
        }
        state.offer_places(&myself);
        Ok(())
    }
}

impl ToolsetState {
    /// Whether `call_id` is running, in the ToolCall actor `from`.
    fn runs(&self, call_id: &str, from: ractor::ActorId) -> bool {
        self.running.get(call_id).is_some_and(|call| call.actor.get_id() == from)
    }

    /// Ends a call `error` "drain timeout" (decision 7).
    fn abort(&mut self, call_id: &str) {
        let message = Some(text::DRAIN_TIMEOUT.to_string());
        self.end_early(call_id, ToolCallStatus::Error, message, Duration::ZERO);
    }

    /// Cancels a running call (decision 20): accepted at once, it ends `cancelled` now —
    /// whatever its body does later is dropped — and dispatch, if it still waits, gets the
    /// empty output that asks for no reply. The ToolCall winds down on its own (grace period
    /// for a cooperative body), so this mailbox never waits.
    fn cancel(&mut self, call_id: &str, drain: bool) -> Result<(), CancelError> {
        let Some(call) = self.running.get(call_id) else {
            return Err(CancelError::NotFound(call_id.to_string()));
        };
        let (cancellable, speech) = (call.cancellable, &call.speech);
        if !cancellable {
            return Err(CancelError::NotCancellable(call_id.to_string()));
        }
        if !drain && !speech.allows_interruptions() {
            return Err(CancelError::InterruptionsDisallowed(call_id.to_string()));
        }
        self.end_early(
            call_id,
            ToolCallStatus::Cancelled,
            None,
            self.args.session.options.cancel_grace,
        );
        Ok(())
    }

    /// Ends a running call now with `status`, before its body has: the terminal event is
    /// emitted at once, dispatch (if it still waits) gets the empty output that asks for no
    /// reply, and the ToolCall winds down by itself (after `grace` if its body is
    /// cooperative).
    fn end_early(
        &mut self,
        call_id: &str,
        status: ToolCallStatus,
        message: Option<String>,
        grace: Duration,
    ) {
        let Some(mut call) = self.running.remove(call_id) else { return };
        self.unjournaled.remove(call_id);
        let id = if call.updates > 0 { format!("{call_id}_final") } else { call_id.to_string() };
        self.args.session.emit(EventKind::ToolCallEnded {
            id,
            call_id: call_id.to_string(),
            status,
            message,
            cached: false,
        });
        if let Some(reply) = call.reply.take() {
            let _ = reply.send(self.silent_outcome());
        }
        let why = if status == ToolCallStatus::Cancelled { "cancelled" } else { "aborted" };
        let _ = call.actor.cast(ToolCallMsg::Cancel { grace, why });
        self.stopping.insert(call_id.to_string(), call);
    }

    /// Answers every call of step `step_id` still unanswered with "still in progress",
    /// asking for no reply (docs/decisions.md#interrupt-bound): they go on in the background.
    fn release(&mut self, step_id: &str) {
        let of_step = |call: &RunningCall| {
            call.reply.is_some()
                && call.call.id.strip_prefix(step_id).is_some_and(|rest| rest.starts_with('/'))
        };
        let calls: Vec<String> =
            self.running.iter().filter(|(_, c)| of_step(c)).map(|(id, _)| id.clone()).collect();
        for call_id in calls {
            self.answer_early(&call_id, |_| text::STILL_RUNNING.to_string(), false);
        }
    }

    /// The empty output that asks for no reply: what a call ended early gives dispatch.
    fn silent_outcome(&self) -> CallOutcome {
        CallOutcome {
            output: String::new(),
            is_error: false,
            reply_required: false,
            finished_at: self.args.session.clock.now(),
            provisional: false,
            handoff: None,
        }
    }

    fn error_outcome(&self, output: &str) -> CallOutcome {
        CallOutcome {
            output: output.to_string(),
            is_error: true,
            reply_required: true,
            finished_at: self.args.session.clock.now(),
            provisional: false,
            handoff: None,
        }
    }

    /// An attempt failed and the call runs again: the host hears of it, and the retry counts
    /// as a sign of life for the heartbeat (the deadline still counts from the call's start).
    fn retrying(&mut self, call_id: &str, attempt: u32, reason: String) {
        let Some(call) = self.running.get_mut(call_id) else { return };
        call.watch.beat();
        let call_id = call_id.to_string();
        self.args.session.emit(EventKind::ToolCallRetry { call_id, attempt, reason });
    }

    fn updated(&mut self, call_id: &str, index: u32, update: PostedUpdate) {
        let Some(call) = self.running.get_mut(call_id) else { return };
        let index = index + call.update_offset;
        call.updates = index + 1;
        call.watch.beat();
        let session = &self.args.session;
        let id = if index == 0 { call_id.to_string() } else { format!("{call_id}_update_{index}") };
        let event = session.event(EventKind::ToolCallUpdated {
            id: id.clone(),
            call_id: call_id.to_string(),
            message: update.message,
            silent: update.silent,
        });
        if index == 0 {
            session.report(event);
            // The first update answers the call for this turn; the body goes on.
            mark_non_blocking(&mut call.call.extra);
            if let Some(reply) = call.reply.take() {
                let _ = reply.send(CallOutcome {
                    output: update.output,
                    is_error: false,
                    reply_required: !update.silent,
                    finished_at: session.clock.now(),
                    provisional: true,
                    handoff: None,
                });
            }
            return;
        }
        let clock = &self.args.session.clock;
        let pair = Pair::new(clock, &call.call, &id, update.output, false, !update.silent);
        // The event, then the pair: one message to the Session.
        let (commit, pending) = self.pair_commit(pair, false);
        self.args.session.reports(vec![event, commit]);
        self.queue_reply(pending);
    }

    /// The commit that inserts a pair into the agent's context and the history, and the
    /// pending reply to queue once it is sent (if the pair asks for one).
    fn pair_commit(&self, pair: Pair, is_final: bool) -> (Report, Option<PendingReply>) {
        let pending = pair.output.reply_required.then(|| PendingReply {
            update_id: pair.output.call_id.clone(),
            agent: self.args.agent_id.clone(),
            output_item_id: pair.output.id.clone(),
            is_final,
        });
        let commit = Report::Commit {
            agent: self.args.agent_id.clone(),
            speech_id: None,
            items: vec![
                ChatItem::FunctionCall(pair.call),
                ChatItem::FunctionCallOutput(pair.output),
            ],
            awaits_reply: pending.as_ref().map(|p| p.update_id.clone()),
        };
        (commit, pending)
    }

    /// Queues a committed pair for a deferred reply (after its commit was sent, so the
    /// Session has it before the coalescer offers it).
    fn queue_reply(&self, pending: Option<PendingReply>) {
        if let Some(pending) = pending {
            self.args.session.enqueue_reply(pending);
        }
    }

    /// The body ended: the call ends with its result, and its ToolCall stops.
    fn finish(&mut self, call_id: &str, result: Result<ToolOutput, ToolError>) {
        if let Some(call) = self.conclude(call_id, result, None) {
            // Its result is in: unlinked first, so its stop costs no supervision message (its
            // `post_stop` still reports it stopped).
            let cell = call.actor.get_cell();
            if let Some(toolset) = cell.try_get_supervisor() {
                cell.unlink(toolset);
            }
            call.actor.stop(None);
        }
    }

    /// Ends a running call with `result`: its `tool_call_ended` (with `status`, else the one
    /// the output implies) and its output — to dispatch, or as the `_final` pair of a background
    /// call. Returns the call, no longer running, for its ToolCall to be stopped.
    fn conclude(
        &mut self,
        call_id: &str,
        result: Result<ToolOutput, ToolError>,
        status: Option<ToolCallStatus>,
    ) -> Option<Box<RunningCall>> {
        let call = self.running.get(call_id)?;
        // §6.2: after a first update the turn is over; an agent returned then cannot be
        // handed to (C-19).
        let result = match result {
            Ok(out) if call.updates > 0 && out.handoff.is_some() => {
                Err(ToolError::new("agent handoff after a progress update is not supported"))
            }
            other => other,
        };
        let original = &call.call;
        if let Err(e) = &result
            && e.kind() == ToolErrorKind::Internal
        {
            tracing::warn!(toolset = %self.args.id, %call_id, "tool failed: {}", e.message());
        }
        let background = call.updates > 0;
        let (implied, message) = match &result {
            Ok(out) => (ToolCallStatus::Done, out.text.clone()),
            Err(e) => (ToolCallStatus::Error, Some(e.message().to_string())),
        };
        let status = status.unwrap_or(implied);
        let cached = call.cached && status == ToolCallStatus::Done;
        if status == ToolCallStatus::Done
            && !call.cached
            && let (Some((key, window)), Ok(out)) = (&call.keys.memo, &result)
            && out.handoff.is_none()
        {
            let text = out.output_text().to_string();
            if self.args.session.durable {
                self.journal_remembered(key, *window, &text, out.reply_required, &message);
            }
            let remembered =
                queue::Remembered::new(*window, text, out.reply_required, message.clone());
            self.remembered.insert(key.clone(), remembered);
        }
        let ended_id = if background { format!("{call_id}_final") } else { call_id.to_string() };
        let ended = EventKind::ToolCallEnded {
            id: ended_id.clone(),
            call_id: call_id.to_string(),
            status,
            message,
            cached,
        };
        if background {
            // §6.2, after the first update: a value or an error becomes the `_final` pair;
            // nothing (unit, None, StopResponse) still leaves one, empty and asking for no
            // reply, so the context never says a finished task still runs (decision 23).
            let (text, is_error, reply) = match &result {
                Ok(out) => match &out.text {
                    Some(text) => (text.clone(), false, out.reply_required),
                    None => (String::new(), false, false),
                },
                Err(e) => (e.model_text().to_string(), true, true),
            };
            // The pair, then `tool_call_ended` (one message), then the queued reply: the end
            // always precedes the reply that carries it (decision 5).
            let clock = &self.args.session.clock;
            let pair = Pair::new(clock, original, &ended_id, text, is_error, reply);
            let (commit, pending) = self.pair_commit(pair, true);
            let session = &self.args.session;
            session.reports(vec![commit, session.event(ended)]);
            self.queue_reply(pending);
        } else {
            let outcome = match result {
                Ok(out) => CallOutcome {
                    output: out.output_text().to_string(),
                    is_error: false,
                    reply_required: out.reply_required,
                    finished_at: self.args.session.clock.now(),
                    provisional: false,
                    handoff: out.handoff,
                },
                Err(e) => self.error_outcome(e.model_text()),
            };
            self.args.session.emit(ended);
            if let Some(reply) = self.running.get_mut(call_id).and_then(|c| c.reply.take()) {
                let _ = reply.send(outcome);
            }
        }
        self.unjournaled.remove(call_id);
        self.running.remove(call_id)
    }

    /// This toolset and its calls, for `SessionHandle::inspect`.
    fn inspect(&self, myself: &ActorRef<ToolsetMsg>) -> ActorNode {
        let mut node = toolset_node(&self.args, myself.get_id());
        let calls = self.running.iter().map(|c| {
            let status = match c.1.stage {
                Stage::AwaitingApproval { .. } => NodeStatus::AwaitingApproval,
                Stage::Queued => NodeStatus::Queued,
                Stage::Screening { .. } | Stage::Running => NodeStatus::Running,
            };
            (c, status)
        });
        let stopping = self.stopping.iter().map(|c| (c, NodeStatus::Stopping));
        for ((call_id, call), status) in calls.chain(stopping) {
            let id = format!("tool_call:{call_id}");
            let mut child = ActorNode::new(ActorKind::ToolCall, id, status, &call.actor.get_cell());
            child.call_id = Some(call_id.clone());
            child.name = Some(call.call.name.clone());
            child.arguments = Some(call.call.arguments.clone());
            child.elapsed_ms = Some(call.started.elapsed().as_millis() as u64);
            // The body's own updates: a provisional answer while it waited is not one.
            child.updates = Some(call.updates.saturating_sub(call.update_offset));
            child.cancellable = Some(call.cancellable);
            node.children.push(child);
        }
        node
    }
}

/// Toolset `args`' node, without its calls: run by actor `actor_id`, or by none yet
/// (`ActorId::Local(0)`: an agent's own toolset before its first call, decision 81). Ready
/// to take calls either way, so `running`.
pub(crate) fn toolset_node(args: &ToolsetArgs, actor_id: ractor::ActorId) -> ActorNode {
    let id = format!("toolset:{}", args.id);
    let mut node = ActorNode::with_actor_id(ActorKind::Toolset, id, NodeStatus::Running, actor_id);
    node.scope = Some(match args.scope {
        Scope::Session => ToolsetScope::Session,
        Scope::Agent => ToolsetScope::Agent,
    });
    node.tools = Some(args.catalog.routed_to(&args.id));
    node
}
