//! Dispatch of one LLM step's tool calls (§4): drop them under
//! `tool_choice = none`, answer unknown names and unparseable arguments at once, send the rest
//! to the Toolset, and collect outputs in the order they become available.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use colloquy_model::{
    Agent, ChatItem, EventKind, FunctionCall, FunctionCallOutput, FunctionTool, Timestamp,
    parse_arguments, text,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use ractor::ActorRef;
use serde_json::Map;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::env::SpeechEnv;
use crate::messages::{CallOutcome, ExecuteCall, RerunCall, ToolsetMsg, mark_non_blocking};
use crate::support::clock::SessionClock;
use crate::support::speech_control::SpeechControl;

/// A tool call as assembled from the stream.
#[derive(Debug, Default)]
pub(crate) struct StreamedCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    /// When the call first appeared in the stream.
    pub streamed_at: Timestamp,
}

/// A call together with its output.
pub(crate) struct CallResult {
    pub call: FunctionCall,
    pub output: FunctionCallOutput,
    /// The output is the call's first update; the call runs on in the background.
    pub provisional: bool,
    /// The agent the tool returned, if any.
    pub handoff: Option<Arc<Agent>>,
    /// Position of the call in the model's response.
    pub index: usize,
}

type Pending = Pin<Box<dyn Future<Output = CallResult> + Send>>;

/// The calls of one step, running.
pub(crate) struct StepCalls {
    pending: FuturesUnordered<Pending>,
    /// The step's item id: its calls' item ids start with it.
    step_id: String,
    /// The toolsets its calls went to (the others were answered at once), each once.
    toolsets: Vec<ActorRef<ToolsetMsg>>,
}

impl StepCalls {
    /// True when some call runs in a toolset.
    pub(super) fn executing(&self) -> bool {
        !self.toolsets.is_empty()
    }

    /// Waits for every output (tool bodies are never cancelled by an interruption), in the
    /// order they become available; once `interrupt` fired, for `bound` at most: the calls
    /// still running are then released to the background (docs/decisions.md#interrupt-bound).
    pub(super) async fn collect(
        mut self,
        interrupt: &CancellationToken,
        bound: Option<Duration>,
    ) -> Vec<CallResult> {
        let mut done = Vec::with_capacity(self.pending.len());
        let expired = async {
            let Some(bound) = bound else { return std::future::pending().await };
            interrupt.cancelled().await;
            tokio::time::sleep(bound).await;
        };
        tokio::pin!(expired);
        let mut released = false;
        loop {
            let next = tokio::select! {
                biased;
                next = self.pending.next() => next,
                () = &mut expired, if !released => {
                    released = true;
                    self.release();
                    continue;
                }
            };
            match next {
                Some(result) => done.push(result),
                None => return done,
            }
        }
    }

    /// Asks the toolsets to answer now the step's calls they have not answered: those go on in
    /// the background, and the answer comes at once (or their result, if it was on its way).
    fn release(&self) {
        for toolset in &self.toolsets {
            let _ = toolset.cast(ToolsetMsg::Release { step_id: self.step_id.clone() });
        }
    }
}

/// The LLM step whose calls are dispatched.
pub(crate) struct Step<'a> {
    /// The step's item id: its calls' item ids are `<id>/fnc_<index>`.
    pub id: &'a str,
    pub speech_id: &'a str,
    /// The provider cut the response: arguments that do not parse were cut, not garbled.
    pub truncated: bool,
}

/// Dispatches the calls of a step in the model's order, each under the id the session gives it
/// (decision 24).
pub(crate) fn dispatch(
    env: &SpeechEnv,
    step: &Step<'_>,
    calls: Vec<StreamedCall>,
    playout_done: &CancellationToken,
    control: &SpeechControl,
) -> StepCalls {
    let mut calls = calls;
    let clock = &env.session.clock;
    clock.claim_call_ids(calls.iter_mut().map(|c| &mut c.call_id));
    // The turn's budget (docs/decisions.md#edges-tool-deadlines): calls past it are answered.
    let allowed = clock.claim_tool_calls(calls.len());
    env.announce_tool_budget();
    let pending = FuturesUnordered::new();
    let mut toolsets: Vec<ActorRef<ToolsetMsg>> = Vec::new();
    for (index, streamed) in calls.into_iter().enumerate() {
        let item_id = format!("{}/fnc_{index}", step.id);
        if index >= allowed {
            let output = text::tool_budget_exhausted(clock.tool_budget_limit());
            pending.push(refuse(env, (index, item_id), streamed, output));
            continue;
        }
        let (future, executes) =
            dispatch_one(env, step, (index, item_id), streamed, playout_done, control);
        if let Some(toolset) = executes
            && !toolsets.iter().any(|t| t.get_id() == toolset.get_id())
        {
            toolsets.push(toolset);
        }
        pending.push(future);
    }
    StepCalls { pending, step_id: step.id.to_string(), toolsets }
}

