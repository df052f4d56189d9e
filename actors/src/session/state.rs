//! The Session's state and its transitions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use colloquy_core::chat::AgentHandoff;
use colloquy_core::templates::call_ids_json;
use colloquy_core::{
    Agent, AgentState, ChatContext, ChatItem, ErrorSource, EventFilter, EventKind, EventType,
    FunctionCall, FunctionCallOutput, FunctionTool, Message, ReplyStatus, ResolvedTemplates, Role,
    RunResult, SessionEvent, SpeechSource, Templates, UserState,
};
use colloquy_llm::{RequestKind, ToolChoice};
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::{broadcast, mpsc};

use super::handoff::{ActivityFactory, PendingHandoff, Queued};
use crate::catalog::{Scope, ToolCatalog};
use crate::error::{CancelError, SessionError};
use crate::lifecycle::ActorKind;
use crate::options::SessionOptions;
use crate::protocol::{
    ActivityMsg, CloseCallback, ClosedSession, CoalescerMsg, CoalescerSlot, MockScope,
    PendingReply, RunningToolCall, SessionLink, SessionMsg, SpeechContent, SpeechJob, ToolsetMsg,
};
use crate::task::OwnedTask;

/// A running call, as the Session knows it.
struct Running {
    call: FunctionCall,
    toolset: ActorRef<ToolsetMsg>,
    cancellable: bool,
    /// Run by the current agent's toolsets (drained at handoff).
    agent_scoped: bool,
}

/// Marks a placeholder copy of a running call in an LLM request (§16).
const PLACEHOLDER: &str = "__colloquy_running_call_placeholder";

/// The output a running call shows in requests made while it runs (§16).
pub(crate) const STILL_RUNNING: &str = "The tool call is still in progress.";

/// Everything the Session starts with.
pub(crate) struct Init {
    pub id: String,
    pub link: SessionLink,
    pub options: SessionOptions,
    pub history: ChatContext,
    pub contexts: BTreeMap<String, Arc<ChatContext>>,
    pub agent_id: String,
    /// The first agent (kept to restart its Activity if it fails).
    pub agent: Agent,
    pub previous_agent: Option<String>,
    /// The first agent's `on_enter` reply instructions.
    pub on_enter: Option<String>,
    pub allow_interruptions: bool,
    pub catalog: Arc<ToolCatalog>,
    pub templates: ResolvedTemplates,
    pub coalescer: CoalescerSlot,
    pub activity: ActorRef<ActivityMsg>,
    pub factory: ActivityFactory,
    pub subscribers: Vec<(EventFilter, mpsc::Sender<SessionEvent>)>,
    pub on_close: Option<CloseCallback>,
}

/// A `run` in progress: the speeches it watches and the items they committed.
struct RunTracker {
    speeches: BTreeSet<String>,
    /// Pairs inserted during the run whose deferred reply is not admitted yet: the run waits
    /// for that reply too (§9.1 step 4).
    pending_updates: BTreeSet<String>,
    /// Floor holds granted while the run was active: the run stays open until they end.
    holds: BTreeSet<u64>,
    items: Vec<ChatItem>,
    failure: Option<String>,
    reply: RpcReplyPort<Result<RunResult, SessionError>>,
}

struct Closing {
    reason: String,
    waiters: Vec<RpcReplyPort<ClosedSession>>,
    /// The activity has no speech left; the close completes once no call runs either.
    activity_quiet: bool,
    /// The tree is stopped and `session_closed` emitted.
    finished: bool,
}

pub(crate) struct SessionState {
    pub id: String,
    link: SessionLink,
    options: SessionOptions,
    pub history: ChatContext,
    /// Every agent's chat context, shared with in-flight LLM requests (copy on write).
    pub contexts: BTreeMap<String, Arc<ChatContext>>,
    agent_id: String,
    /// The current agent, to restart its Activity after a failure.
    agent: Agent,
    previous_agent: Option<String>,
    on_enter: Option<String>,
    allow_interruptions: bool,
    /// The current agent's tools.
    catalog: Arc<ToolCatalog>,
    /// Mocked tool bodies by scope, then tool name.
    mocks: BTreeMap<MockScope, BTreeMap<String, FunctionTool>>,
    /// The current agent's templates.
    templates: ResolvedTemplates,
    coalescer: CoalescerSlot,
    /// Update ids of inserted pairs still waiting for their deferred reply to be admitted.
    unreplied: BTreeSet<String>,
    /// The coalescer was told the floor is free (`SessionIdle`) and has not offered since.
    invited: bool,
    /// Deferred-reply speeches in flight: their update ids, whether they said anything, and
    /// whether another agent than the receiving one delivers them.
    deferred: BTreeMap<String, (Vec<String>, bool, bool)>,
    /// The floor hold in force (a tool's `foreground`), and holds waiting for it.
    held: Option<u64>,
    /// Speeches that released the floor to wait for their blocking tools.
    waiting_speeches: BTreeSet<String>,
    hold_waiters: Vec<(u64, RpcReplyPort<Result<u64, SessionError>>)>,
    hold_seq: u64,
    pub activity: ActorRef<ActivityMsg>,
    /// Starts Activities (the first, and one per handoff).
    factory: ActivityFactory,
    /// A handoff in progress.
    handoff: Option<PendingHandoff>,
    pub agent_state: AgentState,
    pub user_state: UserState,
    speech_seq: u64,
    /// User turns so far, and the current one's `tracing` span (its speeches descend from it).
    turn_seq: u64,
    turn_span: tracing::Span,
    /// Speeches created and not yet done (queued, playing, or waiting on blocking tools).
    pending_speeches: usize,
    /// Running calls by call id (registered by toolsets, removed by `tool_call_ended`).
    /// Boxed: a map's first node holds room for eleven entries, and a running call is large.
    running_calls: BTreeMap<String, Box<Running>>,
    pub subscribers: Vec<(EventFilter, mpsc::Sender<SessionEvent>)>,
    pub broadcasts: Vec<broadcast::Sender<SessionEvent>>,
    /// Callers of `wait_for_idle` (`false`) and `wait_for_quiet` (`true`).
    idle_waiters: Vec<(RpcReplyPort<Result<(), SessionError>>, bool)>,
    closing: Option<Closing>,
    run: Option<RunTracker>,
    away_timer: Option<OwnedTask>,
    away_generation: u64,
    /// End the session once this speech is done (speech id, close reason), and its watchdog.
    end_after: Option<(String, String)>,
    end_timer: Option<OwnedTask>,
    /// The host's close callback.
    on_close: Option<CloseCallback>,
    /// The drain timer of a handoff or close in progress.
    drain_timer: Option<OwnedTask>,
}

