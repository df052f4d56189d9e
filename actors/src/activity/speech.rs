//! One speech, run as a task the Activity owns: LLM steps, playout, tool dispatch, commits.
//!
//! The task keeps the Activity's mailbox free (an interrupt must get through while the LLM
//! streams or tools run). It talks to the Session through [`SessionLink`] and tells the
//! Activity when it is done. A reply is a loop of steps (`step.rs`): stream the LLM response,
//! playing text as it arrives; dispatch the tool calls once the response is complete (they run
//! while the text plays out); commit the assistant message; then (here) wait for every tool
//! output, emit `function_tools_executed`, commit calls and outputs, and run a tool-reply step
//! if any output asks for one.

use std::sync::Arc;

use colloquy_llm::{LlmRequest, RequestKind, ToolChoice};
use colloquy_model::{Agent, ChatContext, ErrorSource, EventKind};
use tokio_util::sync::CancellationToken;

use super::call_dispatch::{self, StepCalls};
use super::env::{SpeechEnd, SpeechEnv};
use super::lending::FloorLease;
use super::step::{self, Held, Played, StepId};
use crate::messages::{ActivityMsg, ChildMsg, Report, SessionLink, SpeechContent, SpeechJob};
use crate::support::speech_control::SpeechControl;
use crate::types::speech_sink::PlayoutDriver;

/// Runs one speech to its end.
pub(crate) async fn run(
    env: Arc<SpeechEnv>,
    job: SpeechJob,
    control: SpeechControl,
    lease: FloorLease,
) -> SpeechEnd {
    match job.content {
        SpeechContent::Say { text } => say(&env, &job.speech_id, &text, control.token()).await,
        SpeechContent::Reply { kind, extra_instructions, tool_choice } => {
            let first = FirstStep { kind, extra_instructions, tool_choice };
            reply(&env, &job.speech_id, first, &control, &lease).await
        }
    }
}

async fn say(
    env: &SpeechEnv,
    speech_id: &str,
    text: &str,
    interrupt: &CancellationToken,
) -> SpeechEnd {
    if interrupt.is_cancelled() {
        return SpeechEnd::new(true);
    }
    let started = env.session.clock.now();
    let mut held = Held::default();
    held.hold_speaking();
    // A host following the agent's text sees a `say` as one delta, its whole text.
    held.forward_text(env, speech_id, 1);
    held.push_text(text);
    if env.session.plugins.sink.is_some() {
        held.flush(&env.session); // the sink's playout takes time
    }
    let mut playout = PlayoutDriver::open(
        env.session.plugins.sink.as_ref(),
        speech_id,
        env.session.options.playout_timeout,
    );
    playout.push(text);
    let end = playout.finish(interrupt).await;
    let interrupted = end.interrupted;
    let id = env.session.clock.item_id();
    let commit = step::message_commit(env, speech_id, id, started, end);
    SpeechEnd { interrupted, tail: held.with(&env.session, commit) }
}

/// How the first LLM step of a reply is asked.
struct FirstStep {
    kind: RequestKind,
    extra_instructions: Option<String>,
    tool_choice: Option<ToolChoice>,
}

/// What a reply carries from one step to the next.
struct Between {
    /// The step about to run (1 = the first).
    step: u32,
    /// The last step's outputs were all first updates, or it chose a handoff: the next step
    /// is sent with `tool_choice` none (decision 15, C-92).
    only_progress: bool,
    /// The agent a step chose to hand off to, once the speech is done.
    handoff: Option<Arc<Agent>>,
    /// The floor was just taken back after waiting for tools; the Session hears it with the
    /// next step (or at once, if there is none).
    resumed: bool,
    /// The previous step's `function_tools_executed` and commit, when nothing waited since:
    /// they go with the next step's `BeginLlmStep`.
    carried: Vec<Report>,
}

impl Between {
    fn new() -> Self {
        Self { step: 1, only_progress: false, handoff: None, resumed: false, carried: Vec::new() }
    }

    /// Starts the next LLM step with the Session: what it carried goes first; the answer is
    /// the agent's context for the request (`None` once the session is gone).
    async fn begin(&mut self, env: &SpeechEnv, speech_id: &str) -> Option<Arc<ChatContext>> {
        let resumed = std::mem::take(&mut self.resumed);
        let reports = std::mem::take(&mut self.carried);
        env.session.begin_llm_step(&env.agent_id, speech_id, resumed, reports).await
    }

