//! The Session actor: one per conversation, the root of its actor tree.
//!
//! It owns what must outlive an Activity: the session history, every agent's chat context,
//! agent and user state, the running-call index and the idle decision. It is the front door
//! for every speech (it numbers them `s1`, `s2`, …) and the one place events fan out to
//! subscribers, so their order is the order its mailbox received them in. A handler never
//! asks a child and waits for the answer (children ask the Session, never the reverse); it
//! only awaits a child's spawn, or its stop once the child has nothing left to do.
//!
//! The state is split by concern (`parts/`, gathered in `state.rs`); the files beside this one
//! are the transitions, and `dispatch.rs` routes each message to the one that owns it.

mod close;
mod dispatch;
mod handoff;
mod idle;
mod parts;
mod presence;
mod replies;
mod run;
mod speech;
mod state;
mod supervision;

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::{Agent, ChatContext, ChatItem, EventKind, FunctionTool, Templates, Toolset};
use colloquy_llm::Llm;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};
use tokio::sync::mpsc;

use dispatch::FollowUp;
use parts::handoff::ActivityFactory;
use state::SessionState;

use crate::api::lifecycle::{ActorKind, Lifecycle, LifecycleEvent};
use crate::api::options::SessionOptions;
use crate::api::speech_sink::SpeechSink;
use crate::protocol::{
    CloseCallback, ClosedSession, CoalescerSlot, SessionLink, SessionMsg, Subscriber, ToolsetMsg,
};
use crate::support::catalog::{Scope, ToolCatalog};
use crate::support::clock::SessionClock;
use crate::support::lifecycle_sink::{LifecycleHub, LifecycleSink};
use crate::toolset::{ToolsetActor, ToolsetArgs};

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
    pub subscribers: Vec<Subscriber>,
    pub lifecycle: Option<mpsc::Sender<LifecycleEvent>>,
    /// A host's lifecycle subscribers.
    pub lifecycle_hub: Option<Arc<LifecycleHub>>,
    /// The host's close callback.
    pub on_close: Option<CloseCallback>,
    /// The host's hook before each tool call.
    pub before_call: Option<colloquy_core::BeforeToolCall>,
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
        let link = session_link(&myself, &args);
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
        let coalescer = CoalescerSlot::default();
        // Session-scoped async toolsets are children of the Session from birth, so no agent
        // (or agent failure) can take them down.
        let session_toolsets =
            spawn_session_toolsets(&args, &link, &coalescer, &agent_id, myself.get_cell()).await?;
        let factory = ActivityFactory {
            link: link.clone(),
            llm: args.llm,
            sink: args.sink,
            coalescer: coalescer.clone(),
            session_templates: args.options.templates.clone(),
            session_toolsets,
            session_tools: args.session_tools,
            session_toolset_decls: args.session_toolsets,
            calls: args.options.call_policy(args.before_call.clone()),
            max_tool_steps: args.options.max_tool_steps,
            llm_timeout: args.options.llm_timeout,
            playout_timeout: args.options.playout_timeout,
            userdata: args.userdata,
        };
        let catalog = Arc::clone(&args.catalog);
        let activity =
            factory.spawn(args.agent.clone(), catalog, BTreeMap::new(), myself.get_cell()).await?;
        Ok(SessionState::new(state::Init {
            id: args.id,
            link,
            options: args.options,
            history: ChatContext::from_items(args.history),
            contexts,
            agent: args.agent,
            previous_agent,
            catalog: args.catalog,
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
        state.link.lifecycle.report(ActorKind::Session, "session", Lifecycle::Started);
        state.start();
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children_and_wait(Some("session closed".into()), None).await;
        let reason = state.close.reason();
        state.link.lifecycle.report_why(ActorKind::Session, "session", Lifecycle::Stopped, reason);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMsg::Host(message) => state.on_host(message),
            SessionMsg::Tool(message) => state.on_tool(message),
            SessionMsg::Observe(message) => state.on_observe(message),
            SessionMsg::Child(message) => match state.on_child(message) {
                FollowUp::None => {}
                FollowUp::CallEnded => {
                    // A close or a handoff waiting for the session's calls may now go on.
                    state.close_if_quiet(&myself).await;
                    state.complete_handoff_if_drained(&myself).await;
                }
                // The rare heavy paths are boxed: inlined, they would size every session's
                // actor task for them (docs/decisions.md#boxed-futures).
                FollowUp::Enqueue(pending) => {
                    Box::pin(state.enqueue_reply(myself.get_cell(), *pending)).await
                }
                FollowUp::Drained(kept) => Box::pin(state.activity_drained(kept, &myself)).await,
                FollowUp::ActivityClosed => Box::pin(state.activity_closed(&myself)).await,
            },
            SessionMsg::Timer(message) => state.on_timer(message),
            #[cfg(feature = "test-hooks")]
            SessionMsg::InjectFailure(target) => state.inject_failure(&target),
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
        let current = state.current.activity.get_id();
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(session = %state.id, actor = %cell.get_id(), "actor failed: {err}");
                if let Some((kind, id)) = state.child_name(&cell) {
                    state.link.lifecycle.failed(kind, id, &err);
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
                if !state.close.is_closing() && cell.get_id() == current =>
            {
                tracing::warn!(session = %state.id, actor = %cell.get_id(), ?reason, "activity stopped");
                Box::pin(state.activity_lost(&myself, reason.or(Some("stopped".into())))).await;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The link every child gets: the session's address, clock, lifecycle sink and span. The
/// clock starts past the restored history's last stamp, so new items sort after it, and knows
/// its call ids, so new calls never reuse one.
fn session_link(myself: &ActorRef<SessionMsg>, args: &SessionArgs) -> SessionLink {
    let offset = args.history.iter().map(|i| i.created_at().micros + 1).max().unwrap_or(0);
    let clock = SessionClock::new(offset, args.options.max_tool_calls_per_turn);
    clock.mark_call_ids(args.history.iter().filter_map(|item| match item {
        ChatItem::FunctionCall(c) => Some(c.call_id.as_str()),
        ChatItem::FunctionCallOutput(o) => Some(o.call_id.as_str()),
        _ => None,
    }));
    SessionLink {
        actor: myself.clone(),
        clock,
        id: Arc::from(args.id.as_str()),
        lifecycle: LifecycleSink::new(&args.id, args.lifecycle.clone(), args.lifecycle_hub.clone()),
        span: Arc::new(tracing::info_span!(parent: None, "session", session_id = %args.id)),
        closed: Arc::clone(&args.closed),
        text_wanted: Default::default(),
    }
}

/// Spawns the session-scoped async toolsets under the Session.
async fn spawn_session_toolsets(
    args: &SessionArgs,
    link: &SessionLink,
    coalescer: &CoalescerSlot,
    agent_id: &str,
    supervisor: ActorCell,
) -> Result<BTreeMap<String, ActorRef<ToolsetMsg>>, SpawnErr> {
    let mut toolsets = BTreeMap::new();
    for set in args.catalog.async_toolsets(Scope::Session) {
        let templates =
            Templates::resolve(&[set.templates.as_ref(), args.options.templates.as_ref()]);
        let toolset_args = ToolsetArgs {
            id: set.id.clone(),
            agent_id: agent_id.into(),
            catalog: Arc::clone(&args.catalog),
            session: link.clone(),
            coalescer: coalescer.clone(),
            templates,
            calls: args.options.call_policy(args.before_call.clone()),
            scope: Scope::Session,
            userdata: args.userdata.clone(),
        };
        let (toolset, _) =
            Actor::spawn_linked(None, ToolsetActor, toolset_args, supervisor.clone()).await?;
        toolsets.insert(set.id.clone(), toolset);
    }
    Ok(toolsets)
}
