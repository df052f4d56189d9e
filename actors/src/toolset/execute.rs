//! Starting a call: which tool runs it (its mock, if set), the duplicate policy (§6,
//! `duplicate::decide`), then registering it with the Session and spawning its ToolCall.
//! Admission is synchronous, so the handler's future holds only `start`'s
//! (docs/decisions.md#boxed-futures).

use colloquy_model::duplicate::{
    RunningDuplicate, Verdict, decide, running_call_json, take_confirmation,
};
use colloquy_model::templates::{Placeholders, defaults};
use colloquy_model::{
    EventKind, FunctionCall, FunctionTool, OnDuplicate, RefusalReason, ToolCallStatus, ToolOutput,
    text,
};
use ractor::{Actor, ActorRef, RpcReplyPort};
use serde_json::{Map, Value};

use super::{RunningCall, Stage, ToolsetState};
use crate::catalog::Scope;
use crate::messages::{CallOutcome, ChildMsg, ExecuteCall, ToolsetMsg, mark_non_blocking};
use crate::tool_call::{ToolCallActor, ToolCallArgs};

/// A call that may run (its tool with a mock's body, if set) and its keys.
pub(super) struct Admitted {
    pub exec: ExecuteCall,
    pub keys: CallKeys,
    pub reply: RpcReplyPort<CallOutcome>,
    /// The remembered result it gets once the before-call hook lets it go on.
    pub recalled: Option<ToolOutput>,
}

/// What admission derived from a call's arguments, to find its equals.
pub(super) struct CallKeys {
    /// The duplicate key (`None` for `allow` tools).
    pub duplicate: Option<String>,
    /// An idempotent tool's result key and window: a `done` result is remembered.
    pub memo: Option<(String, std::time::Duration)>,
}

impl ToolsetState {
    /// Admits a call: the tool that runs it (dispatch resolved it) and its duplicate key; or
    /// answers it at once (this toolset expired, the call id runs already, or the duplicate
    /// policy answers it, §6). Synchronous, so the handler's future holds only
    /// [`start`](Self::start)'s (docs/decisions.md#boxed-futures).
    pub(super) fn admit(
        &mut self,
        myself: &ActorRef<ToolsetMsg>,
        exec: ExecuteCall,
        reply: RpcReplyPort<CallOutcome>,
    ) -> Option<Admitted> {
        let mut exec = exec;
        let admitted = self.resolve(&mut exec).and_then(|()| match exec.resumed {
            // A call run again after a resume is the same call going on, no duplicate.
            Some(_) => Ok(exec.tool.duplicate_key(&exec.arguments)),
            None => self.screen_duplicates(&exec.tool, &exec.call.call_id, &mut exec.arguments),
        });
        match admitted {
            Ok(key) => {
                // The duplicate policy first, then the memory
                // (docs/decisions.md#concurrency-limits).
                let memo = exec
                    .tool
                    .remembers_for()
                    .map(|window| (exec.tool.result_key(&exec.arguments), window));
                let keys = CallKeys { duplicate: key, memo };
                let admitted = Admitted { exec, keys, reply, recalled: None };
                // A call run again after a resume goes on: nothing answers it from memory.
                match admitted.exec.resumed {
                    Some(_) => Some(admitted),
                    None => self.recall(myself, admitted),
                }
            }
            // Not registered: no lifecycle events (§6 step 2).
            Err(answer) => {
                let _ = reply.send(answer);
                None
            }
        }
    }

    /// Gives `exec` its mock's body, if one is set; or the answer when it cannot run.
    fn resolve(&self, exec: &mut ExecuteCall) -> Result<(), CallOutcome> {
        if self.expired {
            // The drain that ends this toolset ran out of time: nothing new starts.
            return Err(self.error_outcome(text::DRAIN_TIMEOUT));
        }
        let call = &exec.call;
        if self.running.contains_key(&call.call_id) {
            // The session hands out call ids (decision 24): a reused one is a runtime bug.
            let (call_id, name) = (&call.call_id, &call.name);
            tracing::warn!(toolset = %self.args.id, %call_id, %name, "call is already running");
            return Err(self.error_outcome(text::INTERNAL_ERROR));
        }
        if let Some(mock) = self.mocks.get(exec.tool.name()) {
            exec.tool = exec.tool.with_body_of(mock);
        }
        Ok(())
    }

