//! Failure isolation and recovery: a failing Activity is restarted with the same agent and
//! context while session-scoped calls go on; a failing Toolset ends its own calls; supervisors
//! report failures in the lifecycle stream; nothing leaks after close.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use colloquy::events::{ErrorSource, ToolCallStatus};
use colloquy::prelude::*;
use colloquy::session::{Lifecycle, LifecycleEvent};
use tokio::sync::mpsc::Receiver;

/// Updates, then works `ms` before answering.
fn background(name: &'static str, work: u64) -> FunctionTool {
    FunctionTool::new(name, "Works.", move |ctx: RunContext, _a: NoArgs| async move {
        ctx.update(format!("{name} started")).await?;
        tokio::time::sleep(ms(work)).await;
        Ok::<_, ToolError>(format!("{name} done"))
    })
}

fn ended(events: &[SessionEvent]) -> BTreeMap<String, (ToolCallStatus, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnded { call_id, status, message, .. } => {
                Some((call_id.clone(), (*status, message.clone())))
            }
            _ => None,
        })
        .collect()
}

async fn start(script: Vec<ScriptedResponse>) -> (Harness, Receiver<LifecycleEvent>) {
    let mut builder =
        Session::builder().toolset(Toolset::new_async("shared").tool(background("lookup", 500)));
    let lifecycle = builder.lifecycle_events();
    let agent = Agent::new("A", "inst").tool(background("job", 500));
    (Harness::start_with(builder, agent, script).await, lifecycle)
}

fn both_calls() -> ScriptedResponse {
    ScriptedResponse::calls([
        ScriptedCall::new("j", "job", "{}"),
        ScriptedCall::new("l", "lookup", "{}"),
    ])
}

