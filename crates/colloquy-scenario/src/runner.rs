//! Plays a parsed scenario on a current-thread runtime with tokio's clock paused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy::agent::{Agent, Handoff};
use colloquy::llm::ScriptedLlm;
use colloquy::session::{Session, SessionBuilder, SessionHandle};
use colloquy::speech::PacedSink;
use colloquy::store::{Acquire, LEASE_TTL, LeaseHolder, MemoryStore, SessionStore};
use colloquy::templates::Template;
use colloquy::tools::{
    FunctionTool, IntoToolOutput, RunContext, StopResponse, ToolError, ToolOutput, ToolResult,
    Toolset, UpdateOptions,
};
use colloquy::toolsets::{EndCallTool, KeywordStrategy, ToolSearch};
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::ScenarioError;
use crate::file::{Action, AgentDef, BodyStep, Scenario, ToolDef, ToolsetDef, ToolsetKind};
use crate::trace::{self, ToValue, Trace};

/// Plays `scenario` to its end and returns its trace.
pub fn play(scenario: &Scenario) -> Result<Trace, ScenarioError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| ScenarioError::Run(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(play_async(scenario))
}

/// The scenario's tools, toolsets and agents, shared with tool bodies that hand off (an agent
/// is built when it is entered, so agents may hand off to each other).
struct Defs {
    tools: Vec<ToolDef>,
    toolsets: Vec<ToolsetDef>,
    agents: Vec<AgentDef>,
    /// Each tool built once: listed by the session, an agent and a toolset, it is one tool
    /// (a fresh instance per listing would be "a different tool with the same name").
    built: std::sync::OnceLock<BTreeMap<String, FunctionTool>>,
}

impl Defs {
    fn tools(self: &Arc<Self>, names: &[String]) -> Vec<FunctionTool> {
        let built = self.built.get_or_init(|| {
            self.tools.iter().map(|def| (def.name.clone(), scripted_tool(def, self))).collect()
        });
        names.iter().filter_map(|n| built.get(n)).cloned().collect()
    }

    fn toolset(self: &Arc<Self>, id: &str) -> Option<Toolset> {
        let def = self.toolsets.iter().find(|t| t.id == id)?;
        let nested = || def.toolsets.iter().filter_map(|t| self.toolset(t));
        let search = |keyword: bool, max_results: usize| {
            let mut search = ToolSearch::new(def.id.clone()).max_results(max_results);
            if keyword {
                search = search.strategy(KeywordStrategy::default());
            }
            for tool in self.tools(&def.tools) {
                search = search.tool(tool);
            }
            for set in nested() {
                search = search.toolset(set);
            }
            search
        };
        let set = match &def.kind {
            ToolsetKind::Async | ToolsetKind::Plain => {
                let mut set = match def.kind {
                    ToolsetKind::Async => Toolset::new_async(def.id.clone()),
                    _ => Toolset::new(def.id.clone()),
                };
                for tool in self.tools(&def.tools) {
                    set = set.tool(tool);
                }
                for nested in nested() {
                    set = set.toolset(nested);
                }
                if let Some(templates) = &def.templates {
                    set = set.templates(templates.clone());
                }
                if let Some(max) = def.max_concurrent {
                    set = set.max_concurrent(max);
                }
                set
            }
            ToolsetKind::ToolSearch { keyword, max_results } => {
                search(*keyword, *max_results).build().toolset()
            }
            ToolsetKind::ToolProxy { keyword, max_results } => {
                search(*keyword, *max_results).build_proxy().toolset()
            }
            ToolsetKind::EndCall { extra_description, end_instructions, ignore_on_enter } => {
                EndCallTool::new()
                    .extra_description(extra_description.clone())
                    .end_instructions(end_instructions.clone())
                    .ignore_on_enter(*ignore_on_enter)
                    .toolset()
            }
        };
        Some(set)
    }