    /// Applies the tool's duplicate policy: the call's duplicate key if it may run, else the
    /// answer it gets, reported as `x_tool_call_refused` (the call never starts, so no
    /// lifecycle event says so). Checked and registered in one handler, so two calls of one
    /// response can never both pass a reject check (§6 step 4).
    fn screen_duplicates(
        &mut self,
        tool: &FunctionTool,
        call_id: &str,
        arguments: &mut Map<String, Value>,
    ) -> Result<Option<String>, CallOutcome> {
        let (policy, _) = tool.duplicate_policy();
        let confirmed = match policy {
            OnDuplicate::Confirm => take_confirmation(tool.name(), arguments)
                .map_err(|e| self.error_outcome(&e.to_string()))?,
            _ => false,
        };
        let key = tool.duplicate_key(arguments);
        // Waiting calls (for approval, for a place) have started: they are running here.
        let running: Vec<RunningDuplicate> = match &key {
            Some(key) => self
                .running
                .iter()
                .filter(|(_, call)| call.keys.duplicate.as_ref() == Some(key))
                .map(|(id, call)| RunningDuplicate { call_id: id, cancellable: call.cancellable })
                .collect(),
            None => Vec::new(),
        };
        let cancellable = running.iter().any(|r| r.cancellable);
        let duplicates = ids(&running);
        let (answer, reason) = match decide(tool.name(), policy, confirmed, &running) {
            Verdict::Run => return Ok(key),
            Verdict::Reject => (
                self.duplicate_text(tool, &duplicates, false, cancellable),
                RefusalReason::Rejected,
            ),
            Verdict::AskToConfirm => (
                self.duplicate_text(tool, &duplicates, true, cancellable),
                RefusalReason::ConfirmationNeeded,
            ),
            Verdict::CannotReplace(text) => (self.error_outcome(&text), RefusalReason::NotReplaced),
            Verdict::Replace(to_cancel) => {
                let failures: Vec<String> = to_cancel
                    .iter()
                    .filter_map(|id| self.cancel(id, false).err().map(|e| e.to_string()))
                    .collect();
                if failures.is_empty() {
                    return Ok(key);
                }
                let text =
                    format!("Failed to cancel duplicate tool calls: {}", failures.join("\n"));
                (self.error_outcome(&text), RefusalReason::NotReplaced)
            }
        };
        self.args.session.emit(EventKind::ToolCallRefused {
            call_id: call_id.to_string(),
            name: tool.name().to_string(),
            reason,
            duplicates,
        });
        Err(answer)
    }

    /// Registers a call with the Session: its `tool_call_started`.
    pub(super) fn register(
        &self,
        myself: &ActorRef<ToolsetMsg>,
        call: &FunctionCall,
        cancellable: bool,
        resumed: bool,
    ) {
        let registered = ChildMsg::CallRegistered {
            call: std::sync::Arc::new(call.clone()),
            toolset: myself.clone(),
            cancellable,
            agent_scoped: self.args.scope == Scope::Agent,
            resumed,
        };
        let _ = self.args.session.actor.cast(registered.into());
    }

