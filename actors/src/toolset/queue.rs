//! Concurrency caps and remembered results (docs/decisions.md#concurrency-limits,
//! #tool-control-order). A call holds a place under its caps (`max_concurrent` on its tool or
//! a toolset) only while its body may run: one that waits for the hook or for approval holds
//! none. One that finds its caps full waits here in the order it got there: it has started
//! (`tool_call_started`, its ToolCall spawned with its body behind the gate), so cancels,
//! drains and handoffs reach it as any running call, and dispatch is answered provisionally so
//! it holds no reply. An `idempotent` tool's results that ended `done` are remembered by
//! duplicate key for their window; a later call with the same key gets one without running.
//! Tools with neither cost an empty `Vec` per call.

use std::time::Duration;

use colloquy_model::{ConcurrencyLimit, EventKind, Template, ToolCallStatus, ToolOutput, text};
use ractor::ActorRef;
use tokio::time::Instant;

use super::execute::Admitted;
use super::{Stage, ToolsetState};
use crate::messages::{CallOutcome, ChildMsg, ToolsetMsg, mark_non_blocking};

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

/// The results remembered before a resume that are still within their window, counted on
/// from now (docs/durability.md#on-interrupted).
pub(super) fn resumed_memory(
    seeds: &std::collections::BTreeMap<String, colloquy_store::RememberedResult>,
) -> std::collections::BTreeMap<String, Remembered> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    seeds
        .iter()
        .filter(|(_, r)| r.until_unix_ms > now)
        .map(|(key, r)| {
            let left = Duration::from_millis(r.until_unix_ms - now);
            let remembered =
                Remembered::new(left, r.output.clone(), r.reply_required, r.message.clone());
            (key.clone(), remembered)
        })
        .collect()
}