    /// The speech was interrupted between steps: what it carried still reaches the Session.
    fn abandon(mut self, env: &SpeechEnv, speech_id: &str) -> SpeechEnd {
        env.session.reports(std::mem::take(&mut self.carried));
        if self.resumed {
            let waiting = ChildMsg::SpeechWaiting { speech_id: speech_id.into(), waiting: false };
            let _ = env.session.actor.cast(waiting.into());
        }
        request_handoff(env, self.handoff.take());
        SpeechEnd::new(true)
    }

    /// The step's `tool_choice`: requests 1..=max_tool_steps+1 may call tools, later ones are
    /// sent with `none` (§4.1); so is a tool reply to nothing but first updates (decision 15).
    fn tool_choice(&self, env: &SpeechEnv, first: &FirstStep) -> Option<ToolChoice> {
        if env.session.clock.tool_budget_spent() {
            // The turn has made all its calls (docs/decisions.md#edges-tool-deadlines).
            env.announce_tool_budget();
            return Some(ToolChoice::None);
        }
        match self.step {
            1 => first.tool_choice.clone(),
            s if s > env.session.options.max_tool_steps + 1 || self.only_progress => {
                Some(ToolChoice::None)
            }
            _ => Some(ToolChoice::Auto),
        }
    }

    /// After a step's calls: the speech's end, or `None` to run a tool-reply step (with the floor
    /// taken back).
    async fn after_tools(
        &mut self,
        awaited: Awaited,
        env: &SpeechEnv,
        speech_id: &str,
        lease: &FloorLease,
    ) -> Option<SpeechEnd> {
        if self.handoff.is_none() {
            self.handoff = awaited.handoff;
        }
        if awaited.interrupted || !awaited.wants_reply {
            env.session.reports(awaited.reports);
            request_handoff(env, self.handoff.take());
            return Some(SpeechEnd::new(awaited.interrupted));
        }
        self.only_progress = self.handoff.is_some() || awaited.all_provisional;
        // Taken back at once unless another speech got the floor meanwhile; then the step's
        // reports go first and the speech asks for the floor.
        if awaited.released && !lease.reclaim() {
            env.session.reports(awaited.reports);
            if !regain_floor(env, speech_id).await {
                // As on every other way out: a handoff its tools chose still happens.
                request_handoff(env, self.handoff.take());
                return Some(SpeechEnd::new(true));
            }
        } else {
            self.carried = awaited.reports;
        }
        self.resumed = awaited.released;
        self.step += 1;
        None
    }
}

/// Runs a reply: LLM steps until one needs no tool reply, the speech is interrupted, or the
/// request fails.
async fn reply(
    env: &SpeechEnv,
    speech_id: &str,
    first: FirstStep,
    control: &SpeechControl,
    lease: &FloorLease,
) -> SpeechEnd {
    let interrupt = control.token();
    // The first request waits for the tools a source lists once started (an MCP server's);
    // boxed: only sessions with sources pay for the wait's future.
    if env.catalog.has_sources() {
        for why in Box::pin(env.catalog.wait_ready()).await {
            tracing::warn!(agent = %env.agent_id, "{why}");
            env.session.emit(EventKind::error(ErrorSource::Tool, why));
        }
    }
    let mut between = Between::new();
    let request_speech: Arc<str> = Arc::from(speech_id);
    loop {
        if interrupt.is_cancelled() {
            return between.abandon(env, speech_id);
        }
        let Some(items) = between.begin(env, speech_id).await else {
            return SpeechEnd::new(true);
        };
        let tool_choice = between.tool_choice(env, &first);
        let first_step = between.step == 1;
        let request = LlmRequest {
            kind: if first_step { first.kind } else { RequestKind::ToolReply },
            agent: Arc::clone(&env.agent_id),
            speech_id: Arc::clone(&request_speech),
            instructions: Arc::clone(&env.instructions),
            extra_instructions: if first_step { first.extra_instructions.clone() } else { None },
            items,
            tools: visible_tools(env, first.kind),
            tool_choice: tool_choice.clone(),
        };
        // The reply's message is stamped when its step is authorised, before any text exists.
        let authorised = env.session.clock.now();
        let step = StepId { speech_id, step: between.step, authorised };
        let streamed = step::stream(env, &step, request, interrupt).await;
        match step::play(env, speech_id, streamed, &tool_choice, control).await {
            Played::Failed { interrupted } => {
                // A handoff an earlier step chose still happens: the failed request changes
                // nothing the tools did.
                request_handoff(env, between.handoff.take());
                return SpeechEnd::new(interrupted);
            }
            Played::Last { interrupted, tail } => {
                request_handoff(env, between.handoff.take());
                return SpeechEnd { interrupted, tail };
            }
            Played::Calls { running, interrupted } => {
                // Decision 12: the first handoff chosen in the speech wins.
                let choose = between.handoff.is_none();
                let awaited =
                    await_tools(env, speech_id, running, interrupted, choose, lease, interrupt)
                        .await;
                if let Some(end) = between.after_tools(awaited, env, speech_id, lease).await {
                    return end;
                }
            }
        }
    }
}

