//! One LLM step of a reply: stream the response (playing text as it arrives), then play the
//! rest out while the step's tool calls are dispatched, and commit the step's message.

use std::collections::BTreeMap;

use colloquy_llm::{FinishReason, LlmChunk, LlmError, LlmErrorKind, LlmRequest, ToolChoice, Usage};
use colloquy_model::{AgentState, ChatItem, ErrorSource, EventKind, Message, Role, Timestamp};
use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::call_dispatch::{self, StepCalls, StreamedCall};
use super::env::SpeechEnv;
use crate::messages::{Report, SessionLink};
use crate::support::speech_control::SpeechControl;
use crate::types::speech_sink::{PlayoutDriver, PlayoutEnd};

/// What a step holds back while nothing suspends: its `speaking` state and, when a subscriber
/// asked for the agent's text, the text that arrived since the last `x_agent_text`. Text that
/// arrives all at once and plays without a sink reaches the Session with the step's message,
/// in one message. Sent on its own before anything could wait (a chunk not ready yet, a sink's
/// playout) or before the step dispatches calls, so it is never late and never follows a call's
/// events; the state always goes before the text.
#[derive(Default)]
pub(super) struct Held {
    speaking: bool,
    /// `None` unless the step forwards its text (decided at its first text).
    text: Option<HeldText>,
}

/// A step's text not sent yet as `x_agent_text`.
struct HeldText {
    speech_id: String,
    step: u32,
    delta: String,
}

impl Held {
    pub(super) fn hold_speaking(&mut self) {
        self.speaking = true;
    }

    /// Forwards this step's text as `x_agent_text` events if a subscriber asked for it.
    pub(super) fn forward_text(&mut self, env: &SpeechEnv, speech_id: &str, step: u32) {
        if env.session.text_wanted.get() {
            let speech_id = speech_id.to_string();
            self.text = Some(HeldText { speech_id, step, delta: String::new() });
        }
    }

    /// Holds `delta` for the next `x_agent_text` (nothing unless forwarding).
    pub(super) fn push_text(&mut self, delta: &str) {
        if let Some(text) = &mut self.text {
            text.delta.push_str(delta);
        }
    }

    fn has_text(&self) -> bool {
        self.text.as_ref().is_some_and(|t| !t.delta.is_empty())
    }

    fn is_held(&self) -> bool {
        self.speaking || self.has_text()
    }

    /// The held state, then the held text; with room for `extra` more (nothing is allocated
    /// when there is nothing to hold or add: most flushes find nothing).
    fn take(&mut self, session: &SessionLink, extra: usize) -> Vec<Report> {
        let held = usize::from(self.speaking) + usize::from(self.has_text());
        let mut reports = Vec::with_capacity(held + extra);
        if std::mem::take(&mut self.speaking) {
            reports.push(Report::AgentState(AgentState::Speaking));
        }
        if let Some(text) = self.text.as_mut().filter(|t| !t.delta.is_empty()) {
            let (speech_id, step) = (text.speech_id.clone(), text.step);
            let delta = std::mem::take(&mut text.delta);
            reports.push(session.event(EventKind::AgentText { speech_id, step, delta }));
        }
        reports
    }

    pub(super) fn flush(&mut self, session: &SessionLink) {
        session.reports(self.take(session, 0));
    }