impl ToolsetState {
    /// Journals a result remembered for `window`, so that a resume remembers it too.
    pub(super) fn journal_remembered(
        &self,
        key: &str,
        window: Duration,
        output: &str,
        reply_required: bool,
        message: &Option<String>,
    ) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let until = now.saturating_add(window.as_millis() as u64);
        let result =
            colloquy_store::RememberedResult::new(output, reply_required, message.clone(), until);
        let remembered =
            ChildMsg::ResultRemembered { key: key.to_string(), result: Box::new(result) };
        let _ = self.args.session.actor.cast(remembered.into());
    }

    /// Whether a call under `limits` must wait: some cap already has as many calls whose body
    /// may run. Calls that ended but whose body still winds down (`stopping`) no longer count.
    pub(super) fn must_wait(&self, limits: &[ConcurrencyLimit]) -> bool {
        limits.iter().any(|limit| {
            let running = self
                .running
                .values()
                .filter(|call| matches!(call.stage, Stage::Running))
                .filter(|call| call.limits.iter().any(|l| l.group == limit.group))
                .count();
            running >= limit.max
        })
    }

    /// `call_id` may run once it has a place: it runs now, or waits in line for one (answered
    /// provisionally, so it holds no reply) — behind any call already waiting under one of its
    /// caps, though a place freed for that one is not granted yet.
    pub(super) fn seek_place(&mut self, myself: &ActorRef<ToolsetMsg>, call_id: &str) {
        let Some(call) = self.running.get(call_id) else { return };
        let shares_cap = |other: &super::RunningCall| {
            matches!(other.stage, Stage::Queued)
                && other.limits.iter().any(|o| call.limits.iter().any(|l| l.group == o.group))
        };
        let behind =
            self.places.iter().any(|id| self.running.get(id).is_some_and(|c| shares_cap(c)));
        if !behind && !self.must_wait(&call.limits) {
            return self.open_gate(myself, call_id);
        }
        let queued = self.args.templates.queued.clone();
        self.answer_provisionally(call_id, &queued);
        if let Some(call) = self.running.get_mut(call_id) {
            call.stage = Stage::Queued;
            self.places.push_back(call_id.to_string());
        }
        self.hold(call_id);
    }

    /// `call_id` waits (for approval, for a place) before its body: in a durable session the
    /// journal says so, so that a resume finds it had not started (docs/durability.md#waiting).
    pub(super) fn hold(&mut self, call_id: &str) {
        let Some(call) = self.running.get_mut(call_id) else { return };
        if !self.args.session.durable {
            return;
        }
        // Held from the start when run again after a resume; its wait is journaled all the same.
        call.held = true;
        let waiting = ChildMsg::CallWaiting { call_id: call_id.to_string() };
        let _ = self.args.session.actor.cast(waiting.into());
    }

    /// Lets `call_id`'s body start: it holds its place from now, and its heartbeat counts
    /// from now — in a durable session, from when its start is on disk, if that is later.
    fn open_gate(&mut self, myself: &ActorRef<ToolsetMsg>, call_id: &str) {
        let Some(call) = self.running.get_mut(call_id) else { return };
        call.stage = Stage::Running;
        if call.held {
            // Its let-through is written ahead of its body, as its start was.
            self.unjournaled.insert(call_id.to_string());
            let through = ChildMsg::CallLetThrough { call_id: call_id.to_string() };
            let _ = self.args.session.actor.cast(through.into());
            return;
        }
        if !self.unjournaled.contains(call_id) {
            self.start_body(myself, call_id);
        }
    }

    /// `call_id`'s start (or, for a call that waited, its let-through) is on disk: its body
    /// starts now if it was let through already. A call that waited heeds only its
    /// let-through: its start's answer may arrive after the gate opened.
    pub(super) fn journaled(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        call_id: &str,
        let_through: bool,
    ) {
        if !let_through && self.running.get(call_id).is_some_and(|c| c.held) {
            return;
        }
        let let_through = self.unjournaled.remove(call_id)
            && self.running.get(call_id).is_some_and(|c| matches!(c.stage, Stage::Running));
        if let_through {
            self.start_body(myself, call_id);
        }
    }

    /// Opens `call_id`'s gate; its heartbeat counts from now.
    fn start_body(&mut self, myself: &ActorRef<ToolsetMsg>, call_id: &str) {
        let Some(call) = self.running.get_mut(call_id) else { return };
        if let Some(gate) = call.gate.take() {
            let _ = gate.send(());
        }
        call.watch.beat();
        super::watch::arm(myself, call_id, call);
    }

    /// Asks this mailbox to grant freed places, once what is already in it was handled: a
    /// drain's cancels, sent together, then reach every call before a queued one would start.
    pub(super) fn offer_places(&mut self, myself: &ActorRef<ToolsetMsg>) {
        if self.places.is_empty() || self.grant_pending {
            return;
        }
        self.grant_pending = myself.cast(ToolsetMsg::GrantPlaces).is_ok();
    }

    /// Starts every waiting call that now fits under its caps, oldest first; a call held back
    /// by a full cap does not hold back a later call that cap does not cover.
    pub(super) fn grant_places(&mut self, myself: &ActorRef<ToolsetMsg>) {
        let mut i = 0;
        while i < self.places.len() {
            let call = self.running.get(&self.places[i]);
            match call.filter(|c| matches!(c.stage, Stage::Queued)) {
                // Ended while it waited.
                None => drop(self.places.remove(i)),
                Some(call) if self.must_wait(&call.limits) => i += 1,
                Some(_) => {
                    let Some(call_id) = self.places.remove(i) else { break };
                    self.open_gate(myself, &call_id);
                }
            }
        }
    }

    /// Answers dispatch for `call_id` with `template`'s text, if it still waits (see
    /// [`answer_early`](Self::answer_early)).
    pub(super) fn answer_provisionally(&mut self, call_id: &str, template: &Template) {
        let render = |name: &str| {
            let values = [("function_name", name), ("call_id", call_id)];
            template.render_with(&values).unwrap_or_else(|e| e.to_string())
        };
        self.answer_early(call_id, render, true);
    }

    /// Answers dispatch for `call_id` with `output(name)`, if it still waits: the call goes on
    /// in the background and its outcome comes as its `_final` pair; its body's first update
    /// becomes `_update_1`.
    pub(super) fn answer_early(
        &mut self,
        call_id: &str,
        output: impl FnOnce(&str) -> String,
        reply_required: bool,
    ) {
        let session = &self.args.session;
        let Some(call) = self.running.get_mut(call_id) else { return };
        let Some(reply) = call.reply.take() else { return };
        mark_non_blocking(&mut call.call.extra);
        call.updates = 1;
        call.update_offset = 1;
        let _ = reply.send(CallOutcome {
            output: output(&call.call.name),
            is_error: false,
            reply_required,
            finished_at: session.clock.now(),
            provisional: true,
            handoff: None,
        });
    }

    /// Answers a call from memory if its tool is idempotent and a call with the same key
    /// ended `done` within the window: it starts and ends at once, marked `cached`.
    /// With a before-call hook, the call runs its ToolCall for the hook to see it, and is
    /// answered with the remembered result if the hook lets it go on (decision 70).
    pub(super) fn recall(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        mut admitted: Admitted,
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
        if self.args.session.plugins.before_call.is_some() {
            let reply_required = remembered.reply_required;
            admitted.recalled =
                Some(ToolOutput { text: Some(output), reply_required, handoff: None });
            return Some(admitted);
        }
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
        let resumed = admitted.exec.resumed.is_some();
        self.register(myself, call, admitted.exec.tool.flags().cancellable, resumed);
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