    fn agent(self: &Arc<Self>, id: &str) -> Option<Agent> {
        let def = self.agents.iter().find(|a| a.id == id)?;
        let mut agent =
            Agent::new(def.id.clone(), def.instructions.clone()).tools(self.tools(&def.tools));
        for set in def.toolsets.iter().filter_map(|t| self.toolset(t)) {
            agent = agent.toolset(set);
        }
        if let Some(allow) = def.allow_interruptions {
            agent = agent.allow_interruptions(allow);
        }
        if let Some(templates) = &def.templates {
            agent = agent.templates(templates.clone());
        }
        if let Some(instructions) = &def.on_enter {
            agent = agent.on_enter_reply(instructions.clone());
        }
        Some(agent)
    }
}

async fn play_async(scenario: &Scenario) -> Result<Trace, ScenarioError> {
    let start = Instant::now();
    let defs = Arc::new(Defs {
        tools: scenario.tools.clone(),
        toolsets: scenario.toolsets.clone(),
        agents: scenario.agents.clone(),
        built: std::sync::OnceLock::new(),
    });
    let agent = defs.agent(&scenario.session.agent).ok_or_else(|| {
        ScenarioError::File(format!("undefined agent `{}`", scenario.session.agent))
    })?;
    let llm = ScriptedLlm::new(scenario.llm.iter().cloned()).recording();
    let options = &scenario.options;
    // A scenario that crashes keeps its session's journal in memory (docs/scenario-format.md#crash).
    let crashes = scenario.steps.iter().any(|s| s.action == Action::Crash);
    let store = crashes.then(|| Arc::new(MemoryStore::new()));
    let mut builder = configured(scenario, &defs, &llm);
    if let Some(store) = &store {
        builder = builder.store(Arc::clone(store) as Arc<dyn SessionStore>);
    }
    let mut events = builder.subscribe();
    let mut session = builder.start(agent).await.map_err(|e| ScenarioError::Run(e.to_string()))?;
    // After a `crash`, until its `resume`: the store as the crash left it.
    let mut crashed: Option<Arc<MemoryStore>> = None;

    let mut traced: Vec<Value> = Vec::new();
    let mut session_events: Vec<colloquy::events::SessionEvent> = Vec::new();
    let mut snapshots: Vec<Value> = Vec::new();
    let mut closed = None;
    for (i, step) in scenario.steps.iter().enumerate() {
        if let Some(at) = step.at {
            tokio::time::sleep_until(start + at).await;
        }
        let failed =
            |e: colloquy::session::SessionError| ScenarioError::Run(format!("steps[{i}]: {e}"));
        match &step.action {
            Action::Nothing => {}
            Action::Wait(d) => tokio::time::sleep(*d).await,
            Action::User(text) => session.user_turn(text.clone()).await.map_err(failed)?,
            Action::UserInput(text) => session.user_input(text.clone()).await.map_err(failed)?,
            Action::UserSpeaking(speaking) => {
                session.set_user_speaking(*speaking).map_err(failed)?;
            }
            Action::WaitIdle => {
                // Bounded like the end of a run: a session that never goes idle (a user who
                // never stops speaking) is recorded, not waited for.
                let bound = options.end_timeout;
                if let Ok(idle) = tokio::time::timeout(bound, session.wait_for_idle()).await {
                    idle.map_err(failed)?;
                } else {
                    let record = serde_json::json!({
                        "at_ms": (Instant::now() - start).as_millis() as u64,
                        "type": "x_wait_timeout",
                        "step": i,
                        "waited_ms": bound.as_millis() as u64,
                    });
                    record_now(&mut events, &mut traced, &mut session_events, record);
                }
            }
            Action::GenerateReply(instructions) => {
                let text = instructions.clone().unwrap_or_default();
                session.generate_reply(text).await.map_err(failed)?;
            }
            Action::Say(text) => session.say(text.clone()).await.map_err(failed)?,
            Action::Interrupt => session.interrupt().await.map_err(failed)?,
            Action::Handoff(id) => {
                let agent = defs
                    .agent(id)
                    .ok_or_else(|| ScenarioError::File(format!("undefined agent `{id}`")))?;
                session.update_agent(agent).await.map_err(failed)?;
            }
            Action::Cancel(call_id) => {
                if let Err(refusal) = session.cancel_tool_call(call_id.clone()).await {
                    let record = serde_json::json!({
                        "at_ms": (Instant::now() - start).as_millis() as u64,
                        "type": "x_cancel_refused",
                        "call_id": call_id,
                        "reason": refusal.to_string(),
                    });
                    record_now(&mut events, &mut traced, &mut session_events, record);
                }
            }
            Action::Approve(call_id) => {
                let answer = session.approve(call_id.clone()).await;
                refused_answer(
                    &mut events,
                    &mut traced,
                    &mut session_events,
                    start,
                    call_id,
                    answer,
                );
            }
            Action::Reject { id, reason } => {
                let answer = session.reject(id.clone(), reason.clone()).await;
                refused_answer(&mut events, &mut traced, &mut session_events, start, id, answer);
            }
            Action::Close => {
                closed = Some(
                    session
                        .close_with_reason(colloquy::events::CloseReason::Close.name())
                        .await
                        .map_err(failed)?,
                );
            }
            Action::Inspect => {
                let snapshot = session.inspect().await.map_err(failed)?;
                snapshots.push(trace::snapshot(&snapshot));
            }
            Action::Crash => {
                // The journal catches up first (writes run on blocking threads, which hold
                // the paused clock), so what a crash keeps does not depend on threads' timing.
                tokio::time::sleep(Duration::from_millis(1)).await;
                let at_ms = (Instant::now() - start).as_millis() as u64;
                let record = serde_json::json!({"at_ms": at_ms, "type": "x_crash"});
                record_now(&mut events, &mut traced, &mut session_events, record);
                let kept = store.as_deref().map(|s| kept_journal(s, session.id()));
                crashed = Some(kept.transpose()?.ok_or_else(|| failed_crash("no store"))?);
                // The dead process's session goes on nowhere a trace or a model sees it.
                let gone = session.clone();
                tokio::spawn(async move { drop(gone.suspend().await) });
            }
            Action::Resume => {
                let kept = crashed.take().ok_or_else(|| failed_crash("nothing crashed"))?;
                let id = session.id().to_owned();
                let mut builder = configured(scenario, &defs, &llm).store(kept);
                events = builder.subscribe();
                let agents = |name: &str| defs.agent(name);
                session = builder.resume(&id, agents).await.map_err(failed)?;
            }
        }
    }
    let closed = match closed {
        Some(closed) => closed,
        None => finish(&session, options.end_timeout).await?,
    };
    while let Some(event) = events.recv().await {
        if trace::traced(&event) {
            traced.push(event.to_value());
        }
        session_events.push(event);
    }
    let recorded_requests = llm.requests();
    Ok(Trace {
        history: trace::items(closed.history.iter()),
        contexts: closed
            .contexts
            .iter()
            .map(|(id, items)| (id.clone(), trace::items(items.iter())))
            .collect(),
        events: traced,
        llm_requests: recorded_requests.iter().map(trace::trace_request).collect(),
        snapshots,
        session_events,
        recorded_requests,
    })
}

