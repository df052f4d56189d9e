//! The Session actor: one per conversation, the root of its actor tree.
//!
//! It owns what must outlive an Activity: the session history, every agent's chat context,
//! agent and user state, the running-call index and the idle decision. It is the front door
//! for every speech (it numbers them `s1`, `s2`, …) and the one place events fan out to
//! subscribers, so their order is the order its mailbox received them in. Handlers never wait
//! on the session's own actors: a close is a sequence of messages, not an await.

mod handoff;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{
    Agent, AgentState, ChatContext, ChatItem, EventFilter, EventKind, FunctionTool, SessionEvent,
    SpeechSource, Templates, Toolset,
};
use colloquy_llm::{Llm, RequestKind};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::mpsc;

use handoff::ActivityFactory;
use state::SessionState;

use crate::catalog::{Scope, ToolCatalog};
use crate::clock::SessionClock;
use crate::lifecycle::{ActorKind, Lifecycle, LifecycleEvent, LifecycleHub, LifecycleSink};
use crate::options::SessionOptions;
use crate::protocol::{
    ActivityMsg, CloseCallback, ClosedSession, CoalescerSlot, Report, SessionLink, SessionMsg,
    SpeechContent,
};
use crate::speech_sink::SpeechSink;
use crate::toolset::{ToolsetActor, ToolsetArgs};

/// The close reason of a host-less session whose handles were all dropped.
pub const RELEASED: &str = "handles_dropped";

pub(crate) struct SessionActor;

