//! One speech, run as a task the Activity owns: LLM steps, playout, tool dispatch, commits.
//!
//! The task keeps the Activity's mailbox free (an interrupt must get through while the LLM
//! streams or tools run). It talks to the Session through [`SessionLink`] and tells the
//! Activity when it is done. A step: stream the LLM response, playing text as it arrives;
//! dispatch the tool calls once the response is complete (they run while the text plays out);
//! commit the assistant message; wait for every tool output; emit `function_tools_executed`;
//! commit calls and outputs; run a tool-reply step if any output asks for one.

use std::sync::Arc;
use std::time::Duration;

use colloquy_core::{
    Agent, AgentState, ChatItem, ErrorSource, EventKind, Message, Role, Timestamp,
};
use colloquy_llm::{
    FinishReason, Llm, LlmChunk, LlmError, LlmRequest, RequestKind, ToolChoice, Usage,
};
use futures_util::{FutureExt, StreamExt};
use ractor::ActorRef;
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

use super::dispatch::{self, StreamedCall};
use super::floor::{Attention, FloorLease};
use crate::catalog::ToolCatalog;
use crate::protocol::{
    ActivityMsg, ChildMsg, Report, SessionLink, SpeechContent, SpeechJob, ToolsetMsg,
};
use crate::speech_control::SpeechControl;
use crate::speech_sink::{PlayoutDriver, PlayoutEnd, SpeechSink};

/// What every speech of one Activity shares.
pub(crate) struct SpeechEnv {
    pub session: SessionLink,
    pub activity: ActorRef<ActivityMsg>,
    pub llm: Arc<dyn Llm>,
    pub sink: Option<Arc<dyn SpeechSink>>,
    pub agent_id: Arc<str>,
    pub instructions: Arc<str>,
    pub catalog: Arc<ToolCatalog>,
    /// Every toolset actor this agent's calls may go to, by toolset id.
    pub toolsets: BTreeMap<String, ActorRef<ToolsetMsg>>,
    pub max_tool_steps: u32,
    pub llm_timeout: Option<Duration>,
    pub playout_timeout: Option<Duration>,
    /// The Activity waits for a lent floor or a speech's end (see `floor.rs`).
    pub attention: Attention,
}

impl SpeechEnv {
    /// After a speech lent its floor or ended: tells the Activity only if it waits for
    /// something (`floor.rs`); otherwise it notices at its next message.
    pub fn wake_activity_if_waiting(&self) {
        if self.attention.get() {
            let _ = self.activity.cast(ActivityMsg::Wake);
        }
    }
}

/// How a speech ended.
pub(crate) struct SpeechEnd {
    pub interrupted: bool,
    /// Reports of the speech's last step not sent yet (its `speaking` state, if nothing
    /// suspended since, and its message): they go to the Session in one message with the
    /// speech's end.
    pub tail: Vec<Report>,
}

impl SpeechEnd {
    pub fn new(interrupted: bool) -> Self {
        SpeechEnd { interrupted, tail: Vec::new() }
    }
}

/// The `speaking` state of a step whose text started, held back while nothing suspends: text
/// that arrives all at once and plays without a sink reaches the Session with the step's
/// message, in one message. Sent on its own before anything could wait (a chunk not ready yet,
/// a sink's playout) or before the step dispatches calls, so it is never late and never
/// follows a call's events.
#[derive(Default)]
struct HeldSpeaking(bool);

impl HeldSpeaking {
    fn hold(&mut self) {
        self.0 = true;
    }

    fn is_held(&self) -> bool {
        self.0
    }

    fn flush(&mut self, session: &SessionLink) {
        if std::mem::take(&mut self.0) {
            session.report(Report::AgentState(AgentState::Speaking));
        }
    }

    /// The held state (if any) followed by `then`, in order; with room for the speech's end,
    /// which a last step's reports are sent with.
    fn with(mut self, then: Option<Report>) -> Vec<Report> {
        let mut reports = Vec::with_capacity(3);
        if std::mem::take(&mut self.0) {
            reports.push(Report::AgentState(AgentState::Speaking));
        }
        reports.extend(then);
        reports
    }
}

