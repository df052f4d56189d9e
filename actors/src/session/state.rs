//! The Session's state: one field per concern, each a type defined (with its fields private)
//! in its own file beside this one — named after the field, except `current` (agent.rs) and
//! `testing` (run.rs) — with the transitions that own it. Other files change a concern only
//! through its methods, which keep its invariant; each file's header says what it reads and
//! writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{Agent, ChatContext};
use ractor::ActorRef;

use super::activity_factory::ActivityFactory;
use super::agent::CurrentAgent;
use super::calls::RunningCalls;
use super::close::CloseState;
use super::conversation::Conversation;
use super::events::Fanout;
use super::floor::Floor;
use super::handoff::PendingHandoff;
use super::idle::IdleWaiters;
use super::inputs::QueuedInputs;
use super::presence::Presence;
use super::replies::Replies;
use super::run::Testing;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, CloseCallback, SessionLink, SessionPart, Subscriber};

/// Everything the Session starts with.
pub(super) struct Init {
    pub link: SessionLink,
    pub history: ChatContext,
    pub contexts: BTreeMap<String, Arc<ChatContext>>,
    /// The first agent.
    pub agent: Agent,
    /// The agent the restored history ended with, if any.
    pub previous_agent: Option<String>,
    pub catalog: Arc<ToolCatalog>,
    pub activity: ActorRef<ActivityMsg>,
    pub factory: ActivityFactory,
    pub subscribers: Vec<Subscriber>,
    pub on_close: Option<CloseCallback>,
}

pub(crate) struct SessionState {
    /// The session's id, options and address, as every child shares them.
    pub(super) link: SessionLink,
    pub(super) conversation: Conversation,
    pub(super) current: CurrentAgent,
    pub(super) handoff: Option<PendingHandoff>,
    pub(super) presence: Presence,
    pub(super) floor: Floor,
    pub(super) inputs: QueuedInputs,
    pub(super) idle: IdleWaiters,
    pub(super) calls: RunningCalls,
    pub(super) replies: Replies,
    pub(super) events: Fanout,
    pub(super) testing: Testing,
    pub(super) close: CloseState,
}

impl SessionState {
    pub(super) fn new(init: Init) -> Self {
        let options = &init.link.options;
        let current = CurrentAgent::new(
            init.agent,
            init.catalog,
            init.activity,
            init.previous_agent,
            init.factory,
            options,
        );
        let text_wanted = init.link.text_wanted.clone();
        let events = Fanout::new(init.subscribers, options.max_unread_events, text_wanted);
        Self {
            link: init.link,
            events,
            conversation: Conversation::new(init.history, init.contexts),
            current,
            handoff: None,
            presence: Presence::default(),
            floor: Floor::default(),
            inputs: QueuedInputs::default(),
            idle: IdleWaiters::default(),
            calls: RunningCalls::default(),
            replies: Replies::default(),
            testing: Testing::default(),
            close: CloseState::new(init.on_close),
        }
    }

    /// The Session's part of a snapshot (`SessionHandle::inspect`).
    pub(super) fn inspect(&self) -> SessionPart {
        let kept = self.handoff.iter().flat_map(|h| h.kept().values());
        let session_toolsets = self.current.factory().session_toolsets().values();
        SessionPart {
            at_ms: self.link.clock.elapsed_ms(),
            session_id: self.link.id.to_string(),
            agent: self.current.id().to_string(),
            agent_state: self.presence.agent(),
            user_state: self.presence.user(),
            closing: self.close.is_closing(),
            activity: self.current.activity().clone(),
            coalescer: self.link.coalescer.get().cloned(),
            toolsets: session_toolsets.chain(kept).cloned().collect(),
        }
    }
}