impl SessionState {
    pub fn new(init: Init) -> Self {
        Self {
            id: init.id,
            link: init.link,
            options: init.options,
            history: init.history,
            contexts: init.contexts,
            agent_id: init.agent_id,
            agent: init.agent,
            previous_agent: init.previous_agent,
            on_enter: init.on_enter,
            allow_interruptions: init.allow_interruptions,
            catalog: init.catalog,
            mocks: BTreeMap::new(),
            templates: init.templates,
            coalescer: init.coalescer,
            unreplied: BTreeSet::new(),
            invited: false,
            deferred: BTreeMap::new(),
            held: None,
            waiting_speeches: BTreeSet::new(),
            hold_waiters: Vec::new(),
            hold_seq: 0,
            activity: init.activity,
            factory: init.factory,
            handoff: None,
            agent_state: AgentState::Initializing,
            user_state: UserState::Listening,
            speech_seq: 0,
            turn_seq: 0,
            turn_span: tracing::Span::none(),
            pending_speeches: 0,
            running_calls: BTreeMap::new(),
            subscribers: init.subscribers,
            broadcasts: Vec::new(),
            idle_waiters: Vec::new(),
            closing: None,
            run: None,
            away_timer: None,
            away_generation: 0,
            drain_timer: None,
            end_after: None,
            end_timer: None,
            on_close: init.on_close,
        }
    }

    /// The Session's part of a snapshot (`SessionHandle::inspect`).
    pub fn inspect(&self) -> crate::protocol::SessionPart {
        let kept = self.handoff.iter().flat_map(|h| h.kept.values());
        crate::protocol::SessionPart {
            at_ms: self.link.clock.elapsed_ms(),
            session_id: self.id.clone(),
            agent: self.agent_id.clone(),
            agent_state: self.agent_state,
            user_state: self.user_state,
            closing: self.closing.is_some(),
            activity: self.activity.clone(),
            coalescer: self.coalescer.get().cloned(),
            toolsets: self.factory.session_toolsets.values().chain(kept).cloned().collect(),
        }
    }

    /// Forwards a toolset's pair to the coalescer, spawning it first if need be.
    pub async fn enqueue_reply(&mut self, supervisor: ractor::ActorCell, pending: PendingReply) {
        if let Err(e) =
            crate::coalescer::forward(&self.coalescer, &self.link, supervisor, pending).await
        {
            // Only a session already stopping fails to spawn a child.
            tracing::warn!(session = %self.id, "reply coalescer did not start: {e}");
        }
        self.invite_coalescer();
    }

    /// Tells the coalescer the floor is free (`SessionIdle`) when a deferred reply could start
    /// now, unless it was told already: it offers what it holds once, when told (decision 17).
    /// Pairs that land while the session is busy wait for the floor and go out together.
    fn invite_coalescer(&mut self) {
        if self.invited
            || self.unreplied.is_empty()
            || self.closing.is_some()
            || self.held.is_some()
            || !self.floor_free()
        {
            return;
        }
        if let Some(coalescer) = self.coalescer.get() {
            self.invited = coalescer.cast(CoalescerMsg::SessionIdle).is_ok();
        }
    }

    pub fn link(&self) -> &SessionLink {
        &self.link
    }

