//! Concurrency caps and remembered results (docs/decisions.md#concurrency-limits). A call over
//! one of its caps (`max_concurrent` on its tool or a toolset) waits here in arrival order: it
//! has started (`tool_call_started`), so the Session counts it as running for cancels, drains
//! and handoffs, but its ToolCall is not spawned until a place frees. Its deadline counts from
//! admission. An `idempotent` tool's results that ended `done` are remembered by duplicate key
//! for their window; a later call with the same key gets one without running. Tools with
//! neither cost an empty `Vec` per call.

use std::time::Duration;

use colloquy_core::{ConcurrencyLimit, EventKind, FunctionCall, ToolCallStatus, text};
use ractor::ActorRef;
use tokio::time::Instant;

use super::ToolsetState;
use super::execute::Admitted;
use crate::protocol::{CallOutcome, ToolsetMsg};
use crate::support::task::OwnedTask;

/// A call waiting for a place under its caps.
pub(super) struct QueuedCall {
    pub admitted: Admitted,
    /// Its caps (never empty).
    pub limits: Vec<ConcurrencyLimit>,
    pub cancellable: bool,
    /// Admission: its deadline and its elapsed time count from here.
    pub at: Instant,
    /// Its deadline, if it has one (the timer below fires then).
    pub deadline: Option<Duration>,
    _timer: Option<OwnedTask>,
}

impl QueuedCall {
    /// The call's item.
    pub(super) fn call(&self) -> &FunctionCall {
        &self.admitted.exec.call
    }
}

/// A result an idempotent tool's call ended `done` with.
pub(super) struct Remembered {
    at: Instant,
    window: Duration,
    output: String,
    reply_required: bool,
    message: Option<String>,
}

impl Remembered {
    pub(super) fn new(
        window: Duration,
        output: String,
        reply_required: bool,
        message: Option<String>,
    ) -> Self {
        Remembered { at: Instant::now(), window, output, reply_required, message }
    }
}

impl ToolsetState {
    /// Whether a call under `limits` must wait: some cap already has as many calls running.
    /// Calls that ended but whose body still winds down (`stopping`) no longer count.
    pub(super) fn must_wait(&self, limits: &[ConcurrencyLimit]) -> bool {
        limits.iter().any(|limit| {
            let running = self
                .running
                .values()
                .filter(|call| call.limits.iter().any(|l| l.group == limit.group))
                .count();
            running >= limit.max
        })
    }

    /// Puts an admitted call in the queue: it starts now (registered with the Session), and
    /// its deadline timer runs while it waits.
    pub(super) fn enqueue(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        admitted: Admitted,
        limits: Vec<ConcurrencyLimit>,
    ) {
        let cancellable = admitted.exec.tool.flags().cancellable;
        self.register(myself, &admitted.exec.call, cancellable);
        let at = Instant::now();
        let deadline =
            admitted.exec.tool.limits().or(self.args.session.options.call_limits()).deadline;
        let timer = deadline.and_then(|d| at.checked_add(d)).map(|due| {
            let (toolset, call_id) = (myself.clone(), admitted.exec.call.call_id.clone());
            // `from` is the toolset itself: the call has no ToolCall actor yet.
            let from = myself.get_id();
            OwnedTask::spawn(async move {
                tokio::time::sleep_until(due).await;
                let _ = toolset.cast(ToolsetMsg::Watch { call_id, from });
            })
        });
        let queued = QueuedCall { admitted, limits, cancellable, at, deadline, _timer: timer };
        self.queued.push_back(Box::new(queued));
    }

    /// Starts every queued call that now fits under its caps, in arrival order; a call held
    /// back by a full cap does not hold back a later call that cap does not cover.
    pub(super) async fn start_queued(&mut self, myself: &ActorRef<ToolsetMsg>) {
        let mut i = 0;
        while i < self.queued.len() {
            if self.must_wait(&self.queued[i].limits) {
                i += 1;
                continue;
            }
            let Some(queued) = self.queued.remove(i) else { break };
            let QueuedCall { admitted, at, .. } = *queued;
            self.start(myself.clone(), admitted, Some(at)).await;
        }
    }

    /// The position of a queued call.
    pub(super) fn queued_index(&self, call_id: &str) -> Option<usize> {
        self.queued.iter().position(|q| q.call().call_id == call_id)
    }

    /// Ends a queued call now (it never ran): its `tool_call_ended` with `status`, and
    /// `outcome` to dispatch. False if it is not queued.
    pub(super) fn end_queued(
        &mut self,
        call_id: &str,
        status: ToolCallStatus,
        message: Option<String>,
        outcome: CallOutcome,
    ) -> bool {
        let Some(queued) = self.queued_index(call_id).and_then(|i| self.queued.remove(i)) else {
            return false;
        };
        self.args.session.emit(EventKind::ToolCallEnded {
            id: call_id.to_string(),
            call_id: call_id.to_string(),
            status,
            message,
            cached: false,
        });
        let _ = queued.admitted.reply.send(outcome);
        true
    }

    /// A queued call's deadline timer fired: it ends `timed_out` without having run.
    pub(super) fn time_out_queued(&mut self, call_id: &str) {
        let Some(queued) = self.queued_index(call_id).map(|i| &self.queued[i]) else { return };
        let Some(deadline) = queued.deadline else { return };
        if queued.at.checked_add(deadline).is_none_or(|due| Instant::now() < due) {
            return;
        }
        let why = text::tool_timed_out(&queued.call().name, deadline);
        tracing::warn!(toolset = %self.args.id, %call_id, "{why} (queued)");
        let outcome = self.error_outcome(&why);
        self.end_queued(call_id, ToolCallStatus::TimedOut, Some(why), outcome);
    }

    /// Answers a call from memory if its tool is idempotent and a call with the same key
    /// ended `done` within the window: it starts and ends at once, marked `cached`.
    pub(super) fn recall(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        admitted: Admitted,
    ) -> Option<Admitted> {
        let Some((key, _)) = &admitted.keys.memo else { return Some(admitted) };
        let fresh = self
            .remembered
            .get(key)
            .is_some_and(|r| r.at.checked_add(r.window).is_some_and(|end| Instant::now() < end));
        if !fresh {
            self.remembered.remove(key);
            return Some(admitted);
        }
        let remembered = self.remembered.get(key)?;
        let tool = &admitted.exec.tool;
        let output = match tool.notes_remembered() {
            true => {
                text::remembered_result(&remembered.output, tool.name(), remembered.at.elapsed())
            }
            false => remembered.output.clone(),
        };
        let outcome = CallOutcome {
            output,
            is_error: false,
            reply_required: remembered.reply_required,
            finished_at: self.args.session.clock.now(),
            provisional: false,
            handoff: None,
        };
        let message = remembered.message.clone();
        let call = &admitted.exec.call;
        self.register(myself, call, admitted.exec.tool.flags().cancellable);
        self.args.session.emit(EventKind::ToolCallEnded {
            id: call.call_id.clone(),
            call_id: call.call_id.clone(),
            status: ToolCallStatus::Done,
            message,
            cached: true,
        });
        let _ = admitted.reply.send(outcome);
        None
    }
}