/// What the provider said about a response besides its content.
#[derive(Default)]
struct StepEnd {
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
}

impl StepEnd {
    /// One `x_llm_step_ended` event if the provider said anything; a truncated response is
    /// logged too, since its text or a call's arguments may be incomplete.
    fn report(self, env: &SpeechEnv, speech_id: &str) {
        if self.finish_reason.is_none() && self.usage.is_none() {
            return;
        }
        if let Some(reason) = self.finish_reason.as_ref().filter(|r| r.is_truncated()) {
            tracing::warn!(agent = %env.agent_id, %speech_id, ?reason, "the LLM response was cut short");
        }
        let StepEnd { finish_reason, usage } = self;
        let speech_id = speech_id.to_string();
        env.session.emit(EventKind::LlmStepEnded { speech_id, finish_reason, usage });
    }
}

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
    let mut speaking = HeldSpeaking::default();
    speaking.hold();
    if env.sink.is_some() {
        speaking.flush(&env.session); // the sink's playout takes time
    }
    let mut playout = PlayoutDriver::open(env.sink.as_ref(), speech_id, env.playout_timeout);
    playout.push(text);
    let end = playout.finish(interrupt).await;
    let interrupted = end.interrupted;
    let commit = message_commit(env, speech_id, started, end);
    SpeechEnd { interrupted, tail: speaking.with(commit) }
}

/// The text of one step as it plays.
struct StepText {
    playout: PlayoutDriver,
    started: Timestamp,
}

/// How the first LLM step of a reply is asked.
struct FirstStep {
    kind: RequestKind,
    extra_instructions: Option<String>,
    tool_choice: Option<ToolChoice>,
}

