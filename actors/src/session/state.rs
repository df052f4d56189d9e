//! The Session's state: the parts of `parts/`, one per concern, gathered in one struct, and
//! what every transition uses (emitting events, committing items, LLM request contexts). The
//! transitions themselves are `impl SessionState` blocks in the files beside this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_core::chat::AgentHandoff;
use colloquy_core::{
    Agent, ChatContext, ChatItem, ErrorSource, EventKind, EventType, FunctionCall, SessionEvent,
    SpeechSource,
};
use colloquy_llm::RequestKind;
use ractor::ActorRef;

use super::parts::agent::CurrentAgent;
use super::parts::calls::{Running, RunningCalls};
use super::parts::close::CloseState;
use super::parts::conversation::Conversation;
use super::parts::events::Fanout;
use super::parts::floor::Floor;
use super::parts::handoff::{ActivityFactory, PendingHandoff};
use super::parts::idle::IdleWaiters;
use super::parts::presence::Presence;
use super::parts::replies::Replies;
use super::parts::run::{Mocks, Run};
use crate::protocol::{
    ActivityMsg, CloseCallback, SessionLink, SessionPart, SpeechContent, Subscriber, ToolsetMsg,
};
use crate::support::catalog::ToolCatalog;
use crate::support::task::OwnedTask;

/// Everything the Session starts with.
pub(crate) struct Init {
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

/// User turns so far, and the current one's `tracing` span (its speeches descend from it).
pub(super) struct Turn {
    seq: u64,
    pub span: tracing::Span,
}

impl Turn {
    /// Starts the next user turn's span.
    pub fn begin(&mut self, parent: &tracing::Span, session_id: &str, agent: &str) {
        self.seq += 1;
        self.span = tracing::info_span!(
            parent: parent,
            "turn",
            session_id = %session_id,
            turn = self.seq,
            agent = %agent,
        );
    }
}

impl Default for Turn {
    fn default() -> Self {
        Self { seq: 0, span: tracing::Span::none() }
    }
}

pub(crate) struct SessionState {
    /// The session's id, options and address, as every child shares them.
    pub(super) link: SessionLink,
    pub(super) conversation: Conversation,
    pub(super) current: CurrentAgent,
    /// The agent the restored history ended with, until the first agent has entered.
    previous_agent: Option<String>,
    /// Starts Activities (the first, and one per handoff).
    pub(super) factory: ActivityFactory,
    pub(super) handoff: Option<PendingHandoff>,
    /// The drain timer of a handoff or close in progress.
    pub(super) drain_timer: Option<OwnedTask>,
    pub(super) presence: Presence,
    pub(super) turn: Turn,
    pub(super) floor: Floor,
    pub(super) idle_waiters: IdleWaiters,
    pub(super) calls: RunningCalls,
    pub(super) replies: Replies,
    pub(super) events: Fanout,
    pub(super) run: Option<Run>,
    pub(super) mocks: Mocks,
    pub(super) close: CloseState,
}

impl SessionState {
    pub fn new(init: Init) -> Self {
        let options = &init.link.options;
        let current = CurrentAgent::new(init.agent, init.catalog, init.activity, options);
        let text_wanted = init.link.text_wanted.clone();
        let events = Fanout::new(init.subscribers, options.max_unread_events, text_wanted);
        Self {
            link: init.link,
            events,
            conversation: Conversation::new(init.history, init.contexts),
            current,
            previous_agent: init.previous_agent,
            factory: init.factory,
            handoff: None,
            drain_timer: None,
            presence: Presence::default(),
            turn: Turn::default(),
            floor: Floor::default(),
            idle_waiters: IdleWaiters::default(),
            calls: RunningCalls::default(),
            replies: Replies::default(),
            run: None,
            mocks: Mocks::default(),
            close: CloseState::new(init.on_close),
        }
    }