/// Records a runner's own `x_` item in the trace where it happened, after the events before it.
/// Records an `approve` or `reject` step the session refused (`x_approval_refused`), like a
/// refused `cancel`: the file may answer a call that already ended, and the trace says so.
fn refused_answer(
    events: &mut colloquy::events::EventStream,
    traced: &mut Vec<Value>,
    session_events: &mut Vec<colloquy::events::SessionEvent>,
    start: Instant,
    call_id: &str,
    answer: Result<(), colloquy::session::ApprovalError>,
) {
    if let Err(refusal) = answer {
        let record = serde_json::json!({
            "at_ms": (Instant::now() - start).as_millis() as u64,
            "type": "x_approval_refused",
            "call_id": call_id,
            "reason": refusal.to_string(),
        });
        record_now(events, traced, session_events, record);
    }
}

fn record_now(
    events: &mut colloquy::events::EventStream,
    traced: &mut Vec<Value>,
    session_events: &mut Vec<colloquy::events::SessionEvent>,
    record: Value,
) {
    while let Some(event) = events.try_recv() {
        if trace::traced(&event) {
            traced.push(event.to_value());
        }
        session_events.push(event);
    }
    traced.push(record);
}

/// The session's builder as the file configures it: its model, options, tools and toolsets.
fn configured(scenario: &Scenario, defs: &Arc<Defs>, llm: &ScriptedLlm) -> SessionBuilder {
    let options = &scenario.options;
    let mut builder =
        Session::builder().llm(llm.clone()).user_away_timeout(options.user_away_timeout);
    if let Some(steps) = options.max_tool_steps {
        builder = builder.max_tool_steps(steps);
    }
    if let Some(allow) = options.allow_interruptions {
        builder = builder.allow_interruptions(allow);
    }
    if let Some(templates) = &options.templates {
        builder = builder.templates(templates.clone());
    }
    if let Some(limit) = options.max_tool_calls_per_turn {
        builder = builder.max_tool_calls_per_turn(limit);
    }
    if let Some(grace) = options.cancel_grace {
        builder = builder.cancel_grace(grace);
    }
    builder = builder
        .drain_timeout(options.drain_timeout)
        .interrupt_timeout(options.interrupt_timeout)
        .tool_deadline(options.tool_deadline)
        .tool_heartbeat(options.tool_heartbeat);
    if options.playout_ms_per_char > 0 {
        builder =
            builder.speech_sink(PacedSink::new(Duration::from_millis(options.playout_ms_per_char)));
    }
    for tool in defs.tools(&scenario.session.tools) {
        builder = builder.tool(tool);
    }
    for set in scenario.session.toolsets.iter().filter_map(|t| defs.toolset(t)) {
        builder = builder.toolset(set);
    }
    builder
}