/// A step's calls, once they have all answered.
struct Awaited {
    /// The `function_tools_executed` event and the commit of the calls and outputs.
    reports: Vec<Report>,
    /// The speech lent the floor while blocking tools ran.
    released: bool,
    interrupted: bool,
    wants_reply: bool,
    all_provisional: bool,
    handoff: Option<Arc<Agent>>,
}

/// Waits for the step's calls, lending the floor while blocking ones run (§10.1).
async fn await_tools(
    env: &SpeechEnv,
    speech_id: &str,
    running: StepCalls,
    interrupted_in_playout: bool,
    choose_handoff: bool,
    lease: &FloorLease,
    interrupt: &CancellationToken,
) -> Awaited {
    let released = running.executing();
    if released {
        // Blocking tools run: lend the floor so other speeches may speak meanwhile — before the
        // Session hears (the agent thinks, the speech waits: one message), so whatever it
        // starts because of it finds the floor lent. The Activity hears only if it wants the
        // floor now.
        lease.lend();
        let waiting = ChildMsg::SpeechWaiting { speech_id: speech_id.into(), waiting: true };
        let _ = env.session.actor.cast(waiting.into());
        env.wake_activity_if_waiting();
    }
    let bound = env.session.options.interrupt_timeout;
    let mut results = running.collect(interrupt, bound).await;
    let interrupted = interrupted_in_playout || interrupt.is_cancelled();
    let handoff = match choose_handoff {
        true => self::choose_handoff(&mut results, interrupted_in_playout),
        false => None,
    };
    let executed = env.session.event(EventKind::FunctionToolsExecuted {
        call_ids: results.iter().map(|r| r.call.call_id.clone()).collect(),
    });
    let wants_reply = results.iter().any(|r| r.output.reply_required);
    let all_provisional = results.iter().all(|r| r.provisional);
    // Interrupted during playout: results are kept but ask for no reply (§4.1).
    let items = call_dispatch::step_items(results, !interrupted_in_playout);
    let commit = SessionLink::speech_commit(&env.agent_id, speech_id, items);
    let reports = [Some(executed), commit].into_iter().flatten().collect();
    Awaited { reports, released, interrupted, wants_reply, all_provisional, handoff }
}

/// The tools of a request: all of them, except `ignore_on_enter` ones in an `on_enter` reply
/// (including its tool-reply steps, C-78).
fn visible_tools(env: &SpeechEnv, kind: RequestKind) -> Arc<[colloquy_model::ToolSchema]> {
    let all = env.catalog.visible_schemas();
    if kind != RequestKind::OnEnter {
        return all;
    }
    all.iter()
        .filter(|s| env.catalog.get(&s.name).is_none_or(|t| !t.flags().ignore_on_enter))
        .cloned()
        .collect()
}

/// Decision 12: the first agent returned in the model's call order wins; later ones get an
/// error output. A handoff chosen while the speech was interrupted during playout does not
/// happen (§4.1, C-50).
fn choose_handoff(
    results: &mut [call_dispatch::CallResult],
    interrupted: bool,
) -> Option<Arc<Agent>> {
    let mut order: Vec<usize> = (0..results.len()).collect();
    order.sort_by_key(|&i| results[i].index);
    let mut chosen = None;
    for i in order {
        let Some(agent) = results[i].handoff.take() else { continue };
        let output = &mut results[i].output;
        if interrupted {
            output.output = "the agent handoff was interrupted and did not happen".into();
            output.is_error = true;
            output.reply_required = false;
        } else if chosen.is_none() {
            chosen = Some(agent);
        } else {
            output.output = "a handoff to another agent was already chosen in this step".into();
            output.is_error = true;
            output.reply_required = true;
        }
    }
    chosen
}

/// Asks the Session to hand off once this speech is done.
fn request_handoff(env: &SpeechEnv, agent: Option<Arc<Agent>>) {
    if let Some(agent) = agent {
        let _ = env.session.actor.cast(ChildMsg::Handoff { agent }.into());
    }
}

/// Asks the Activity for the floor back; false if it is gone.
async fn regain_floor(env: &SpeechEnv, speech_id: &str) -> bool {
    let speech_id = speech_id.to_string();
    let granted =
        env.activity.call(|reply| ActivityMsg::FloorRequest { speech_id, reply }, None).await;
    matches!(granted, Ok(ractor::rpc::CallResult::Success(())))
}