    /// The Session's part of a snapshot (`SessionHandle::inspect`).
    pub fn inspect(&self) -> SessionPart {
        let kept = self.handoff.iter().flat_map(|h| h.kept.values());
        SessionPart {
            at_ms: self.link.clock.elapsed_ms(),
            session_id: self.link.id.to_string(),
            agent: self.current.id.clone(),
            agent_state: self.presence.agent,
            user_state: self.presence.user,
            closing: self.close.is_closing(),
            activity: self.current.activity.clone(),
            coalescer: self.link.coalescer.get().cloned(),
            toolsets: self.factory.session_toolsets.values().chain(kept).cloned().collect(),
        }
    }

    /// Records the first agent's entry and moves to listening.
    pub fn start(&mut self) {
        let previous_agent = self.previous_agent.take();
        let item = ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: previous_agent.clone(),
            new_agent: self.current.id.clone(),
            created_at: self.link.clock.now(),
        });
        let item = self.conversation.mark_handoff(item);
        self.emit_now(EventKind::AgentHandoff {
            old_agent: previous_agent,
            new_agent: self.current.id.clone(),
        });
        self.emit_now(EventKind::ConversationItemAdded { item });
        self.set_agent_state(colloquy_core::AgentState::Listening);
        if let Some(instructions) = self.current.agent.on_enter_instructions() {
            self.start_on_enter(instructions.to_string());
        }
    }

    /// The entering agent's greeting (`Agent::on_enter_reply`).
    pub(super) fn start_on_enter(&mut self, instructions: String) {
        let content = SpeechContent::Reply {
            kind: RequestKind::OnEnter,
            extra_instructions: Some(instructions),
            tool_choice: None,
        };
        let _ = self.create_speech(SpeechSource::OnEnter, content);
    }

    pub fn emit_now(&mut self, kind: EventKind) {
        let event = SessionEvent { at_ms: self.link.clock.elapsed_ms(), kind };
        self.emit(event);
    }

    /// Fans an event out, after what it says about the session: an LLM error fails the run
    /// in progress, and a call's end leaves the running-call index.
    pub fn emit(&mut self, event: SessionEvent) {
        match &event.kind {
            EventKind::Error { source: ErrorSource::Llm, message, .. } => {
                if let Some(run) = &mut self.run {
                    run.failure.get_or_insert_with(|| message.clone());
                }
            }
            EventKind::ToolApprovalRequested { call_id, .. } => {
                self.calls.set_awaiting(call_id, true)
            }
            EventKind::ToolCallApproved { call_id } => self.calls.set_awaiting(call_id, false),
            EventKind::ToolCallEnded { call_id, .. } => {
                self.calls.remove(call_id);
                // The last tool to land restarts the away window in full (§10.4).
                self.update_away_timer(true);
                self.release_idle_waiters();
            }
            _ => {}
        }
        self.events.send(event, &self.link.id, &self.link.clock);
    }

    /// Commits items a speech (`speech_id`) or a toolset produced to `agent`'s context and
    /// the history.
    pub fn commit(&mut self, agent: &str, speech_id: Option<&str>, items: Vec<ChatItem>) {
        if let Some(speech_id) = speech_id {
            self.replies.said(speech_id);
        }
        if let Some(run) = &mut self.run
            && speech_id.is_some_and(|id| run.speeches.contains(id))
        {
            let catalog = (agent == self.current.id).then_some(&*self.current.catalog);
            run.record(&items, catalog);
        }
        let notify = self.events.wants(EventType::ConversationItemAdded);
        for item in self.conversation.commit(agent, items, notify) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
    }

    /// A toolset registered a call.
    pub fn call_registered(
        &mut self,
        call: FunctionCall,
        toolset: ActorRef<ToolsetMsg>,
        cancellable: bool,
        agent_scoped: bool,
    ) {
        let (call_id, name) = (call.call_id.clone(), call.name.clone());
        let awaiting_approval = false; // until its toolset's request event
        self.calls.insert(Running { call, toolset, cancellable, agent_scoped, awaiting_approval });
        self.update_away_timer(false);
        self.emit_now(EventKind::ToolCallStarted { call_id, name });
    }

    /// `agent`'s context for an LLM request, with a placeholder pair for every running call
    /// it does not mention (§16).
    pub fn request_context(&self, agent: &str) -> Option<Arc<ChatContext>> {
        self.conversation.context(agent).map(|context| self.calls.with_placeholders(context))
    }
}