/// What a crash leaves of session `id`: a store holding its journal as `store` has it, its
/// lease free for the process that resumes it.
fn kept_journal(store: &MemoryStore, id: &str) -> Result<Arc<MemoryStore>, ScenarioError> {
    let failed = |e: colloquy::store::StoreError| failed_crash(&e.to_string());
    let entries = store.load(id).map_err(failed)?;
    let kept = Arc::new(MemoryStore::new());
    let holder = LeaseHolder::this_process();
    let lease = kept.acquire(id, &holder, LEASE_TTL, Acquire::IfFree).map_err(failed)?;
    kept.append(&lease, &entries).map_err(failed)?;
    kept.release(&lease).map_err(failed)?;
    Ok(kept)
}

fn failed_crash(why: &str) -> ScenarioError {
    ScenarioError::Run(format!("crash: {why}"))
}

/// After the last step: wait until the session is quiet, then close with `scenario_end`.
async fn finish(
    session: &SessionHandle,
    end_timeout: Duration,
) -> Result<colloquy::session::ClosedSession, ScenarioError> {
    // Idle and no call running (background ones included), at most `end_timeout`.
    let _ = tokio::time::timeout(end_timeout, async {
        session.wait_for_quiet().await?;
        session.wait_for_idle().await
    })
    .await;
    match session.close_with_reason("scenario_end").await {
        Ok(closed) => Ok(closed),
        // It closed by itself (an end-call tool): how it closed is kept.
        Err(e) => session.closed_session().ok_or_else(|| ScenarioError::Run(e.to_string())),
    }
}

