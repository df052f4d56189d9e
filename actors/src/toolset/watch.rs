//! Deadlines and heartbeats (docs/decisions.md#edges-tool-deadlines): the Toolset, as its
//! calls' supervisor, ends a call `timed_out` when it runs past its deadline or goes without an
//! update past its heartbeat. One timer per limited call, at the earlier of the two; when it
//! fires the Toolset checks the call against the clock and re-arms it if an update moved the
//! heartbeat on. Updates never move the deadline. A call with no limits costs nothing here.
//! The deadline counts from admission, or from the approval of a call that waited for one; it
//! never fires while a person is asked. The heartbeat counts from the body's start: a call
//! waiting for the hook, approval or a place has no body to show life.

use colloquy_model::{CallLimits, ToolCallStatus, ToolError, text};
use ractor::ActorRef;
use tokio::time::Instant;

use super::{RunningCall, Stage, ToolsetState};
use crate::messages::{ToolCallMsg, ToolsetMsg};
use crate::support::task::OwnedTask;

/// A running call's limits and when it last showed life.
pub(super) struct Watch {
    limits: CallLimits,
    /// Admission, or the approval (the wait for a person is not the tool's time).
    since: Instant,
    last_beat: Instant,
    _timer: Option<OwnedTask>,
}

impl Watch {
    /// No limits: never fires.
    pub(super) fn none(started: Instant) -> Self {
        Watch { limits: CallLimits::default(), since: started, last_beat: started, _timer: None }
    }

    /// The body reported (an update), or may start: the heartbeat counts from now.
    pub(super) fn beat(&mut self) {
        self.last_beat = Instant::now();
    }

    /// The call was approved: the deadline counts from now.
    pub(super) fn restart(&mut self) {
        self.since = Instant::now();
        self.last_beat = self.since;
    }
}

/// `from + limit`; `None` past the clock's range (a limit such as `Duration::MAX` never fires).
fn due(from: Instant, limit: Option<std::time::Duration>) -> Option<Instant> {
    limit.and_then(|limit| from.checked_add(limit))
}

/// Why a call timed out, if it has at `now`.
fn expired(call: &RunningCall, now: Instant) -> Option<String> {
    let watch = &call.watch;
    if matches!(call.stage, Stage::AwaitingApproval { .. }) {
        return None;
    }
    if let (Some(deadline), Some(at)) =
        (watch.limits.deadline, due(watch.since, watch.limits.deadline))
        && now >= at
    {
        return Some(text::tool_timed_out(&call.call.name, deadline));
    }
    match (watch.limits.heartbeat, heartbeat_due(call)) {
        (Some(heartbeat), Some(at)) if now >= at => {
            Some(text::tool_heartbeat_missed(&call.call.name, heartbeat))
        }
        _ => None,
    }
}

/// When the heartbeat is due, if it counts now (the body may run).
fn heartbeat_due(call: &RunningCall) -> Option<Instant> {
    match call.stage {
        Stage::Running => due(call.watch.last_beat, call.watch.limits.heartbeat),
        _ => None,
    }
}

/// When the call's watch must next look, if it has limits that can fire.
fn next_check(call: &RunningCall) -> Option<Instant> {
    let watch = &call.watch;
    if matches!(call.stage, Stage::AwaitingApproval { .. }) {
        return None;
    }
    let deadline = due(watch.since, watch.limits.deadline);
    let heartbeat = heartbeat_due(call);
    match (deadline, heartbeat) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl ToolsetState {
    /// Sets a new call's limits (its tool's, else its toolsets', else the session's) and arms
    /// its timer (it fires only for what counts at the call's stage).
    pub(super) fn watch(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        limits: CallLimits,
    ) {
        let limits = limits.or(self.args.session.options.call_limits());
        if limits.is_unbounded() {
            return;
        }
        if let Some(call) = self.running.get_mut(call_id) {
            call.watch.limits = limits;
            arm(myself, call_id, call);
        }
    }

    /// The timer of `call_id` fired: end the call if it has timed out, else look again later.
    pub(super) fn check_watch(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        from: ractor::ActorId,
    ) {
        if !self.runs(call_id, from) {
            return; // ended meanwhile
        }
        let Some(call) = self.running.get_mut(call_id) else { return };
        match expired(call, Instant::now()) {
            Some(why) => self.time_out(call_id, why),
            None => arm(myself, call_id, call),
        }
    }

    /// Ends a call `timed_out` now: the model reads `why` as an error output (a background
    /// call's `_final` pair), and the body gets the cooperative cancel signal and the grace
    /// period, then is aborted — cancellable or not.
    fn time_out(&mut self, call_id: &str, why: String) {
        tracing::warn!(toolset = %self.args.id, %call_id, "{why}");
        let result = Err(ToolError::new(why));
        let Some(call) = self.conclude(call_id, result, Some(ToolCallStatus::TimedOut)) else {
            return;
        };
        let grace = self.args.session.options.cancel_grace;
        let _ = call.actor.cast(ToolCallMsg::Cancel { grace, why: "timed out" });
        self.stopping.insert(call_id.to_string(), call);
    }
}

/// Arms `call`'s timer for its next check.
pub(super) fn arm(myself: &ActorRef<ToolsetMsg>, call_id: &str, call: &mut RunningCall) {
    let Some(at) = next_check(call) else { return };
    let (toolset, call_id, from) = (myself.clone(), call_id.to_string(), call.actor.get_id());
    call.watch._timer = Some(OwnedTask::spawn(async move {
        tokio::time::sleep_until(at).await;
        let _ = toolset.cast(ToolsetMsg::Watch { call_id, from });
    }));
}