    /// Records the first handoff and moves to listening.
    pub fn start(&mut self) {
        let item = ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: self.previous_agent.clone(),
            new_agent: self.agent_id.clone(),
            created_at: self.link.clock.now(),
        });
        let item = Arc::new(item);
        self.history.insert(Arc::clone(&item));
        self.emit_now(EventKind::AgentHandoff {
            old_agent: self.previous_agent.clone(),
            new_agent: self.agent_id.clone(),
        });
        self.emit_now(EventKind::ConversationItemAdded { item });
        self.set_agent_state(AgentState::Listening);
        if let Some(instructions) = self.on_enter.take() {
            self.start_on_enter(instructions);
        }
    }

    /// The entering agent's greeting (`Agent::on_enter_reply`).
    fn start_on_enter(&mut self, instructions: String) {
        let content = SpeechContent::Reply {
            kind: RequestKind::OnEnter,
            extra_instructions: Some(instructions),
            tool_choice: None,
        };
        let _ = self.create_speech(SpeechSource::OnEnter, content);
    }

    /// Nobody holds or waits for the floor: no speech is queued, playing or waiting for
    /// blocking tools, and the user is not speaking. A deferred reply may start.
    fn floor_free(&self) -> bool {
        self.pending_speeches == 0
            && self.user_state != UserState::Speaking
            && self.handoff.is_none()
    }

    /// Idle (decision 8): the floor is free and no deferred reply is pending; `quiet` also
    /// asks that no tool call runs at all.
    fn is_idle(&self, quiet: bool) -> bool {
        self.floor_free()
            && self.held.is_none()
            && self.unreplied.is_empty()
            && (!quiet || self.running_calls.is_empty())
    }

    // ---- events ----

    pub fn emit_now(&mut self, kind: EventKind) {
        let event = SessionEvent { at_ms: self.link.clock.elapsed_ms(), kind };
        self.emit(event);
    }

    /// Whether anyone listens to events of this type (an event nobody wants need not be
    /// built).
    fn wants(&self, event_type: EventType) -> bool {
        !self.broadcasts.is_empty()
            || self.subscribers.iter().any(|(filter, _)| filter.contains(event_type))
    }

    /// Fans an event out to the subscribers that want its type; a subscriber that went away is
    /// dropped (when its next event comes).
    pub fn emit(&mut self, event: SessionEvent) {
        match &event.kind {
            EventKind::Error { source: ErrorSource::Llm, message, .. } => {
                if let Some(run) = &mut self.run {
                    run.failure.get_or_insert_with(|| message.clone());
                }
            }
            EventKind::ToolCallEnded { call_id, .. } => {
                self.running_calls.remove(call_id);
                // The last tool to land restarts the away window in full (§10.4).
                self.update_away_timer(true);
                self.release_idle_waiters();
            }
            _ => {}
        }
        self.broadcasts.retain(|tx| tx.receiver_count() > 0);
        // Every recipient but the last gets a copy; the last one gets the event itself.
        let event_type = event.kind.event_type();
        let wanted = self.subscribers.iter().filter(|(filter, _)| filter.contains(event_type));
        let mut left = wanted.count() + self.broadcasts.len();
        let mut event = Some(event);
        let mut next = || {
            left = left.saturating_sub(1);
            if left == 0 { event.take() } else { event.clone() }
        };
        let limit = self.options.max_unread_events;
        let (session_id, clock) = (&self.id, &self.link.clock);
        self.subscribers.retain(|(filter, tx)| {
            if !filter.contains(event_type) {
                return true;
            }
            let Some(event) = next() else { return true };
            if tx.max_capacity() - tx.capacity() < limit {
                return tx.try_send(event).is_ok();
            }
            tracing::warn!(session = %session_id, limit, "an event subscriber stopped reading: its stream is closed");
            let kind = EventKind::StreamOverflowed { unread: limit };
            let _ = tx.try_send(SessionEvent { at_ms: clock.elapsed_ms(), kind });
            false
        });
        for tx in &self.broadcasts {
            if let Some(event) = next() {
                let _ = tx.send(event);
            }
        }
    }

    // ---- history ----

    pub fn commit(&mut self, agent: &str, speech_id: Option<&str>, items: Vec<ChatItem>) {
        if let Some((_, said, _)) = speech_id.and_then(|id| self.deferred.get_mut(id)) {
            *said = true;
        }
        if let Some(run) = &mut self.run
            && speech_id.is_some_and(|id| run.speeches.contains(id))
        {
            run.items.extend(items.iter().cloned());
        }
        let notify = self.wants(EventType::ConversationItemAdded);
        let mut added = Vec::new();
        let context = match self.contexts.get_mut(agent) {
            Some(context) => context,
            None => self.contexts.entry(agent.to_string()).or_default(),
        };
        let context = Arc::make_mut(context);
        for item in items {
            let item = Arc::new(item);
            if !matches!(*item, ChatItem::AgentHandoff(_)) {
                context.insert(Arc::clone(&item));
            }
            if notify {
                added.push(Arc::clone(&item));
            }
            self.history.insert(item);
        }
        for item in added {
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
        let running = Box::new(Running { call, toolset, cancellable, agent_scoped });
        self.running_calls.insert(call_id.clone(), running);
        self.update_away_timer(false);
        self.emit_now(EventKind::ToolCallStarted { call_id, name });
    }

    /// The current agent's context for an LLM request, with a placeholder pair for every
    /// running call it does not mention (§16): never persisted.
    pub fn request_context(&self, agent: &str) -> Option<Arc<ChatContext>> {
        let context = self.contexts.get(agent)?;
        // Few calls run at a time: scanning the context (from the end, where they are) per
        // running call is cheaper than indexing every call id of the conversation per request.
        let mentions = |call_id: &str| {
            context.iter().rev().any(|item| match item {
                ChatItem::FunctionCall(c) => c.call_id == call_id,
                ChatItem::FunctionCallOutput(o) => o.call_id == call_id,
                _ => false,
            })
        };
        let missing: Vec<&FunctionCall> = self
            .running_calls
            .values()
            .map(|r| &r.call)
            .filter(|c| !mentions(&c.call_id))
            .collect();
        if missing.is_empty() {
            return Some(Arc::clone(context));
        }
        let mut with_placeholders = ChatContext::clone(context);
        for call in missing {
            let mut copy = call.clone();
            copy.extra.insert(PLACEHOLDER.into(), serde_json::Value::Bool(true));
            let output = FunctionCallOutput {
                id: format!("{}/placeholder", call.id),
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                output: STILL_RUNNING.into(),
                is_error: false,
                reply_required: true,
                created_at: call.created_at,
            };
            with_placeholders.insert(ChatItem::FunctionCall(copy));
            with_placeholders.insert(ChatItem::FunctionCallOutput(output));
        }
        Some(Arc::new(with_placeholders))
    }

    /// Asks the call's toolset to cancel it; the toolset answers the caller.
    pub fn cancel_call(&mut self, call_id: String, reply: RpcReplyPort<Result<(), CancelError>>) {
        match self.running_calls.get(&call_id) {
            Some(running) => {
                let cancel = ToolsetMsg::Cancel { call_id, reply: Some(reply), drain: false };
                let _ = running.toolset.cast(cancel);
            }
            None => {
                let _ = reply.send(Err(CancelError::NotFound(call_id)));
            }
        }
    }

    /// The calls running now, in call-id order.
    pub fn running_tool_calls(&self) -> Vec<RunningToolCall> {
        self.running_calls
            .values()
            .map(|r| RunningToolCall {
                call_id: r.call.call_id.clone(),
                name: r.call.name.clone(),
                arguments: r.call.arguments.clone(),
                cancellable: r.cancellable,
            })
            .collect()
    }

    // ---- deferred replies ----

    /// A pair was inserted and waits for a deferred reply.
    pub fn await_reply(&mut self, update_id: String) {
        if self.closing.is_some() {
            return; // replies pending at close are dropped (§9.3)
        }
        if let Some(run) = &mut self.run {
            run.pending_updates.insert(update_id.clone());
        }
        self.unreplied.insert(update_id);
        self.invite_coalescer();
    }

    /// The ReplyCoalescer offers its pending pairs (it was invited). Admitted only if the
    /// floor is still free, inside this handler, so a user turn that arrived first always
    /// wins (decision 17); the answer goes back to the coalescer.
    pub fn offer_reply(&mut self, batch: &[Arc<PendingReply>], coalescer: &ActorRef<CoalescerMsg>) {
        self.invited = false;
        let answer = match self.admit_reply(batch) {
            true => CoalescerMsg::Admitted,
            false => CoalescerMsg::Busy,
        };
        let _ = coalescer.cast(answer);
        // Pairs the coalescer got after it offered, if nothing took the floor meanwhile.
        self.invite_coalescer();
    }

    fn admit_reply(&mut self, batch: &[Arc<PendingReply>]) -> bool {
        if self.closing.is_some() {
            return true; // pending replies are dropped at close (§9.3)
        }
        if !self.floor_free() || self.held.is_some() {
            return false;
        }
        let batch: Vec<&Arc<PendingReply>> =
            batch.iter().filter(|p| self.unreplied.remove(&p.update_id)).collect();
        let Some(last) = batch.last() else { return true };
        let update_ids: Vec<String> = batch.iter().map(|p| p.update_id.clone()).collect();
        // At tail ⇔ the newest pending output is still the agent's last item (§9.2 step 5).
        let at_tail = self
            .contexts
            .get(&self.agent_id)
            .and_then(|ctx| ctx.items().last())
            .is_some_and(|item| item.id() == last.output_item_id);
        let template = if at_tail {
            &self.templates.reply_at_tail
        } else {
            &self.templates.reply_maybe_covered
        };
        let call_ids = call_ids_json(&update_ids);
        let instructions = match template.render_with(&[("call_ids", &call_ids)]) {
            Ok(text) => text,
            Err(e) => {
                self.emit_now(EventKind::error(ErrorSource::Session, e.to_string()));
                return true;
            }
        };
        // Decision 15: only updates → `none`; at least one final → unset.
        let tool_choice = (!batch.iter().any(|p| p.is_final)).then_some(ToolChoice::None);
        let handoff = batch.iter().any(|p| *p.agent != *self.agent_id);
        // Decision 4: pairs received by an agent that is gone are persisted into the context
        // of the agent delivering them.
        let moved: Vec<Arc<ChatItem>> = batch
            .iter()
            .filter(|p| *p.agent != *self.agent_id)
            .filter_map(|p| self.contexts.get(&*p.agent).map(|ctx| (p, ctx)))
            .flat_map(|(p, ctx)| {
                ctx.items()
                    .iter()
                    .filter(|item| match &***item {
                        ChatItem::FunctionCall(c) => c.call_id == p.update_id,
                        ChatItem::FunctionCallOutput(o) => o.call_id == p.update_id,
                        _ => false,
                    })
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        if !moved.is_empty() {
            let context = Arc::make_mut(self.contexts.entry(self.agent_id.clone()).or_default());
            for item in moved {
                context.insert(item);
            }
        }
        let content = SpeechContent::Reply {
            kind: RequestKind::DeferredReply,
            extra_instructions: Some(instructions),
            tool_choice,
        };
        if let Some(run) = &mut self.run {
            for id in &update_ids {
                run.pending_updates.remove(id);
            }
        }
        let speech_id = format!("s{}", self.speech_seq + 1);
        if self.create_speech(SpeechSource::DeferredReply, content).is_err() {
            return true;
        }
        self.deferred.insert(speech_id.clone(), (update_ids.clone(), false, handoff));
        self.emit_now(EventKind::ToolReplyUpdated {
            update_ids,
            status: ReplyStatus::Scheduled,
            speech_id,
            handoff,
        });
        true
    }

    // ---- speeches ----

    pub fn user_turn(&mut self, text: String) -> Result<(), SessionError> {
        if self.closing.is_some() {
            return Err(SessionError::Closed);
        }
        if let Some(handoff) = &mut self.handoff {
            // Decision 22: turns arriving during a handoff go to the new agent.
            handoff.queued.push(Queued::UserTurn(text));
            return Ok(());
        }
        if self.user_state == UserState::Away {
            self.set_user_state(UserState::Listening);
        }
        // With no speech pending the Activity has nothing to interrupt (its speeches report
        // done only once they have ended): the message would change nothing.
        if self.pending_speeches > 0 {
            let _ = self.activity.cast(ActivityMsg::Interrupt { reply: None });
        }
        let message = ChatItem::Message(Message {
            id: self.link.clock.item_id(),
            role: Role::User,
            text,
            interrupted: false,
            created_at: self.link.clock.now(),
        });
        let agent = self.agent_id.clone();
        self.commit(&agent, None, vec![message]);
        self.turn_seq += 1;
        self.turn_span = tracing::info_span!(
            parent: &*self.link.span,
            "turn",
            session_id = %self.id,
            turn = self.turn_seq,
            agent = %self.agent_id,
        );
        let content = SpeechContent::Reply {
            kind: RequestKind::UserTurn,
            extra_instructions: None,
            tool_choice: None,
        };
        self.create_speech(SpeechSource::UserTurn, content)
    }

    pub fn create_speech(
        &mut self,
        source: SpeechSource,
        content: SpeechContent,
    ) -> Result<(), SessionError> {
        if self.closing.is_some() {
            return Err(SessionError::Closed);
        }
        if let Some(handoff) = &mut self.handoff {
            handoff.queued.push(Queued::Speech(source, content));
            return Ok(());
        }
        self.speech_seq += 1;
        let speech_id = format!("s{}", self.speech_seq);
        if let Some(run) = &mut self.run {
            // Speeches created while a run is active belong to it (§17.1).
            run.speeches.insert(speech_id.clone());
        }
        self.pending_speeches += 1;
        self.update_away_timer(false);
        self.emit_now(EventKind::SpeechCreated { speech_id: speech_id.clone(), source });
        let parent = match source {
            SpeechSource::UserTurn => &self.turn_span,
            _ => &*self.link.span,
        };
        let span = tracing::info_span!(
            parent: parent,
            "speech",
            session_id = %self.id,
            speech_id = %speech_id,
            source = ?source,
            agent = %self.agent_id,
        );
        let allow_interruptions = self.allow_interruptions;
        let job = SpeechJob { speech_id, content, allow_interruptions, span };
        if let Err(e) = self.activity.cast(ActivityMsg::Speak(job)) {
            // Only after an Activity failure: report the speech as done so idle holds.
            if let ractor::MessagingErr::SendErr(ActivityMsg::Speak(job)) = e {
                self.speech_done(job.speech_id, true);
            }
            return Err(SessionError::Closed);
        }
        Ok(())
    }

    pub fn speech_done(&mut self, speech_id: String, interrupted: bool) {
        let ends_session = self.end_after.as_ref().is_some_and(|(id, _)| *id == speech_id);
        self.pending_speeches = self.pending_speeches.saturating_sub(1);
        self.waiting_speeches.remove(&speech_id);
        if let Some(run) = &mut self.run {
            run.speeches.remove(&speech_id);
        }
        self.emit_now(EventKind::SpeechDone { speech_id: speech_id.clone(), interrupted });
        if let Some((update_ids, said, handoff)) = self.deferred.remove(&speech_id) {
            let status = match (interrupted, said) {
                (true, _) => ReplyStatus::Interrupted,
                (false, true) => ReplyStatus::Completed,
                (false, false) => ReplyStatus::Skipped,
            };
            let event = EventKind::ToolReplyUpdated { update_ids, status, speech_id, handoff };
            self.emit_now(event);
        }
        // Speeches still pending wait for blocking tools (or are queued): the agent thinks.
        let state =
            if self.pending_speeches == 0 { AgentState::Listening } else { AgentState::Thinking };
        self.set_agent_state(state);
        self.floor_changed();
        if ends_session && let Some((_, reason)) = self.end_after.clone() {
            self.end_now(reason, false);
        }
    }

    /// After anything that may free the floor: offer pending replies, finish a run, release
    /// idle waiters.
    fn floor_changed(&mut self) {
        if self.floor_free() && self.held.is_none() && !self.unreplied.is_empty() {
            self.invite_coalescer();
        } else {
            self.grant_hold();
        }
        let run_done = self.handoff.is_none()
            && self.run.as_ref().is_some_and(|r| {
                r.speeches.is_empty() && r.pending_updates.is_empty() && r.holds.is_empty()
            });
        if run_done {
            self.finish_run(None);
        }
        self.release_idle_waiters();
    }

    // ---- handoff ----

    /// Starts a handoff to `agent` (a tool returned it, or the host asked).
    pub fn request_handoff(&mut self, agent: Arc<Agent>) {
        if self.closing.is_some() {
            return;
        }
        if self.handoff.is_some() {
            let message =
                format!("a handoff is already in progress; `{}` was not entered", agent.id());
            self.emit_now(EventKind::error(ErrorSource::Session, message));
            return;
        }
        let catalog = match self.factory.catalog(&agent) {
            Ok(catalog) => catalog,
            Err(e) => {
                let message = format!("cannot hand off to `{}`: {e}", agent.id());
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        };
        // Decision 16: an agent-scoped async toolset the next agent also lists moves with its
        // running calls instead of being drained.
        let next: Vec<String> =
            catalog.async_toolsets(Scope::Agent).map(|a| a.id.clone()).collect();
        let keep: Vec<String> = self
            .catalog
            .async_toolsets(Scope::Agent)
            .map(|a| a.id.clone())
            .filter(|id| next.contains(id))
            .collect();
        let drain = ActivityMsg::Drain { keep };
        self.handoff = Some(PendingHandoff {
            agent,
            catalog,
            drained: false,
            kept: BTreeMap::new(),
            queued: Vec::new(),
        });
        self.away_timer = None;
        let _ = self.activity.cast(drain);
        // The bound counts from now: a blocking call keeps its speech (and so the Activity's
        // wind-down) open, and must end by it too (decision 7).
        self.start_drain_timer();
    }

    /// The old Activity has no speech left: drain its calls (decision 7).
    pub async fn activity_drained(
        &mut self,
        kept: BTreeMap<String, ActorRef<ToolsetMsg>>,
        myself: &ActorRef<SessionMsg>,
    ) {
        let Some(handoff) = &mut self.handoff else { return };
        handoff.drained = true;
        handoff.kept = kept;
        for (call_id, running) in &self.running_calls {
            if self.drains(running) && running.cancellable {
                let cancel =
                    ToolsetMsg::Cancel { call_id: call_id.clone(), reply: None, drain: true };
                let _ = running.toolset.cast(cancel);
            }
        }
        self.complete_handoff_if_drained(myself).await;
    }

    /// Starts the drain timer, if the session has one (decision 7).
    fn start_drain_timer(&mut self) {
        let Some(timeout) = self.options.drain_timeout else { return };
        let session = self.link.actor.clone();
        self.drain_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(SessionMsg::DrainTimeout);
        }));
    }

    /// The drain ran out of time: abort the calls it waits for (all of them at close, the
    /// old agent's at a handoff); each ends `error` "drain timeout", and the toolsets it
    /// drains start no new call (a speech still winding down may yet dispatch one).
    pub fn drain_timeout(&mut self) {
        self.drain_timer = None;
        let closing = self.closing.is_some();
        let handing_off = self.handoff.as_ref().is_some_and(|h| h.drained);
        for (call_id, running) in &self.running_calls {
            if closing || (handing_off && self.drains(running)) {
                let _ = running.toolset.cast(ToolsetMsg::Abort { call_id: call_id.clone() });
            }
        }
        let _ = self.activity.cast(ActivityMsg::DrainExpired);
        if closing {
            for toolset in self.factory.session_toolsets.values() {
                let _ = toolset.cast(ToolsetMsg::Expire);
            }
        }
    }

    /// Whether a handoff in progress drains this call: the old agent's, unless its toolset
    /// moves to the new agent.
    fn drains(&self, running: &Running) -> bool {
        let moving = self
            .handoff
            .as_ref()
            .is_some_and(|h| h.kept.values().any(|t| t.get_id() == running.toolset.get_id()));
        running.agent_scoped && !moving
    }

    /// Completes the handoff once the old agent's calls have all ended.
    pub async fn complete_handoff_if_drained(&mut self, myself: &ActorRef<SessionMsg>) {
        let ready = self.handoff.as_ref().is_some_and(|h| h.drained)
            && !self.running_calls.values().any(|r| self.drains(r));
        if !ready {
            return;
        }
        Box::pin(self.complete_handoff(myself)).await;
    }

    /// The second half of [`complete_handoff_if_drained`](Self::complete_handoff_if_drained).
    async fn complete_handoff(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(handoff) = self.handoff.take() else { return };
        self.drain_timer = None;
        if let Err(e) = self.activity.stop_and_wait(Some("handoff".into()), None).await {
            tracing::warn!(session = %self.id, "old activity did not stop cleanly: {e}");
        }
        let agent = Agent::clone(&handoff.agent);
        self.agent = agent.clone();
        let old_agent = std::mem::replace(&mut self.agent_id, agent.id().to_string());
        let item = ChatItem::AgentHandoff(AgentHandoff {
            id: self.link.clock.item_id(),
            old_agent: Some(old_agent.clone()),
            new_agent: self.agent_id.clone(),
            created_at: self.link.clock.now(),
        });
        if let Some(run) = &mut self.run {
            run.items.push(item.clone());
        }
        let item = Arc::new(item);
        self.history.insert(Arc::clone(&item));
        self.emit_now(EventKind::AgentHandoff {
            old_agent: Some(old_agent),
            new_agent: self.agent_id.clone(),
        });
        if self.wants(EventType::ConversationItemAdded) {
            self.emit_now(EventKind::ConversationItemAdded { item });
        }
        self.contexts.entry(self.agent_id.clone()).or_default();
        self.templates =
            Templates::resolve(&[agent.template_overrides(), self.options.templates.as_ref()]);
        self.allow_interruptions =
            agent.interruptions_override().unwrap_or(self.options.allow_interruptions);
        self.catalog = Arc::clone(&handoff.catalog);
        let on_enter = agent.on_enter_instructions().map(str::to_string);
        let kept = handoff.kept.clone();
        match self.factory.spawn(agent, handoff.catalog, kept.clone(), myself.get_cell()).await {
            Ok(activity) => self.activity = activity,
            Err(e) => {
                let message = format!("cannot start agent `{}`: {e}", self.agent_id);
                self.emit_now(EventKind::error(ErrorSource::Session, message));
                return;
            }
        }
        // Session-scoped and handed-over toolsets now report to the new agent (decision 16).
        for toolset in self.factory.session_toolsets.values().chain(kept.values()) {
            let _ = toolset.cast(ToolsetMsg::SetOwner { agent_id: self.agent_id.as_str().into() });
        }
        let _ = self.mock_tools_refresh();
        if let Some(instructions) = on_enter {
            self.start_on_enter(instructions);
        }
        for queued in handoff.queued {
            let _ = match queued {
                Queued::UserTurn(text) => self.user_turn(text),
                Queued::Speech(source, content) => self.create_speech(source, content),
            };
        }
        self.floor_changed();
    }

    // ---- floor holds (`foreground`) ----

    /// Queues a hold; granted once the session is idle with no deferred reply pending.
    pub fn hold_floor(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        if self.closing.is_some() {
            let _ = reply.send(Err(SessionError::Closed));
            return;
        }
        self.hold_seq += 1;
        self.hold_waiters.push((self.hold_seq, reply));
        self.floor_changed();
    }

    /// A speech waiting for its blocking tools does not hold the floor (§10.1): a hold may
    /// start while such a tool runs — the tool itself may be the one asking.
    pub fn speech_waiting(&mut self, speech_id: String, waiting: bool) {
        if waiting {
            self.waiting_speeches.insert(speech_id);
        } else {
            self.waiting_speeches.remove(&speech_id);
        }
        self.floor_changed();
    }

    fn grant_hold(&mut self) {
        let speaking = self.pending_speeches > self.waiting_speeches.len();
        if speaking || self.user_state == UserState::Speaking || self.closing.is_some() {
            return;
        }
        // Replies that can go out first do; while blocking tools run they cannot (decision 8).
        if !self.unreplied.is_empty() && self.waiting_speeches.is_empty() {
            return;
        }
        while self.held.is_none() && !self.hold_waiters.is_empty() {
            let (hold, reply) = self.hold_waiters.remove(0);
            if reply.send(Ok(hold)).is_ok() {
                self.held = Some(hold);
                if let Some(run) = &mut self.run {
                    run.holds.insert(hold);
                }
            }
        }
    }

    pub fn release_floor(&mut self, hold: u64) {
        if self.held == Some(hold) {
            self.held = None;
        }
        if let Some(run) = &mut self.run {
            run.holds.remove(&hold);
        }
        self.floor_changed();
    }

    // ---- runs (the testing API) ----

    /// A user turn watched to its end: replies with the items its speeches committed.
    pub fn run(&mut self, text: String, reply: RpcReplyPort<Result<RunResult, SessionError>>) {
        if self.run.is_some() {
            let _ = reply.send(Err(SessionError::NestedRun));
            return;
        }
        let tracker = RunTracker {
            speeches: BTreeSet::new(),
            pending_updates: BTreeSet::new(),
            holds: BTreeSet::new(),
            items: Vec::new(),
            failure: None,
            reply,
        };
        self.run = Some(tracker);
        if let Err(e) = self.user_turn(text) {
            self.finish_run(Some(e));
        }
    }

    fn finish_run(&mut self, error: Option<SessionError>) {
        let Some(run) = self.run.take() else { return };
        let result = match (error, run.failure) {
            (Some(e), _) => Err(e),
            (None, Some(failure)) => Err(SessionError::RunFailed(failure)),
            (None, None) => Ok(RunResult::new(run.items)),
        };
        let _ = run.reply.send(result);
    }

    /// Replaces one scope's mocks (an empty list removes them) and hands the current agent's
    /// effective set to its toolset. A name the current agent does not have is an error.
    pub fn mock_tools(
        &mut self,
        scope: MockScope,
        mocks: Vec<FunctionTool>,
    ) -> Result<(), SessionError> {
        let applies_now = match &scope {
            MockScope::Session => true,
            MockScope::Agent(agent) => *agent == self.agent_id,
        };
        if applies_now
            && let Some(unknown) = mocks.iter().find(|m| self.catalog.get(m.name()).is_none())
        {
            return Err(SessionError::Config(format!(
                "cannot mock `{}`: agent `{}` has no such tool",
                unknown.name(),
                self.agent_id
            )));
        }
        let named: BTreeMap<String, FunctionTool> =
            mocks.into_iter().map(|m| (m.name().to_string(), m)).collect();
        if named.is_empty() {
            self.mocks.remove(&scope);
        } else {
            self.mocks.insert(scope, named);
        }
        self.mock_tools_refresh()
    }

    /// Hands the current agent's effective mocks to its toolsets.
    fn mock_tools_refresh(&self) -> Result<(), SessionError> {
        let mut effective = self.mocks.get(&MockScope::Session).cloned().unwrap_or_default();
        if let Some(agent) = self.mocks.get(&MockScope::Agent(self.agent_id.clone())) {
            effective.extend(agent.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        self.activity
            .cast(ActivityMsg::SetMocks(Arc::new(effective)))
            .map_err(|_| SessionError::Closed)
    }

    // ---- states ----

    pub fn set_agent_state(&mut self, state: AgentState) {
        if self.agent_state != state {
            self.agent_state = state;
            self.emit_now(EventKind::AgentState { state });
            self.update_away_timer(false);
        }
    }

    fn set_user_state(&mut self, state: UserState) {
        if self.user_state != state {
            self.user_state = state;
            self.emit_now(EventKind::UserState { state });
            self.update_away_timer(false);
        }
    }

    pub fn set_user_speaking(&mut self, speaking: bool) {
        if speaking {
            let _ = self.activity.cast(ActivityMsg::Interrupt { reply: None });
            self.set_user_state(UserState::Speaking);
        } else {
            self.set_user_state(UserState::Listening);
            self.floor_changed();
        }
    }

    /// Runs the user-away timer only while both sides listen and no call runs (§10.4);
    /// `restart` starts a full new window even if one is already counting.
    fn update_away_timer(&mut self, restart: bool) {
        let quiet = self.agent_state == AgentState::Listening
            && self.user_state == UserState::Listening
            && self.running_calls.is_empty()
            && self.pending_speeches == 0
            && self.closing.is_none();
        let Some(timeout) = self.options.user_away_timeout.filter(|_| quiet) else {
            self.away_timer = None;
            return;
        };
        if self.away_timer.is_some() && !restart {
            return;
        }
        self.away_generation += 1;
        let generation = self.away_generation;
        let session = self.link.actor.clone();
        self.away_timer = Some(OwnedTask::spawn(async move {
            tokio::time::sleep(timeout).await;
            let _ = session.cast(SessionMsg::AwayTimeout(generation));
        }));
    }

    pub fn away_timeout(&mut self, generation: u64) {
        if generation == self.away_generation && self.away_timer.is_some() {
            self.away_timer = None;
            self.set_user_state(UserState::Away);
        }
    }

    // ---- idle and close ----

    pub fn wait_for_idle(&mut self, reply: RpcReplyPort<Result<(), SessionError>>, quiet: bool) {
        if self.closing.is_some() {
            let _ = reply.send(Err(SessionError::Closed));
        } else if self.is_idle(quiet) {
            let _ = reply.send(Ok(()));
        } else {
            self.idle_waiters.push((reply, quiet));
        }
    }

    fn release_idle_waiters(&mut self) {
        if !self.is_idle(false) {
            return;
        }
        let quiet_now = self.is_idle(true);
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.idle_waiters)
            .into_iter()
            .partition(|(_, quiet)| !*quiet || quiet_now);
        self.idle_waiters = waiting;
        for (reply, _) in ready {
            let _ = reply.send(Ok(()));
        }
    }

    pub fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// The Activity died (restarting it is the supervision issue's work): nothing is speaking
    /// any more, so the session is idle; a close in progress completes.
    /// The current Activity ended without being asked to (it failed, or something stopped
    /// it): its speeches are gone. Deferred replies it was speaking count as interrupted, a
    /// `run` watching it fails, and a new Activity starts for the same agent over the same
    /// context, so the conversation goes on. (Its agent-scoped calls end `error` on their own:
    /// their Toolset's drop guard reports them when ractor kills it with its parent.)
    pub async fn activity_lost(&mut self, myself: &ActorRef<SessionMsg>, why: Option<String>) {
        let lost: Vec<String> = self.deferred.keys().cloned().collect();
        for speech_id in lost {
            self.speech_done(speech_id, true);
        }
        self.pending_speeches = 0;
        self.waiting_speeches.clear();
        let why = why.unwrap_or_else(|| "stopped".into());
        self.finish_run(Some(SessionError::RunFailed(format!("the activity failed: {why}"))));
        self.set_agent_state(AgentState::Listening);
        if self.closing.is_some() {
            self.release_idle_waiters();
            self.finish_close(myself).await;
            return;
        }
        if let Some(handoff) = &mut self.handoff {
            // The old agent is gone anyway: the handoff goes ahead.
            handoff.drained = true;
            self.complete_handoff_if_drained(myself).await;
            self.release_idle_waiters();
            return;
        }
        let catalog = Arc::clone(&self.catalog);
        match self
            .factory
            .spawn(self.agent.clone(), catalog, BTreeMap::new(), myself.get_cell())
            .await
        {
            Ok(activity) => {
                self.activity = activity;
                let _ = self.mock_tools_refresh();
                let message =
                    format!("agent `{}` restarted: its activity failed: {why}", self.agent_id);
                tracing::warn!(session = %self.id, "{message}");
                self.emit_now(EventKind::error(ErrorSource::Session, message));
            }
            Err(e) => {
                let message = format!("cannot restart agent `{}`: {e}", self.agent_id);
                self.emit_now(EventKind::error(ErrorSource::Session, message));
            }
        }
        self.release_idle_waiters();
        self.floor_changed();
    }

    /// Test hook: makes the actor with inspection id `target` panic.
    #[cfg(feature = "test-hooks")]
    pub fn inject_failure(&self, target: &str) {
        if target == "session" {
            panic!("injected failure");
        }
        if target.starts_with("activity:") {
            let _ = self.activity.cast(ActivityMsg::InjectFailure);
        } else if let Some(id) = target.strip_prefix("toolset:") {
            match self.factory.session_toolsets.get(id) {
                Some(toolset) => {
                    let _ = toolset.cast(ToolsetMsg::InjectFailure);
                }
                None => {
                    let _ = self.activity.cast(ActivityMsg::InjectToolsetFailure(id.to_string()));
                }
            }
        }
    }

    /// Why the session is closing, once it is.
    pub fn close_reason(&self) -> Option<String> {
        self.closing.as_ref().map(|c| c.reason.clone())
    }

    /// The stable inspection id and kind of a child of the Session, by its actor id.
    pub fn child_name(&self, cell: &ractor::ActorCell) -> Option<(ActorKind, String)> {
        let id = cell.get_id();
        if self.activity.get_id() == id {
            return Some((ActorKind::Activity, format!("activity:{}", self.agent_id)));
        }
        if self.coalescer.get().is_some_and(|c| c.get_id() == id) {
            return Some((ActorKind::Coalescer, "coalescer".into()));
        }
        let kept = self.handoff.iter().flat_map(|h| h.kept.iter());
        self.factory
            .session_toolsets
            .iter()
            .chain(kept)
            .find(|(_, toolset)| toolset.get_id() == id)
            .map(|(name, _)| (ActorKind::Toolset, format!("toolset:{name}")))
    }

    /// Ends the session (gracefully, with `reason`) once speech `speech_id` is done — played
    /// out, interrupted or dropped — or after `watchdog` if it never is (the end-call tool).
    pub fn end_after_speech(
        &mut self,
        speech_id: String,
        reason: String,
        watchdog: Option<Duration>,
    ) {
        if self.closing.is_some() {
            return;
        }
        self.end_timer = watchdog.map(|limit| {
            let session = self.link.actor.clone();
            let reason = reason.clone();
            OwnedTask::spawn(async move {
                tokio::time::sleep(limit).await;
                let _ = session.cast(SessionMsg::EndNow { reason, watchdog: true });
            })
        });
        self.end_after = Some((speech_id, reason));
    }

    /// The end-after-speech watchdog fired, or the speech is done.
    pub fn end_now(&mut self, reason: String, watchdog: bool) {
        if self.closing.is_some() || self.end_after.is_none() {
            return;
        }
        if watchdog {
            let message =
                format!("the speech before the end ({reason}) never finished: ending now");
            tracing::warn!(session = %self.id, "{message}");
            self.emit_now(EventKind::error(ErrorSource::Session, message));
        }
        self.end_after = None;
        self.end_timer = None;
        self.close(reason, None);
    }

    pub fn close(&mut self, reason: String, reply: Option<RpcReplyPort<ClosedSession>>) {
        if let Some(closing) = &mut self.closing {
            closing.waiters.extend(reply);
            return;
        }
        let waiters = reply.into_iter().collect();
        self.closing = Some(Closing { reason, waiters, activity_quiet: false, finished: false });
        self.handoff = None; // a close wins over a handoff in progress
        self.away_timer = None;
        self.finish_run(Some(SessionError::Closed));
        for (waiter, _) in self.idle_waiters.drain(..) {
            let _ = waiter.send(Err(SessionError::Closed));
        }
        for (_, waiter) in self.hold_waiters.drain(..) {
            let _ = waiter.send(Err(SessionError::Closed));
        }
        // Pending deferred replies are dropped at close (§9.3); cancellable calls are
        // cancelled, the others awaited (decision 7).
        self.unreplied.clear();
        for (call_id, running) in &self.running_calls {
            if running.cancellable {
                let cancel =
                    ToolsetMsg::Cancel { call_id: call_id.clone(), reply: None, drain: true };
                let _ = running.toolset.cast(cancel);
            }
        }
        if self.activity.cast(ActivityMsg::Close).is_err() {
            // No activity to wind down: finish at once.
            let _ = self.link.actor.cast(SessionMsg::ActivityClosed);
        }
        // Decision 7: the bound counts from the close, blocking calls included.
        self.start_drain_timer();
    }

    /// The activity has no speech left. Calls still running in the background are awaited
    /// (none is cancellable yet), so each still ends exactly once and its result lands in the
    /// history; then the close completes.
    pub async fn activity_closed(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(closing) = &mut self.closing {
            closing.activity_quiet = true;
        }
        self.close_if_quiet(myself).await;
    }

    /// Completes a close whose activity is quiet once no call runs.
    pub async fn close_if_quiet(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.closing.as_ref().is_some_and(|c| c.activity_quiet) && self.running_calls.is_empty()
        {
            // Boxed, like every rare heavy path the Session awaits in a handler: inlined, it
            // would size every session's actor task for it (RACTOR-NOTES: one future per actor).
            Box::pin(self.finish_close(myself)).await;
        }
    }

    /// Stop the tree, tell everyone, stop.
    pub async fn finish_close(&mut self, myself: &ActorRef<SessionMsg>) {
        // `closing` stays set: the session refuses new work until it has stopped.
        let Some(closing) = &mut self.closing else { return };
        if closing.finished {
            return;
        }
        closing.finished = true;
        let reason = closing.reason.clone();
        let waiters = std::mem::take(&mut closing.waiters);
        // The activity has no speech left and its toolset no call: a graceful stop is short.
        if let Err(e) = self.activity.stop_and_wait(Some(reason.clone()), None).await {
            tracing::warn!(session = %self.id, "activity did not stop cleanly: {e}");
        }
        self.emit_now(EventKind::SessionClosed { reason: reason.clone() });
        if let Some(on_close) = self.on_close.take() {
            // The host's hook (hang up the phone line, close the socket): a panic in it is
            // reported, never stops the close.
            if let Err(panic) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_close(&reason)))
            {
                let message =
                    format!("the close callback panicked: {}", crate::task::panic_text(&*panic));
                tracing::error!(session = %self.id, "{message}");
            }
        }
        self.subscribers.clear();
        self.broadcasts.clear();
        let closed = ClosedSession {
            reason: reason.clone(),
            history: self.history.clone(),
            contexts: self
                .contexts
                .iter()
                .map(|(k, v)| (k.clone(), ChatContext::clone(v)))
                .collect(),
        };
        for waiter in waiters {
            let _ = waiter.send(closed.clone());
        }
        let _ = self.link.closed.set(closed);
        myself.stop(Some(reason));
    }
}