/// A function tool whose body plays the scripted steps.
fn scripted_tool(def: &ToolDef, defs: &Arc<Defs>) -> FunctionTool {
    let body: Arc<[BodyStep]> = def.body.clone().into();
    // A weak link: tool bodies live inside the agents the definitions build.
    let defs = Arc::downgrade(defs);
    let attempts = Attempts::default();
    let tool = FunctionTool::from_schema(
        def.name.clone(),
        def.description.clone(),
        def.parameters.clone(),
        move |ctx: RunContext, args: Map<String, Value>| {
            let body = Arc::clone(&body);
            let defs = defs.upgrade();
            let attempts = attempts.clone();
            async move { run_body(&ctx, &body, &args, defs, &attempts).await }
        },
    )
    .expect("scenario tools are checked when the file is parsed")
    .on_duplicate(def.duplicates.0, def.duplicates.1.clone());
    let mut tool = if def.ignore_on_enter { tool.ignore_on_enter() } else { tool };
    if let Some(deadline) = def.deadline {
        tool = tool.deadline(deadline);
    }
    if let Some(heartbeat) = def.heartbeat {
        tool = tool.heartbeat(heartbeat);
    }
    if let Some(retry) = def.retry {
        tool = tool.retry(retry);
    }
    if def.requires_approval {
        tool = tool.requires_approval();
    }
    if let Some(max) = def.max_concurrent {
        tool = tool.max_concurrent(max);
    }
    if def.note_remembered {
        tool = tool.note_remembered();
    }
    if let Some(window) = def.idempotent {
        tool = tool.idempotent(window);
    }
    if let Some(policy) = def.on_interrupted {
        tool = tool.on_interrupted(policy);
    }
    if def.cancellable { tool.cancellable() } else { tool }
}

/// How often each call reached each `first_attempts` step (by call id and step index): one
/// tool's, shared by its calls' attempts.
type Attempts = Arc<std::sync::Mutex<BTreeMap<(String, usize), u64>>>;

async fn run_body(
    ctx: &RunContext,
    body: &[BodyStep],
    args: &Map<String, Value>,
    defs: Option<Arc<Defs>>,
    attempts: &Attempts,
) -> Result<ToolOutput, ToolError> {
    for (index, step) in body.iter().enumerate() {
        match step {
            BodyStep::FailFirst { attempts: failing, step } => {
                let reached = match attempts.lock() {
                    Ok(mut seen) => {
                        let count = seen.entry((ctx.call_id().to_string(), index)).or_default();
                        *count += 1;
                        *count
                    }
                    Err(_) => return Err(ToolError::internal("attempt counter poisoned")),
                };
                match step.as_ref() {
                    BodyStep::Error(t) if reached <= *failing => {
                        return Err(ToolError::new(t.render_text(args)));
                    }
                    BodyStep::Fail(t) if reached <= *failing => {
                        return Err(ToolError::internal(t.render_text(args)));
                    }
                    _ => {}
                }
            }
            BodyStep::Update { message, silent, template } => {
                let template = template.as_deref().map(Template::from);
                let options = UpdateOptions { silent: *silent, template };
                ctx.update_with(message.render(args), options).await?;
            }
            BodyStep::Sleep(d) => tokio::time::sleep(*d).await,
            BodyStep::Return(t) => return t.render(args).into_tool_output(),
            BodyStep::ReturnNothing => return ().into_tool_output(),
            BodyStep::ToolResult { output, reply_required } => {
                let result = ToolResult {
                    output: output.render_text(args),
                    reply_required: *reply_required,
                };
                return result.into_tool_output();
            }
            BodyStep::Error(t) => return Err(ToolError::new(t.render_text(args))),
            BodyStep::Fail(t) => return Err(ToolError::internal(t.render_text(args))),
            BodyStep::Panic(t) => panic!("{}", t.render_text(args)),
            BodyStep::StopResponse => return StopResponse.into_tool_output(),
            BodyStep::DisallowInterruptions => ctx.disallow_interruptions()?,
            BodyStep::WaitCancelled => ctx.cancelled().await,
            BodyStep::Handoff { agent, result } => {
                let target = defs.as_ref().and_then(|d| d.agent(agent));
                let target =
                    target.ok_or_else(|| ToolError::internal(format!("no agent `{agent}`")))?;
                let handoff = Handoff::to(target);
                let handoff = match result {
                    Some(t) => handoff.with_result(t.render_text(args)),
                    None => handoff,
                };
                return handoff.into_tool_output();
            }
        }
    }
    ().into_tool_output()
}