pub(crate) struct SessionArgs {
    pub id: String,
    pub agent: Agent,
    /// The first agent's tools, already checked by the builder.
    pub catalog: Arc<ToolCatalog>,
    /// Tools and toolsets placed on the session (for the catalogs of later agents).
    pub session_tools: Vec<FunctionTool>,
    pub session_toolsets: Vec<Toolset>,
    pub llm: Arc<dyn Llm>,
    pub sink: Option<Arc<dyn SpeechSink>>,
    pub options: SessionOptions,
    pub history: Vec<ChatItem>,
    pub userdata: Option<Arc<dyn std::any::Any + Send + Sync>>,
    pub subscribers: Vec<(EventFilter, mpsc::Sender<SessionEvent>)>,
    pub lifecycle: Option<mpsc::Sender<LifecycleEvent>>,
    /// A host's lifecycle subscribers.
    pub lifecycle_hub: Option<Arc<LifecycleHub>>,
    /// The host's close callback.
    pub on_close: Option<CloseCallback>,
    /// Where the final history goes when the session closes (shared with its handles).
    pub closed: Arc<std::sync::OnceLock<ClosedSession>>,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // New items must sort after a restored history: start the clock past its last stamp.
        let offset = args.history.iter().map(|i| i.created_at().micros + 1).max().unwrap_or(0);
        let clock = SessionClock::new(offset);
        clock.mark_call_ids(args.history.iter().filter_map(|item| match item {
            ChatItem::FunctionCall(c) => Some(c.call_id.as_str()),
            ChatItem::FunctionCallOutput(o) => Some(o.call_id.as_str()),
            _ => None,
        }));
        let link = SessionLink {
            actor: myself.clone(),
            clock: clock.clone(),
            id: Arc::from(args.id.as_str()),
            lifecycle: LifecycleSink::new(&args.id, args.lifecycle, args.lifecycle_hub),
            span: Arc::new(tracing::info_span!(parent: None, "session", session_id = %args.id)),
            closed: Arc::clone(&args.closed),
        };
        let agent_id = args.agent.id().to_string();
        let previous_agent = args.history.iter().rev().find_map(|item| match item {
            ChatItem::AgentHandoff(h) => Some(h.new_agent.clone()),
            _ => None,
        });
        let restored: Vec<ChatItem> = args
            .history
            .iter()
            .filter(|i| !matches!(i, ChatItem::AgentHandoff(_)))
            .cloned()
            .collect();
        let mut contexts = BTreeMap::new();
        contexts.insert(agent_id.clone(), Arc::new(ChatContext::from_items(restored)));
        let allow_interruptions =
            args.agent.interruptions_override().unwrap_or(args.options.allow_interruptions);
        let templates =
            Templates::resolve(&[args.agent.template_overrides(), args.options.templates.as_ref()]);
        let coalescer = CoalescerSlot::default();
        // Session-scoped async toolsets are children of the Session from birth, so no agent
        // (or agent failure) can take them down.
        let mut session_toolsets = BTreeMap::new();
        for set in args.catalog.async_toolsets(Scope::Session) {
            let templates =
                Templates::resolve(&[set.templates.as_ref(), args.options.templates.as_ref()]);
            let toolset_args = ToolsetArgs {
                id: set.id.clone(),
                agent_id: agent_id.as_str().into(),
                catalog: Arc::clone(&args.catalog),
                session: link.clone(),
                coalescer: coalescer.clone(),
                templates,
                cancel_grace: args.options.cancel_grace,
                scope: Scope::Session,
                userdata: args.userdata.clone(),
            };
            let (toolset, _) =
                Actor::spawn_linked(None, ToolsetActor, toolset_args, myself.get_cell()).await?;
            session_toolsets.insert(set.id.clone(), toolset);
        }
        let factory = ActivityFactory {
            link: link.clone(),
            llm: args.llm,
            sink: args.sink,
            coalescer: coalescer.clone(),
            session_templates: args.options.templates.clone(),
            session_toolsets,
            session_tools: args.session_tools,
            session_toolset_decls: args.session_toolsets,
            cancel_grace: args.options.cancel_grace,
            max_tool_steps: args.options.max_tool_steps,
            llm_timeout: args.options.llm_timeout,
            playout_timeout: args.options.playout_timeout,
            userdata: args.userdata,
        };
        let on_enter = args.agent.on_enter_instructions().map(str::to_string);
        let catalog = Arc::clone(&args.catalog);
        let agent = args.agent.clone();
        let activity =
            factory.spawn(args.agent, catalog, BTreeMap::new(), myself.get_cell()).await?;
        Ok(SessionState::new(state::Init {
            id: args.id,
            link,
            options: args.options,
            history: ChatContext::from_items(args.history),
            contexts,
            agent_id,
            agent,
            previous_agent,
            on_enter,
            allow_interruptions,
            catalog: Arc::clone(&args.catalog),
            templates,
            coalescer,
            activity,
            factory,
            subscribers: args.subscribers,
            on_close: args.on_close,
        }))
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.link().lifecycle.report(ActorKind::Session, "session", Lifecycle::Started);
        state.start();
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children_and_wait(Some("session closed".into()), None).await;
        let reason = state.close_reason();
        state.link().lifecycle.report_why(
            ActorKind::Session,
            "session",
            Lifecycle::Stopped,
            reason,
        );
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMsg::UserTurn { text, reply } => {
                let result = state.user_turn(text);
                let _ = reply.send(result);
            }
            SessionMsg::Run { text, reply } => state.run(text, reply),
            SessionMsg::GenerateReply { instructions, tool_choice, reply } => {
                let content = SpeechContent::Reply {
                    kind: RequestKind::GenerateReply,
                    extra_instructions: instructions,
                    tool_choice,
                };
                let _ = reply.send(state.create_speech(SpeechSource::GenerateReply, content));
            }
            SessionMsg::Say { text, reply } => {
                let content = SpeechContent::Say { text };
                let _ = reply.send(state.create_speech(SpeechSource::Say, content));
            }
            SessionMsg::Interrupt { reply } => {
                let _ = state.activity.cast(ActivityMsg::Interrupt { reply: Some(reply) });
            }
            SessionMsg::SetUserSpeaking(speaking) => state.set_user_speaking(speaking),
            SessionMsg::Subscribe(filter, tx) => state.subscribers.push((filter, tx)),
            SessionMsg::AddBroadcast(tx) => state.broadcasts.push(tx),
            SessionMsg::History(reply) => {
                let _ = reply.send(state.history.to_items());
            }
            SessionMsg::Context { agent, reply } => {
                let _ = reply.send(state.contexts.get(&agent).cloned());
            }
            SessionMsg::MockTools { scope, mocks, reply } => {
                let _ = reply.send(state.mock_tools(scope, mocks));
            }
            #[cfg(feature = "test-hooks")]
            SessionMsg::InjectFailure(target) => state.inject_failure(&target),
            SessionMsg::Inspect(reply) => {
                let _ = reply.send(state.inspect());
            }
            SessionMsg::States(reply) => {
                let _ = reply.send((state.agent_state, state.user_state));
            }
            SessionMsg::WaitForIdle(reply) => state.wait_for_idle(reply, false),
            SessionMsg::WaitForQuiet(reply) => state.wait_for_idle(reply, true),
            SessionMsg::HoldFloor(reply) => state.hold_floor(reply),
            SessionMsg::SpeechWaiting { speech_id, waiting } => {
                if waiting {
                    state.set_agent_state(AgentState::Thinking);
                }
                state.speech_waiting(speech_id, waiting)
            }
            SessionMsg::ReleaseFloor(hold) => state.release_floor(hold),
            SessionMsg::CallRegistered { call, toolset, cancellable, agent_scoped } => {
                state.call_registered(*call, toolset, cancellable, agent_scoped)
            }
            SessionMsg::CancelCall { call_id, reply } => state.cancel_call(call_id, reply),
            SessionMsg::RunningCalls(reply) => {
                let _ = reply.send(state.running_tool_calls());
            }
            SessionMsg::BeginLlmStep { agent, resumed, reports, reply } => {
                let ended = apply_all(state, reports);
                if let Some(speech_id) = resumed {
                    state.speech_waiting(speech_id, false);
                }
                state.set_agent_state(AgentState::Thinking);
                let _ = reply.send(state.request_context(&agent));
                if ended {
                    state.close_if_quiet(&myself).await;
                    state.complete_handoff_if_drained(&myself).await;
                }
            }
            // The rare heavy paths are boxed: inlined, they would size every session's actor
            // task for them.
            SessionMsg::Enqueue(pending) => {
                Box::pin(state.enqueue_reply(myself.get_cell(), pending)).await
            }
            SessionMsg::AdmitReply { batch, coalescer } => state.offer_reply(&batch, &coalescer),
            SessionMsg::Close { reason, reply } => state.close(reason, Some(reply)),
            SessionMsg::Released => state.close(RELEASED.into(), None),
            SessionMsg::EndAfterSpeech { speech_id, reason, watchdog } => {
                state.end_after_speech(speech_id, reason, watchdog)
            }
            SessionMsg::EndNow { reason, watchdog } => state.end_now(reason, watchdog),
            SessionMsg::Report(report) => {
                if apply(state, report) {
                    state.close_if_quiet(&myself).await;
                    state.complete_handoff_if_drained(&myself).await;
                }
            }
            SessionMsg::Reports(reports) => {
                if apply_all(state, reports) {
                    state.close_if_quiet(&myself).await;
                    state.complete_handoff_if_drained(&myself).await;
                }
            }
            SessionMsg::ActivityClosed => Box::pin(state.activity_closed(&myself)).await,
            SessionMsg::Handoff { agent } => state.request_handoff(agent),
            SessionMsg::ActivityDrained { kept } => {
                Box::pin(state.activity_drained(kept, &myself)).await
            }
            SessionMsg::AwayTimeout(generation) => state.away_timeout(generation),
            SessionMsg::DrainTimeout => state.drain_timeout(),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The default would stop the session when any child ends; report failures instead.
        // Only the current Activity matters: an old one ends on purpose at a handoff.
        let current = state.activity.get_id();
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(session = %state.id, actor = %cell.get_id(), "actor failed: {err}");
                if let Some((kind, id)) = state.child_name(&cell) {
                    state.link().lifecycle.failed(kind, id, &err);
                }
                state.emit_now(EventKind::error(
                    colloquy_core::ErrorSource::Session,
                    format!("actor failed: {err}"),
                ));
                if cell.get_id() == current {
                    Box::pin(state.activity_lost(&myself, Some(err.to_string()))).await;
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason)
                if !state.is_closing() && cell.get_id() == current =>
            {
                tracing::warn!(session = %state.id, actor = %cell.get_id(), ?reason, "activity stopped");
                Box::pin(state.activity_lost(&myself, reason.or(Some("stopped".into())))).await;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Applies reports in order; true when one ended a tool call. The caller follows that up once,
/// after the batch (nothing awaits between two reports, so the handler's future stays small).
fn apply_all(state: &mut SessionState, reports: Vec<Report>) -> bool {
    let mut ended = false;
    for report in reports {
        ended |= apply(state, report);
    }
    ended
}

/// Applies one report of the session's own actors; true when it ended a tool call (a close or
/// handoff waiting for the session's calls may now go on).
fn apply(state: &mut SessionState, report: Report) -> bool {
    match report {
        Report::Emit(event) => {
            let ended = matches!(event.kind, EventKind::ToolCallEnded { .. });
            state.emit(event);
            ended
        }
        Report::Commit { agent, speech_id, items, awaits_reply } => {
            state.commit(&agent, speech_id.as_deref(), items);
            if let Some(update_id) = awaits_reply {
                state.await_reply(update_id);
            }
            false
        }
        Report::SpeechDone { speech_id, interrupted } => {
            state.speech_done(speech_id, interrupted);
            false
        }
        Report::AgentState(agent_state) => {
            state.set_agent_state(agent_state);
            false
        }
    }
}