/// Drops the calls of a step requested with `tool_choice = none` (decision 10).
pub(crate) fn drop_calls(env: &SpeechEnv, mut calls: Vec<StreamedCall>) {
    env.session.clock.claim_call_ids(calls.iter_mut().map(|c| &mut c.call_id));
    for call in calls {
        tracing::warn!(
            agent = %env.agent_id,
            call_id = %call.call_id,
            name = %call.name,
            "dropping a tool call the model emitted under tool_choice = none"
        );
        env.session.emit(EventKind::ToolCallDropped {
            call_id: call.call_id,
            name: call.name,
            reason: "tool_choice is none".into(),
        });
    }
}

fn dispatch_one(
    env: &SpeechEnv,
    step: &Step<'_>,
    (index, item_id): (usize, String),
    streamed: StreamedCall,
    playout_done: &CancellationToken,
    control: &SpeechControl,
) -> (Pending, Option<ActorRef<ToolsetMsg>>) {
    let clock = &env.session.clock;
    let Some((tool, toolset)) = env.catalog.resolve(&streamed.name) else {
        let visible = env.catalog.visible_schemas();
        let names: Vec<&str> = visible.iter().map(|s| s.name.as_str()).collect();
        let output = text::unknown_function(&streamed.name, &names);
        return (refuse(env, (index, item_id), streamed, output), None);
    };
    let parsed = match parse_arguments(&streamed.name, &streamed.arguments) {
        Ok(parsed) => parsed,
        Err(_) if step.truncated => {
            let output = text::call_cut_off(&streamed.name);
            return (refuse(env, (index, item_id), streamed, output), None);
        }
        Err(e) => return (refuse(env, (index, item_id), streamed, e.to_string()), None),
    };
    let speech_id = step.speech_id;
    let StreamedCall { call_id, name, .. } = streamed;
    let call = FunctionCall {
        id: item_id,
        call_id,
        name,
        arguments: parsed.canonical,
        extra: Map::new(),
        created_at: clock.now(),
    };
    let exec = ExecuteCall {
        tool,
        call: call.clone(),
        arguments: parsed.value,
        speech_id: speech_id.into(),
        playout_done: playout_done.clone(),
        speech: control.clone(),
        span: call_span(env, &call, speech_id),
        resumed: None,
    };
    let (tx, rx) = oneshot::channel::<CallOutcome>();
    // Routed by name to the toolset that runs the tool (§4 step 7).
    let toolset = env.toolsets.get(&toolset);
    if let Some(toolset) = &toolset {
        let _ = toolset.cast(ToolsetMsg::Execute(Box::new(exec), tx.into()));
    }
    (outcome(call, rx, env.session.clock.clone(), index), toolset)
}

/// Runs again the calls a resume found in doubt (docs/durability.md#on-interrupted), as the
/// model made them, in the background: the resume answered them already, so nothing waits
/// for their outcomes; each result comes as its `_final` pair. A tool no longer there is
/// logged.
pub(crate) async fn rerun(env: &SpeechEnv, calls: Vec<RerunCall>) {
    for call in calls {
        let routed = env.catalog.routed(&call.call.name).map(|(t, id)| (t.clone(), id.to_owned()));
        let routed = match routed {
            Some((tool, id)) => env.started_toolset(&id).await.map(|toolset| (tool, toolset)),
            None => None,
        };
        rerun_one(env, call, routed);
    }
}