    /// What is held followed by `then`, in order; with room for the speech's end, which a
    /// last step's reports are sent with.
    pub(super) fn with(mut self, session: &SessionLink, then: Option<Report>) -> Vec<Report> {
        let mut reports = self.take(session, usize::from(then.is_some()) + 1);
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
    /// Whether the provider said anything, so the step ends with an event.
    fn will_report(&self) -> bool {
        self.finish_reason.is_some() || self.usage.is_some()
    }

    /// One `x_llm_step_ended` event if the provider said anything; a truncated response is
    /// logged too, since its text or a call's arguments may be incomplete.
    fn report(self, env: &SpeechEnv, speech_id: &str) {
        if !self.will_report() {
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

/// The text of one step as it plays.
struct StepText {
    playout: PlayoutDriver,
    started: Timestamp,
}

/// What one LLM response produced.
pub(super) struct Streamed {
    text: Option<StepText>,
    /// In the order of their index in the response.
    calls: BTreeMap<usize, StreamedCall>,
    /// The speech was interrupted while the response streamed.
    interrupted: bool,
    failure: Option<LlmError>,
    held: Held,
    ended: StepEnd,
    /// The provider cut the response (`length`, a filter): a call's arguments may be partial.
    truncated: bool,
}

impl Streamed {
    /// Adds one chunk; false once the response is over (ended or failed).
    fn apply(&mut self, chunk: LlmChunk, env: &SpeechEnv, step: &StepId<'_>) -> bool {
        match chunk {
            LlmChunk::End => return false,
            LlmChunk::Text(delta) if delta.is_empty() => {}
            LlmChunk::Text(delta) => {
                let held = &mut self.held;
                let text = self.text.get_or_insert_with(|| {
                    held.hold_speaking();
                    held.forward_text(env, step.speech_id, step.step);
                    let playout = PlayoutDriver::open(
                        env.session.plugins.sink.as_ref(),
                        step.speech_id,
                        env.session.options.playout_timeout,
                    );
                    StepText { playout, started: step.authorised }
                });
                text.playout.push(&delta);
                held.push_text(&delta);
            }
            LlmChunk::ToolCall(delta) => {
                let call = self.calls.entry(delta.index).or_insert_with(|| StreamedCall {
                    streamed_at: env.session.clock.now(),
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
            LlmChunk::Usage(usage) => self.ended.usage = Some(usage),
            LlmChunk::Finish(reason) => self.ended.finish_reason = Some(reason),
            LlmChunk::Error(error) => {
                self.failure = Some(error);
                return false;
            }
            // A kind of chunk newer than this runtime carries nothing it acts on.
            _ => {}
        }
        true
    }
}

/// Which step of which speech a response belongs to.
pub(super) struct StepId<'a> {
    pub speech_id: &'a str,
    /// 1 = the speech's first LLM step.
    pub step: u32,
    /// When the step was authorised: it stamps the step's message (§9.2 step 5), so results
    /// landing while it is generated still sort after it.
    pub authorised: Timestamp,
}

/// Streams one response to `request`, fitted to the session's context window, playing its
/// text as it arrives (and sending it as `x_agent_text` if a subscriber asked for it). A
/// request the provider refuses as too long before anything arrived is sent once more,
/// trimmed (docs/providers.md#a-context-that-fits).
pub(super) async fn stream(
    env: &SpeechEnv,
    step: &StepId<'_>,
    request: LlmRequest,
    interrupt: &CancellationToken,
) -> Streamed {
    let speech_id = step.speech_id;
    let context = &env.session.options.context;
    // Fitting and the retry are boxed: a session without a window, whose requests fit, keeps
    // a small step future (docs/decisions.md#boxed-futures).
    let request = match context.max_tokens() {
        Some(_) => Box::pin(context.fit(request)).await,
        None => request,
    };
    // Kept for one retry, trimmed, if the provider refuses the request as too long.
    let mut retry = Some(request.clone());
    let mut stream = env.session.plugins.llm.chat(request);
    let mut out = Streamed {
        text: None,
        calls: BTreeMap::new(),
        interrupted: false,
        failure: None,
        held: Held::default(),
        ended: StepEnd::default(),
        truncated: false,
    };
    loop {
        if interrupt.is_cancelled() {
            out.interrupted = true;
            break;
        }
        // A chunk that is there already is taken without waiting; before waiting, the held
        // `speaking` state and text go out (so a burst of chunks is one text delta).
        let ready = match out.held.is_held() {
            true => stream.next().now_or_never(),
            false => None,
        };
        let chunk = match ready {
            Some(chunk) => Some(chunk),
            None => {
                out.held.flush(&env.session);
                let next = async {
                    match env.session.options.llm_timeout {
                        Some(limit) => tokio::time::timeout(limit, stream.next()).await.ok(),
                        None => Some(stream.next().await),
                    }
                };
                tokio::select! {
                    biased;
                    () = interrupt.cancelled() => { out.interrupted = true; break }
                    chunk = next => chunk,
                }
            }
        };
        let Some(chunk) = chunk else {
            out.failure = Some(LlmError::Timeout {
                waited: env.session.options.llm_timeout.unwrap_or_default(),
            });
            break;
        };
        if let Some(LlmChunk::Error(error)) = &chunk
            && error.kind() == LlmErrorKind::ContextLength
            && out.text.is_none()
            && out.calls.is_empty()
            && let Some(sent) = retry.take()
        {
            let refit = Box::pin(async {
                let smaller = context.refit(&sent, error).await;
                smaller.map(|smaller| (sent.items.len(), smaller))
            });
            let smaller = tokio::select! {
                biased;
                () = interrupt.cancelled() => { out.interrupted = true; break }
                smaller = refit => smaller,
            };
            if let Some((before, smaller)) = smaller {
                let after = smaller.items.len();
                tracing::warn!(agent = %env.agent_id, %speech_id, before, after, "the request was over the model's context: retrying it trimmed");
                stream = env.session.plugins.llm.chat(smaller);
                continue;
            }
        }
        if !chunk.is_some_and(|chunk| out.apply(chunk, env, step)) {
            break;
        }
    }
    // Dropping the stream cancels the request.
    drop(stream);
    if out.ended.will_report() && out.held.has_text() {
        out.held.flush(&env.session); // the step's text before the step's end
    }
    out.truncated = out.ended.finish_reason.as_ref().is_some_and(FinishReason::is_truncated);
    std::mem::take(&mut out.ended).report(env, speech_id);
    out
}

/// How a step ended once its text has played.
pub(super) enum Played {
    /// The LLM request failed: the speech ends (its text so far is committed).
    Failed { interrupted: bool },
    /// No call to wait for: the speech's last step, its reports in `tail`.
    Last { interrupted: bool, tail: Vec<Report> },
    /// Calls run; `interrupted`: the speech was interrupted during the step's playout.
    Calls { running: StepCalls, interrupted: bool },
}

/// Dispatches the step's calls (unless the response was cut short or failed) and plays its
/// text out meanwhile; commits the step's message.
pub(super) async fn play(
    env: &SpeechEnv,
    speech_id: &str,
    streamed: Streamed,
    tool_choice: &Option<ToolChoice>,
    control: &SpeechControl,
) -> Played {
    let Streamed {
        text, calls, interrupted: stream_interrupted, failure, mut held, truncated, ..
    } = streamed;
    let session = &env.session;
    // The step's message and calls share its id (`<step>`, `<step>/fnc_<n>`): a request
    // groups them into one assistant turn (docs/decisions.md#request-turns).
    let step_id = session.clock.item_id();
    // Tools may wait for this step's text to finish playing (`ctx.wait_for_playout()`); the
    // guard releases them however the step ends.
    let playout_done = CancellationToken::new();
    let _release = playout_done.clone().drop_guard();
    let calls: Vec<StreamedCall> = calls.into_values().collect();
    if !calls.is_empty() || failure.is_some() || env.session.plugins.sink.is_some() {
        // Calls report their own events, a failure its error, a sink plays for a while: the
        // agent speaks, and its text so far goes out, before any of it.
        held.flush(session);
    }
    // Calls of a response that was cut short or failed are never run.
    let running = match (stream_interrupted || failure.is_some(), tool_choice) {
        (true, _) => None,
        (false, _) if calls.is_empty() => None,
        (false, Some(ToolChoice::None)) => {
            call_dispatch::drop_calls(env, calls);
            None
        }
        (false, _) => {
            env.start_toolsets_for(calls.iter().map(|c| c.name.as_str())).await;
            let step = call_dispatch::Step { id: &step_id, speech_id, truncated };
            Some(call_dispatch::dispatch(env, &step, calls, &playout_done, control))
        }
    };
    let mut interrupted = stream_interrupted;
    // A step without calls is the speech's last: its message goes with the speech's end.
    let last_step = failure.is_none() && running.is_none();
    let mut tail = Vec::new();
    if let Some(StepText { playout, started }) = text {
        let mut end = match stream_interrupted {
            true => playout.interrupt().await,
            false => playout.finish(control.token()).await,
        };
        interrupted |= end.interrupted;
        // A stream that broke after text flowed: the text received stays, marked as cut (the
        // speech itself was not interrupted).
        end.interrupted |= failure.is_some();
        let commit = message_commit(env, speech_id, step_id, started, end);
        let reports = held.with(session, commit);
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
        return Played::Failed { interrupted };
    }
    match running {
        None => Played::Last { interrupted, tail },
        Some(running) => Played::Calls { running, interrupted },
    }
}

/// The commit of a step's message under item id `id` (`None` without text); a sink error is
/// reported at once.
pub(super) fn message_commit(
    env: &SpeechEnv,
    speech_id: &str,
    id: String,
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
        id,
        role: Role::Assistant,
        text: end.text,
        interrupted: end.interrupted,
        created_at: started,
    };
    SessionLink::speech_commit(&env.agent_id, speech_id, vec![ChatItem::Message(message)])
}