#[tokio::test(start_paused = true)]
async fn a_failed_activity_restarts_and_the_conversation_goes_on() {
    let script = vec![
        both_calls(),
        text("Working on both."),
        text("The job failed, sorry."),
        text("The lookup is done."),
        text("Still here."),
    ];
    let (mut h, mut lifecycle) = start(script).await;
    h.turn("do both").await;
    tokio::time::sleep(ms(100)).await;
    h.session.inject_failure("activity:A");
    tokio::time::sleep(ms(10)).await;

    // The supervisor reports the failure with the panic message.
    let records = drain_lifecycle(&mut lifecycle);
    let failed: Vec<_> = records.iter().filter(|r| r.what == Lifecycle::Failed).collect();
    assert_eq!(failed.len(), 1, "{records:?}");
    assert_eq!(failed[0].id, "activity:A");
    assert!(failed[0].reason.as_deref().unwrap().contains("injected failure"), "{failed:?}");
    // The agent-scoped call ended through the drop guard; the session-scoped one runs on.
    let ends = ended(h.events());
    assert_eq!(ends["j"], (ToolCallStatus::Error, Some("activity failed".into())));
    assert!(!ends.contains_key("l"));
    let errors = error_messages(h.events());
    assert!(errors.iter().any(|m| m.starts_with("agent `A` restarted")), "{errors:?}");

    // A new Activity with a fresh agent toolset runs the same agent.
    let snap = h.session.inspect().await.unwrap();
    assert!(snap.tree.find("activity:A").is_some());
    assert!(snap.tree.find("toolset:agent:A").unwrap().children.is_empty());
    assert!(snap.tree.find("tool_call:l").is_some());

    // The failed call's `_final` pair is delivered by a deferred reply, the lookup's too, and
    // the next user turn is answered over the same context.
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(ended(h.events())["l"], (ToolCallStatus::Done, Some("lookup done".into())));
    h.turn("still there?").await;
    let ctx = h.ctx("A").await;
    assert_eq!(ctx.first().map(String::as_str), Some("user(do both)"));
    assert!(
        ctx.iter().any(|i| i == r#"out(#j_final,"An internal error occurred.",ERR,rr=T)"#),
        "{ctx:?}"
    );
    assert!(ctx.iter().any(|i| i == r#"out(#l_final,"lookup done",ok,rr=T)"#), "{ctx:?}");
    assert_eq!(ctx.last().map(String::as_str), Some("asst(Still here.)"));

    // After close every actor that started stopped or failed, none leaked.
    h.close().await;
    let mut balance: BTreeMap<String, i32> = BTreeMap::new();
    for r in records.into_iter().chain(drain_lifecycle(&mut lifecycle)) {
        let key = format!("{}#{}", r.id, r.session_id);
        *balance.entry(key).or_default() += if r.what == Lifecycle::Started { 1 } else { -1 };
    }
    // activity:A started twice and ended twice (failed, then stopped at close).
    assert!(balance.values().all(|n| *n == 0), "{balance:?}");
}

/// Makes `target` panic; the `failed` lifecycle records that follow.
async fn fail(
    h: &Harness,
    lifecycle: &mut Receiver<LifecycleEvent>,
    target: &str,
) -> Vec<LifecycleEvent> {
    h.session.inject_failure(target);
    tokio::time::sleep(ms(10)).await;
    drain_lifecycle(lifecycle).into_iter().filter(|r| r.what == Lifecycle::Failed).collect()
}

#[tokio::test(start_paused = true)]
async fn a_failed_toolset_ends_its_own_calls_only() {
    let script = vec![both_calls(), text("Working."), text("Lookup done."), text("Job?")];
    let (mut h, mut lifecycle) = start(script).await;
    h.turn("do both").await;
    let failed = fail(&h, &mut lifecycle, "toolset:agent:A").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id, "toolset:agent:A");
    assert_eq!(ended(h.events())["j"], (ToolCallStatus::Error, Some("toolset failed".into())));
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(ended(h.events())["l"].0, ToolCallStatus::Done);
    // The session and its Activity live on.
    h.turn("anything else?").await;
    assert!(h.session.is_running());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_toolset_starts_again_and_its_tools_keep_working() {
    let again = ScriptedResponse::calls([
        ScriptedCall::new("j2", "job", "{}"),
        ScriptedCall::new("l2", "lookup", "{}"),
    ]);
    let script = vec![both_calls(), text("Working."), again, text("Again."), text("Done.")];
    let (mut h, mut lifecycle) = start(script).await;
    h.turn("do both").await;
    // The agent's toolset and the session's, each killed with a call running.
    h.session.inject_failure("toolset:agent:A");
    h.session.inject_failure("toolset:shared");
    tokio::time::sleep(ms(10)).await;
    let records = drain_lifecycle(&mut lifecycle);
    let failed: Vec<&str> =
        records.iter().filter(|r| r.what == Lifecycle::Failed).map(|r| r.id.as_str()).collect();
    assert_eq!(failed.len(), 2, "{records:?}");
    let first_failure = records.iter().position(|r| r.what == Lifecycle::Failed).unwrap();
    let restarted: Vec<&str> = records[first_failure..]
        .iter()
        .filter(|r| r.what == Lifecycle::Started && r.id.starts_with("toolset:"))
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(restarted.len(), 2, "each started again: {records:?}");
    let errors = error_messages(h.events());
    assert!(
        errors.iter().any(|m| m.contains("`agent:A` failed") && m.contains("started again")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|m| m.contains("toolset `shared` started again")), "{errors:?}");
    // Their calls ended with them; the next ones run on the new toolsets.
    assert_eq!(ended(h.events())["j"].0, ToolCallStatus::Error);
    assert_eq!(ended(h.events())["l"].0, ToolCallStatus::Error);
    h.session.wait_for_quiet().await.unwrap();
    h.turn("again").await;
    tokio::time::sleep(ms(600)).await;
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(ended(h.events())["j2"].0, ToolCallStatus::Done);
    assert_eq!(ended(h.events())["l2"].0, ToolCallStatus::Done);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_tool_call_actor_ends_its_call_once_and_the_rest_goes_on() {
    let script = vec![both_calls(), text("Working."), text("Lookup done."), text("Job?")];
    let (mut h, mut lifecycle) = start(script).await;
    h.turn("do both").await;
    let failed = fail(&h, &mut lifecycle, "tool_call:j").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id, "tool_call:j");
    let (status, message) = ended(h.events())["j"].clone();
    assert_eq!(status, ToolCallStatus::Error);
    assert!(message.unwrap_or_default().contains("tool call actor ended before its call"));
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(ended(h.events())["l"].0, ToolCallStatus::Done);
    h.turn("anything else?").await;
    let calls_ended = h
        .events()
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ToolCallEnded { call_id, .. } if call_id == "j"))
        .count();
    assert_eq!(calls_ended, 1, "the call ends once");
    h.close().await;
}

fn errors(events: &[SessionEvent]) -> Vec<(ErrorSource, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Error { source, message, .. } => Some((*source, message.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_hanging_llm_ends_the_turn_with_an_error_after_the_timeout() {
    let script = vec![text("never").with_latency(Duration::from_secs(3600)), text("Back again.")];
    let builder = Session::builder().llm_timeout(Some(Duration::from_secs(5)));
    let mut h = Harness::start_with(builder, Agent::new("A", "inst"), script).await;
    let start = tokio::time::Instant::now();
    h.turn("hello?").await;
    assert_eq!(start.elapsed(), Duration::from_secs(5), "the turn ended at the timeout");
    assert_eq!(
        errors(h.events()),
        [(ErrorSource::Llm, "LLM request timed out: nothing received for 5000 ms".to_string())]
    );
    assert_eq!(h.session.states().await.unwrap().0, AgentState::Listening);
    // The next turn works; the failed one left nothing but the user's message.
    h.turn("still there?").await;
    assert_eq!(h.hist().await, ["user(hello?)", "user(still there?)", "asst(Back again.)"]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_broken_llm_stream_ends_the_turn_cleanly() {
    let mut broken = text("half an ans");
    broken.error = Some("connection reset".into());
    let mut h = Harness::start(Agent::new("A", "inst"), vec![broken, text("Whole answer.")]).await;
    h.turn("question").await;
    assert_eq!(errors(h.events()), [(ErrorSource::Llm, "connection reset".to_string())]);
    h.turn("again").await;
    assert_eq!(h.hist().await.last().map(String::as_str), Some("asst(Whole answer.)"));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_ends_a_speech_whose_sink_never_reports() {
    let builder = Session::builder()
        .speech_sink(SilentSink::default())
        .playout_timeout(Some(Duration::from_secs(2)));
    let mut h = Harness::start_with(builder, Agent::new("A", "inst"), vec![text("Hello!")]).await;
    let start = tokio::time::Instant::now();
    h.turn("hi").await;
    // Two seconds without a report, then two more after being asked to stop.
    assert_eq!(start.elapsed(), Duration::from_millis(4_010));
    let errs = errors(h.events());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, ErrorSource::Sink);
    assert!(errs[0].1.contains("watchdog"), "{errs:?}");
    // No progress was reported: the text counts as said, and the session is idle again.
    assert_eq!(h.hist().await.last().map(String::as_str), Some("asst(Hello!)"));
    assert_eq!(h.session.states().await.unwrap().0, AgentState::Listening);
    h.close().await;
}