async fn reply(
    env: &SpeechEnv,
    speech_id: &str,
    first: FirstStep,
    control: &SpeechControl,
    lease: &FloorLease,
) -> SpeechEnd {
    let interrupt = control.token();
    let session = &env.session;
    let mut step: u32 = 1;
    let mut only_progress = false;
    let mut handoff: Option<Arc<Agent>> = None;
    // The floor was just taken back after waiting for tools; the Session hears it with the
    // next step (or at once, if there is none).
    let mut resumed = false;
    // The previous step's function_tools_executed and commit, when nothing waited since: they
    // go with the next step's `BeginLlmStep`.
    let mut carried: Vec<Report> = Vec::new();
    loop {
        if interrupt.is_cancelled() {
            session.reports(std::mem::take(&mut carried));
            if resumed {
                let waiting =
                    ChildMsg::SpeechWaiting { speech_id: speech_id.into(), waiting: false };
                let _ = session.actor.cast(waiting.into());
            }
            request_handoff(env, handoff.take());
            return SpeechEnd::new(true);
        }
        let resumed_speech = std::mem::take(&mut resumed).then_some(speech_id);
        let reports = std::mem::take(&mut carried);
        let Some(items) = session.begin_llm_step(&env.agent_id, resumed_speech, reports).await
        else {
            return SpeechEnd::new(true);
        };
        // Requests 1..=max_tool_steps+1 may call tools; later ones are sent with `none` (§4.1).
        // A tool reply to nothing but first updates is sent with `none` too (decision 15).
        let tool_choice = match step {
            1 => first.tool_choice.clone(),
            s if s > env.max_tool_steps + 1 || only_progress => Some(ToolChoice::None),
            _ => Some(ToolChoice::Auto),
        };
        let request = LlmRequest {
            kind: if step == 1 { first.kind } else { RequestKind::ToolReply },
            agent: env.agent_id.to_string(),
            speech_id: speech_id.to_string(),
            instructions: Arc::clone(&env.instructions),
            extra_instructions: if step == 1 { first.extra_instructions.clone() } else { None },
            items,
            tools: visible_tools(env, first.kind),
            tool_choice: tool_choice.clone(),
        };
        // The reply's message is stamped when its step is authorised, before any text exists
        // (§9.2 step 5): results landing while it is generated still sort after it.
        let authorised = session.clock.now();
        let mut stream = env.llm.chat(request);
        let mut text: Option<StepText> = None;
        let mut calls: BTreeMap<usize, StreamedCall> = BTreeMap::new();
        let mut stream_interrupted = false;
        let mut failure: Option<LlmError> = None;
        let mut ended = StepEnd::default();
        let mut speaking = HeldSpeaking::default();
        loop {
            if interrupt.is_cancelled() {
                stream_interrupted = true;
                break;
            }
            // A chunk that is there already is taken without waiting; before waiting, the
            // held `speaking` state goes out.
            let ready = match speaking.is_held() {
                true => stream.next().now_or_never(),
                false => None,
            };
            let chunk = match ready {
                Some(chunk) => Some(chunk),
                None => {
                    speaking.flush(session);
                    let next = async {
                        match env.llm_timeout {
                            Some(limit) => tokio::time::timeout(limit, stream.next()).await.ok(),
                            None => Some(stream.next().await),
                        }
                    };
                    tokio::select! {
                        biased;
                        _ = interrupt.cancelled() => { stream_interrupted = true; break }
                        chunk = next => chunk,
                    }
                }
            };
            let Some(chunk) = chunk else {
                failure = Some(LlmError::Timeout { waited: env.llm_timeout.unwrap_or_default() });
                break;
            };
            match chunk {
                None | Some(LlmChunk::End) => break,
                Some(LlmChunk::Text(delta)) if delta.is_empty() => {}
                Some(LlmChunk::Text(delta)) => {
                    let step_text = text.get_or_insert_with(|| {
                        speaking.hold();
                        StepText {
                            playout: PlayoutDriver::open(
                                env.sink.as_ref(),
                                speech_id,
                                env.playout_timeout,
                            ),
                            started: authorised,
                        }
                    });
                    step_text.playout.push(&delta);
                }
                Some(LlmChunk::ToolCall(delta)) => {
                    let call = calls.entry(delta.index).or_insert_with(|| StreamedCall {
                        streamed_at: session.clock.now(),
                        ..StreamedCall::default()
                    });
                    if let Some(id) = delta.id {
                        call.call_id = id;
                    }
                    if let Some(name) = delta.name {
                        call.name = name;
                    }
                    call.arguments.push_str(&delta.arguments);
                }
                Some(LlmChunk::Usage(usage)) => ended.usage = Some(usage),
                Some(LlmChunk::Finish(reason)) => ended.finish_reason = Some(reason),
                Some(LlmChunk::Error(error)) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        // Dropping the stream cancels the request.
        drop(stream);
        ended.report(env, speech_id);

        // Tools may wait for this step's text to finish playing (`ctx.wait_for_playout()`);
        // the guard releases them however the step ends.
        let playout_done = CancellationToken::new();
        let _release = playout_done.clone().drop_guard();
        // Calls of a response that was cut short or failed are never run.
        let calls: Vec<StreamedCall> = calls.into_values().collect();
        if !calls.is_empty() || failure.is_some() || env.sink.is_some() {
            // Calls report their own events, a failure its error, a sink plays for a while:
            // the agent speaks before any of it.
            speaking.flush(session);
        }
        let running = match (stream_interrupted || failure.is_some(), &tool_choice) {
            (true, _) => None,
            (false, _) if calls.is_empty() => None,
            (false, Some(ToolChoice::None)) => {
                dispatch::drop_calls(env, calls);
                None
            }
            (false, _) => Some(dispatch::dispatch(env, speech_id, calls, &playout_done, control)),
        };

        let mut interrupted_in_playout = stream_interrupted;
        // A step without calls is the speech's last: its message goes with the speech's end.
        let last_step = failure.is_none() && running.is_none();
        let mut tail = Vec::new();
        if let Some(StepText { playout, started }) = text {
            let mut end = if stream_interrupted {
                playout.interrupt().await
            } else {
                playout.finish(interrupt).await
            };
            interrupted_in_playout |= end.interrupted;
            // A stream that broke after text flowed: the text received stays, marked as cut
            // (the speech itself was not interrupted).
            end.interrupted |= failure.is_some();
            let commit = message_commit(env, speech_id, started, end);
            let reports = std::mem::take(&mut speaking).with(commit);
            match last_step {
                true => tail = reports,
                false => session.reports(reports),
            }
        }
        playout_done.cancel();
        if let Some(failure) = failure {
            tracing::warn!(agent = %env.agent_id, %speech_id, "LLM request failed: {failure}");
            session.emit(EventKind::Error {
                source: ErrorSource::Llm,
                message: failure.to_string(),
                llm_error: Some(failure.kind()),
            });
            return SpeechEnd::new(interrupted_in_playout);
        }
        let Some(running) = running else {
            request_handoff(env, handoff.take());
            return SpeechEnd { interrupted: interrupted_in_playout, tail };
        };
        let released = running.executing();
        if released {
            // Blocking tools run: lend the floor so other speeches may speak meanwhile
            // (§10.1) — before the Session hears (the agent thinks, the speech waits: one
            // message), so whatever it starts because of it finds the floor lent. The
            // Activity hears only if it wants the floor now.
            lease.lend();
            let waiting = ChildMsg::SpeechWaiting { speech_id: speech_id.into(), waiting: true };
            let _ = session.actor.cast(waiting.into());
            env.wake_activity_if_waiting();
        }
        let mut results = running.collect().await;
        let interrupted = interrupted_in_playout || interrupt.is_cancelled();
        if handoff.is_none() {
            handoff = choose_handoff(&mut results, interrupted_in_playout);
        }
        let executed = session.event(EventKind::FunctionToolsExecuted {
            call_ids: results.iter().map(|r| r.call.call_id.clone()).collect(),
        });
        let wants_reply = results.iter().any(|r| r.output.reply_required);
        let all_provisional = results.iter().all(|r| r.provisional);
        // Interrupted during playout: results are kept but ask for no reply (§4.1).
        let items = dispatch::step_items(results, !interrupted_in_playout);
        let commit = SessionLink::speech_commit(&env.agent_id, speech_id, items);
        let reports = [Some(executed), commit].into_iter().flatten().collect();
        if interrupted || !wants_reply {
            session.reports(reports);
            request_handoff(env, handoff.take());
            return SpeechEnd::new(interrupted);
        }
        // A reply to a step that chose a handoff is spoken by this agent with `none` (C-92).
        only_progress = handoff.is_some() || all_provisional;
        // Taken back at once unless another speech got the floor meanwhile; then the step's
        // reports go first and the speech asks for the floor.
        if released && !lease.reclaim() {
            session.reports(reports);
            if !regain_floor(env, speech_id).await {
                return SpeechEnd::new(true);
            }
        } else {
            carried = reports;
        }
        resumed = released;
        step += 1;
    }
}

/// The tools of a request: all of them, except `ignore_on_enter` ones in an `on_enter` reply
/// (including its tool-reply steps, C-78).
fn visible_tools(env: &SpeechEnv, kind: RequestKind) -> Arc<[colloquy_core::ToolSchema]> {
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
fn choose_handoff(results: &mut [dispatch::CallResult], interrupted: bool) -> Option<Arc<Agent>> {
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

/// The commit of a step's message (`None` without text); a sink error is reported at once.
fn message_commit(
    env: &SpeechEnv,
    speech_id: &str,
    started: Timestamp,
    end: PlayoutEnd,
) -> Option<Report> {
    if let Some(message) = end.sink_error {
        env.session.emit(EventKind::error(ErrorSource::Sink, message));
    }
    if end.text.is_empty() {
        return None;
    }
    let message = Message {
        id: env.session.clock.item_id(),
        role: Role::Assistant,
        text: end.text,
        interrupted: end.interrupted,
        created_at: started,
    };
    SessionLink::speech_commit(&env.agent_id, speech_id, vec![ChatItem::Message(message)])
}