fn rerun_one(
    env: &SpeechEnv,
    rerun: RerunCall,
    routed: Option<(FunctionTool, ActorRef<ToolsetMsg>)>,
) {
    let RerunCall { call, ask, updates } = rerun;
    // The catalog the Session chose the call's policy from: the tool is there.
    let Some((tool, toolset)) = routed else {
        let (call_id, name) = (&call.call_id, &call.name);
        tracing::warn!(agent = %env.agent_id, %call_id, %name, "no tool to run a call again");
        return;
    };
    let arguments = match parse_arguments(&call.name, &call.arguments) {
        Ok(parsed) => parsed.value,
        Err(_) => Map::new(), // stored canonical: they parsed the first time
    };
    let speech_id = "resume";
    let playout_done = CancellationToken::new();
    playout_done.cancel(); // no speech plays for it
    let exec = ExecuteCall {
        tool: if ask { tool.requires_approval() } else { tool },
        span: call_span(env, &call, speech_id),
        call,
        arguments,
        speech_id: speech_id.into(),
        playout_done,
        speech: SpeechControl::new(true),
        resumed: Some(updates),
    };
    let (tx, _answered) = oneshot::channel::<CallOutcome>();
    let _ = toolset.cast(ToolsetMsg::Execute(Box::new(exec), tx.into()));
}

/// A call's `tracing` span (a child of the current one: its speech's); its body runs in it.
fn call_span(env: &SpeechEnv, call: &FunctionCall, speech_id: &str) -> tracing::Span {
    tracing::info_span!(
        "tool_call",
        session_id = %env.session.id,
        call_id = %call.call_id,
        name = %call.name,
        speech_id = %speech_id,
    )
}

/// A call answered at once with an error `output`, never reaching a toolset (an unknown name,
/// unparseable arguments, a spent budget): no lifecycle events, and the call keeps its
/// stream-time stamp and its text as sent (decision 9).
fn refuse(
    env: &SpeechEnv,
    (index, item_id): (usize, String),
    streamed: StreamedCall,
    output: String,
) -> Pending {
    let clock = &env.session.clock;
    let StreamedCall { call_id, name, arguments, streamed_at } = streamed;
    let call = FunctionCall {
        id: item_id,
        call_id,
        name,
        arguments,
        extra: Map::new(),
        created_at: streamed_at,
    };
    let output = error_output(clock.item_id(), &call, output, clock.now());
    Box::pin(std::future::ready(CallResult {
        call,
        output,
        provisional: false,
        handoff: None,
        index,
    }))
}

/// The call's result once its toolset answers (an internal error if it never does).
fn outcome(
    mut call: FunctionCall,
    answer: oneshot::Receiver<CallOutcome>,
    clock: SessionClock,
    index: usize,
) -> Pending {
    Box::pin(async move {
        let outcome = answer.await.unwrap_or_else(|_| CallOutcome {
            // The toolset went away without answering (it failed or the session is closing).
            output: text::INTERNAL_ERROR.into(),
            is_error: true,
            reply_required: true,
            finished_at: clock.now(),
            provisional: false,
            handoff: None,
        });
        if outcome.provisional {
            mark_non_blocking(&mut call.extra);
        }
        let output = FunctionCallOutput {
            id: clock.item_id(),
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: outcome.output,
            is_error: outcome.is_error,
            reply_required: outcome.reply_required,
            created_at: outcome.finished_at,
        };
        CallResult {
            call,
            output,
            provisional: outcome.provisional,
            handoff: outcome.handoff,
            index,
        }
    })
}

fn error_output(
    id: String,
    call: &FunctionCall,
    output: String,
    at: Timestamp,
) -> FunctionCallOutput {
    FunctionCallOutput {
        id,
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        output,
        is_error: true,
        reply_required: true,
        created_at: at,
    }
}

/// The items a finished step commits: every call, then every output (inserted by timestamp).
pub(crate) fn step_items(results: Vec<CallResult>, keep_reply: bool) -> Vec<ChatItem> {
    let mut items = Vec::with_capacity(results.len() * 2);
    let mut outputs = Vec::with_capacity(results.len());
    for CallResult { call, mut output, .. } in results {
        items.push(ChatItem::FunctionCall(call));
        output.reply_required &= keep_reply;
        outputs.push(ChatItem::FunctionCallOutput(output));
    }
    items.append(&mut outputs);
    items
}