    /// Registers an admitted call with the Session and spawns its ToolCall. A call that may
    /// wait (for approval, for a place under a cap) gets its body behind a gate; without a
    /// before-call hook it is screened at once, with one when the hook is done
    /// (docs/decisions.md#tool-control-order).
    pub(super) async fn start(&mut self, myself: ActorRef<ToolsetMsg>, admitted: Admitted) {
        let Admitted { mut exec, keys, reply, recalled } = admitted;
        // Run again after a resume: answered already, so it goes on as a background call.
        let (answered, resumed) = (exec.resumed.unwrap_or(0), exec.resumed.is_some());
        let reply = match exec.resumed {
            Some(_) => {
                mark_non_blocking(&mut exec.call.extra);
                None
            }
            None => Some(reply),
        };
        let tool = exec.tool;
        let session = &self.args.session;
        let cancellable = tool.flags().cancellable;
        self.register(&myself, &exec.call, cancellable, exec.resumed.is_some());
        let call_id = exec.call.call_id.clone();
        let limits = tool.limits();
        let cached = recalled.is_some();
        // A remembered result does not run: it takes no place and asks nobody.
        let caps = if cached { Vec::new() } else { tool.concurrency_limits() };
        let hooked = session.plugins.before_call.is_some();
        // With a hook every call is screened first, so its heartbeat counts from its body; in
        // a durable session every body waits for its start to be on disk.
        let durable = session.durable && !cached;
        let may_wait =
            !cached && (hooked || durable || tool.may_need_approval() || !caps.is_empty());
        let needs_approval = may_wait && !hooked && tool.needs_approval(&exec.arguments);
        let (gate, gated) = match may_wait {
            true => {
                let (gate, gated) = tokio::sync::oneshot::channel();
                (Some(gate), Some(gated))
            }
            false => (None, None),
        };
        let args = ToolCallArgs {
            tool,
            call: exec.call.clone(),
            arguments: exec.arguments,
            speech_id: exec.speech_id,
            playout_done: exec.playout_done,
            speech: exec.speech.clone(),
            session: self.args.session.clone(),
            agent_id: self.args.agent_id.to_string(),
            update_template: self.args.templates.update.clone(),
            toolset: myself.clone(),
            span: exec.span,
            gate: gated,
            recalled,
        };
        // Boxed: the spawn future is large, and inlined it would size every toolset's actor
        // task (one future per actor) for it. Linked by hand once started: a relink sends no
        // `ActorStarted` (docs/ractor-notes.md §1.5), a supervision message this toolset would only
        // drop; the call's failure or end still reaches it. Nothing in the actor's start can
        // fail before the link (its `post_start` only spawns the body's task).
        match Box::pin(Actor::spawn(None, ToolCallActor, args)).await {
            Ok((actor, _)) => {
                actor.get_cell().link(myself.get_cell());
                let now = tokio::time::Instant::now();
                let call = Box::new(RunningCall {
                    actor,
                    keys,
                    cancellable,
                    speech: exec.speech,
                    reply,
                    call: exec.call,
                    updates: answered,
                    started: now,
                    watch: super::watch::Watch::none(now),
                    // A call that may wait holds no place until it is let through; a
                    // remembered one waits for the hook only.
                    stage: match may_wait || cached {
                        true => Stage::Screening { drained: None },
                        false => Stage::Running,
                    },
                    gate,
                    update_offset: answered,
                    limits: caps,
                    cached,
                    // Run again after a resume: its let-through is written ahead of its body,
                    // so a resume knows whether this run began (docs/durability.md#waiting).
                    held: durable && resumed,
                });
                self.running.insert(call_id.clone(), call);
                if durable {
                    self.unjournaled.insert(call_id.clone());
                }
                self.watch(&myself, &call_id, limits);
                if may_wait && !hooked {
                    self.screened(&myself, &call_id, needs_approval, None);
                }
            }
            Err(e) => {
                self.args.session.emit(EventKind::ToolCallEnded {
                    id: call_id.clone(),
                    call_id,
                    status: ToolCallStatus::Error,
                    message: Some(format!("could not start the tool call: {e}")),
                    cached: false,
                });
                if let Some(reply) = reply {
                    let _ = reply.send(self.error_outcome(text::INTERNAL_ERROR));
                }
            }
        }
    }

    /// The reject or confirm answer (a normal, non-error output): the running duplicates as
    /// one compact JSON object per line (decision 18).
    /// `{cancel_hint}` tells the model how to cancel only when a duplicate can be
    /// (`lk_agents_cancel_task` is offered only then, decision 69).
    pub(super) fn duplicate_text(
        &self,
        tool: &FunctionTool,
        duplicates: &[String],
        confirm: bool,
        cancellable: bool,
    ) -> CallOutcome {
        let calls: Vec<Value> = duplicates
            .iter()
            .filter_map(|id| self.running.get(id).map(|c| &c.call))
            .map(|c| running_call_json(&c.call_id, &c.name, &c.arguments))
            .collect();
        let text = calls.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
        let mut values = Placeholders::new();
        values.insert("function_name", tool.name().to_string());
        values.insert("fnc_calls_json", Value::Array(calls).to_string());
        values.insert("fnc_calls_text", text);
        let hint = match (confirm, cancellable) {
            (false, true) => defaults::REJECT_CANCEL_HINT,
            (false, false) => "",
            (true, true) => defaults::CONFIRM_CANCEL_HINT,
            (true, false) => defaults::CONFIRM_ONLY_HINT,
        };
        values.insert("cancel_hint", hint.to_string());
        let template = if confirm {
            &self.args.templates.duplicate_confirm
        } else {
            &self.args.templates.duplicate_reject
        };
        match template.render(&values) {
            Ok(output) => CallOutcome {
                output,
                is_error: false,
                reply_required: true,
                finished_at: self.args.session.clock.now(),
                provisional: false,
                handoff: None,
            },
            Err(e) => self.error_outcome(&e.to_string()),
        }
    }
}

/// The call ids of running duplicates.
fn ids(running: &[RunningDuplicate]) -> Vec<String> {
    running.iter().map(|r| r.call_id.to_string()).collect()
}
