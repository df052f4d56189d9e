//! The Session actor: one per conversation, the root of its actor tree.
//!
//! It owns what must outlive an Activity: the session history, every agent's chat context,
//! agent and user state, the running-call index and the idle decision. It is the front door
//! for every speech (it numbers them `s1`, `s2`, …) and the one place events fan out to
//! subscribers, so their order is the order its mailbox received them in. A handler never
//! asks a child and waits for the answer (children ask the Session, never the reverse); it
//! only awaits a child's spawn, or its stop once the child has nothing left to do.
//!
//! Command, fact, apply (docs/decisions.md#session-facts): a message is a command; the
//! transition it goes to (one file per concern here) reads the state and decides; what it
//! changes is a typed [`Fact`](parts::fact::Fact) that `dispatch.rs` routes to the concerns
//! owning that state (`parts/`, one file each, fields private). `parts/` imports nothing from
//! this folder, so the files layer: parts → `state.rs` → transitions → `dispatch.rs` → here.

mod agent;
mod calls;
mod close;
mod commands;
mod conversation;
mod dispatch;
mod floor;
mod handoff;
mod idle;
mod inputs;
mod parts;
mod presence;
mod replies;
mod resume;
mod run;
mod state;
mod supervision;

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::call_ids::derived_base;
use colloquy_model::{Agent, ChatContext, ChatItem, EventKind, FunctionTool, Role, Toolset};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use dispatch::FollowUp;
use parts::activity_factory::ActivityFactory;
pub(crate) use parts::journal::Durable;
use parts::journal::JournalOut;
use state::SessionState;

use crate::catalog::ToolCatalog;
use crate::messages::{
    CloseCallback, ClosedSession, CoalescerSlot, HostMsg, Plugins, SessionLink, SessionMsg,
    SessionShared, Subscriber,
};
use crate::support::clock::SessionClock;
use crate::support::lifecycle_sink::LifecycleSink;
use crate::types::lifecycle::{ActorKind, Lifecycle};
use crate::types::options::SessionOptions;

pub(crate) struct SessionActor;

/// What the builder hands the Session; it becomes the [`SessionLink`] every child shares, and
/// the Session's own state.
pub(crate) struct SessionArgs {
    pub id: String,
    pub agent: Agent,
    /// The first agent's tools, already checked by the builder.
    pub catalog: Arc<ToolCatalog>,
    /// Tools and toolsets placed on the session (for the catalogs of later agents).
    pub session_tools: Vec<FunctionTool>,
    pub session_toolsets: Vec<Toolset>,
    pub options: SessionOptions,
    pub plugins: Plugins,
    pub history: Vec<ChatItem>,
    pub subscribers: Vec<Subscriber>,
    /// The session's own lifecycle subscriber and its host's.
    pub lifecycle: LifecycleSink,
    /// The host's close callback.
    pub on_close: Option<CloseCallback>,
    /// Where the final history goes when the session closes (shared with its handles).
    pub closed: Arc<std::sync::OnceLock<ClosedSession>>,
    /// Where its journal goes, if anywhere, under the lease this process took
    /// (docs/durability.md).
    pub store: Option<Durable>,
    /// What it resumes from, when it resumes.
    pub resume: Option<Resume>,
}

/// What a resumed session starts from, besides its history: every agent's context, where its
/// journal goes on, and the calls that were running when its process ended.
pub(crate) struct Resume {
    pub contexts: BTreeMap<String, Vec<ChatItem>>,
    pub last_seq: u64,
    pub in_doubt: Vec<colloquy_store::CallInDoubt>,
    /// Deferred replies no reply had taken: the model is owed them.
    pub owed: Vec<colloquy_store::OwedReply>,
    /// The results `idempotent` tools remembered, by result key.
    pub remembered: BTreeMap<String, colloquy_store::RememberedResult>,
    /// The ids of the commands it took, oldest first.
    pub commands: Vec<String>,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        mut args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let link = session_link(&myself, &mut args);
        let agent_id = args.agent.id().to_string();
        let previous_agent = args.history.iter().rev().find_map(|item| match item {
            ChatItem::AgentHandoff(h) => Some(h.new_agent.clone()),
            _ => None,
        });
        let mut contexts = BTreeMap::new();
        match &mut args.resume {
            Some(resume) => {
                for (agent, items) in std::mem::take(&mut resume.contexts) {
                    contexts.insert(agent, Arc::new(ChatContext::from_items(items)));
                }
                contexts.entry(agent_id.clone()).or_default();
            }
            None => {
                let restored: Vec<ChatItem> = args
                    .history
                    .iter()
                    .filter(|i| !matches!(i, ChatItem::AgentHandoff(_)))
                    .cloned()
                    .collect();
                contexts.insert(agent_id.clone(), Arc::new(ChatContext::from_items(restored)));
            }
        }
        let (tools, toolsets) = (args.session_tools, args.session_toolsets);
        let factory = ActivityFactory::new(
            link.clone(),
            &args.catalog,
            tools,
            toolsets,
            &agent_id,
            myself.get_cell(),
        )
        .await?;
        let catalog = Arc::clone(&args.catalog);
        let activity =
            factory.spawn(args.agent.clone(), catalog, BTreeMap::new(), myself.get_cell()).await?;
        let last_seq = args.resume.as_ref().map_or(0, |r| r.last_seq);
        let commands =
            args.resume.as_mut().map(|r| std::mem::take(&mut r.commands)).unwrap_or_default();
        let journal =
            args.store.take().map(|durable| JournalOut::spawn(durable, last_seq, myself.clone()));
        if let Some(resume) = args.resume.take() {
            // Its first message: processed after `post_start`, before anything a host sends.
            myself
                .cast(HostMsg::Resumed { in_doubt: resume.in_doubt, owed: resume.owed }.into())?;
        }
        let greets = last_seq == 0;
        Ok(SessionState::new(state::Init {
            link,
            history: ChatContext::from_items(args.history),
            contexts,
            agent: args.agent,
            previous_agent,
            catalog: args.catalog,
            activity,
            factory,
            subscribers: args.subscribers,
            on_close: args.on_close,
            greets,
            journal,
            commands,
        }))
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.link.lifecycle.report(ActorKind::Session, "session", Lifecycle::Started);
        state.start();
        state.flush_journal();
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children_and_wait(Some("session closed".into()), None).await;
        if let Some(journal) = &mut state.host.journal {
            journal.finish().await;
        }
        let reason = state.host.close.reason();
        state.link.lifecycle.report_why(ActorKind::Session, "session", Lifecycle::Stopped, reason);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Session);
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
                    Box::pin(state.enqueue_reply(myself.get_cell(), *pending)).await;
                }
                FollowUp::Drained(kept) => Box::pin(state.activity_drained(kept, &myself)).await,
                FollowUp::ActivityClosed => Box::pin(state.activity_closed(&myself)).await,
            },
            SessionMsg::Timer(message) => state.on_timer(message),
            SessionMsg::Once { id, message } => state.on_once(id, *message),
            #[cfg(feature = "test-hooks")]
            SessionMsg::InjectFailure(target) => state.inject_failure(&target),
        }
        state.flush_journal();
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Session);
        // The default would stop the session when any child ends; report failures instead.
        // Only the current Activity matters: an old one ends on purpose at a handoff.
        let current = state.agent.current.activity().get_id();
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(session = %state.link.id, actor = %cell.get_id(), "actor failed: {err}");
                if let Some((kind, id)) = state.child_name(&cell) {
                    state.link.lifecycle.failed(kind, id, &err);
                }
                state.emit_now(EventKind::error(
                    colloquy_model::ErrorSource::Session,
                    format!("actor failed: {err}"),
                ));
                if cell.get_id() == current {
                    Box::pin(state.activity_lost(&myself, Some(err.to_string()))).await;
                } else {
                    Box::pin(state.session_toolset_lost(&cell, &myself)).await;
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason)
                if !state.host.close.is_closing() && cell.get_id() == current =>
            {
                tracing::warn!(session = %state.link.id, actor = %cell.get_id(), ?reason, "activity stopped");
                Box::pin(state.activity_lost(&myself, reason.or(Some("stopped".into())))).await;
            }
            _ => {}
        }
        state.flush_journal();
        Ok(())
    }
}

/// The tool calls the model made since the last user message of `items` (each once; the
/// pairs of deferred replies are not calls): what a resumed turn has used of its budget.
fn turn_tool_calls<'a>(items: impl Iterator<Item = &'a ChatItem>) -> u32 {
    let mut items: Vec<&ChatItem> = items.collect();
    items.sort_by_key(|item| item.created_at());
    let user = |item: &&ChatItem| item.as_message().is_some_and(|m| m.role == Role::User);
    let turn = items.iter().rposition(user).map_or(0, |at| at + 1);
    let mut calls: Vec<&str> = items[turn..]
        .iter()
        .filter_map(|item| item.as_function_call())
        .map(|call| call.call_id.as_str())
        .filter(|id| derived_base(id).is_none())
        .collect();
    calls.sort_unstable();
    calls.dedup();
    u32::try_from(calls.len()).unwrap_or(u32::MAX)
}

/// The link every child gets: the session's address, clock, lifecycle sink and span, and its
/// options and plug-ins (taken from `args`). The clock starts past the restored history's (and a
/// resume's calls in doubt's) last stamp and item id, so new items sort after it and never share an id with it, and knows its
/// call ids, so new calls never reuse one.
fn session_link(myself: &ActorRef<SessionMsg>, args: &mut SessionArgs) -> SessionLink {
    // A resume's calls in doubt count as history: a blocking step never committed their items,
    // which the resume commits with their first stamps and ids.
    let in_doubt = args.resume.iter().flat_map(|r| &r.in_doubt).map(|d| &d.call);
    let calls: Vec<ChatItem> = in_doubt.map(|c| ChatItem::FunctionCall(c.clone())).collect();
    let known = || args.history.iter().chain(&calls);
    let offset = known().map(|i| i.created_at().micros + 1).max().unwrap_or(0);
    let clock = SessionClock::new(offset, args.options.max_tool_calls_per_turn);
    clock.skip_item_ids(known().map(ChatItem::id));
    clock.mark_call_ids(known().filter_map(|item| match item {
        ChatItem::FunctionCall(c) => Some(c.call_id.as_str()),
        ChatItem::FunctionCallOutput(o) => Some(o.call_id.as_str()),
        _ => None,
    }));
    if args.resume.is_some() {
        clock.resume_turn(turn_tool_calls(known()));
    }
    SessionLink::new(SessionShared {
        actor: myself.clone(),
        clock,
        id: Arc::from(args.id.as_str()),
        lifecycle: std::mem::take(&mut args.lifecycle),
        span: tracing::info_span!(parent: None, "session", session_id = %args.id),
        closed: Arc::clone(&args.closed),
        text_wanted: Default::default(),
        coalescer: CoalescerSlot::default(),
        options: std::mem::take(&mut args.options),
        plugins: args.plugins.clone(),
        durable: args.store.is_some(),
        remembered: Arc::new(
            args.resume.as_mut().map(|r| std::mem::take(&mut r.remembered)).unwrap_or_default(),
        ),
    })
}
