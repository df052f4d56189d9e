//! The Session's router. Commands: one function per sender sends each message to the
//! transition that decides it (in the file of its concern). Facts: [`SessionState::apply`]
//! sends each fact a transition decided to the concerns (`parts/`) whose state it changes,
//! the one way that state changes (docs/decisions.md#session-facts). Events: `emit` applies
//! what an event going out says about the session, then fans it out.
//!
//! Answers questions from the concerns' state; subscribers join the fan-out (a handle).

use std::collections::BTreeMap;

use colloquy_llm::RequestKind;
use colloquy_model::{AgentState, CloseReason, ErrorSource, EventKind, SessionEvent, SpeechSource};
use ractor::ActorRef;

use super::parts::fact::Fact;
use super::state::SessionState;
use crate::messages::{
    ActivityMsg, ChildMsg, HostMsg, ObserveMsg, PendingReply, Report, SpeechContent, TimerMsg,
    ToolMsg, ToolsetMsg,
};

/// The close reason of a host-less session whose handles were all dropped.
const RELEASED: &str = colloquy_model::CloseReason::HandlesDropped.name();

/// What a child's message leaves the handler to await.
pub(super) enum FollowUp {
    None,
    /// A tool call ended.
    CallEnded,
    /// Spawn the coalescer, then forward the pair (boxed: a rare path, and the handler's
    /// future holds a `FollowUp` across its awaits).
    Enqueue(Box<PendingReply>),
    /// The old Activity drained (a handoff).
    Drained(BTreeMap<String, ActorRef<ToolsetMsg>>),
    /// The Activity wound down (a close).
    ActivityClosed,
}

impl FollowUp {
    fn ended(ended: bool) -> Self {
        if ended { Self::CallEnded } else { Self::None }
    }
}

impl SessionState {
    pub(super) fn on_host(&mut self, message: HostMsg) {
        match message {
            HostMsg::UserTurn { text, reply } => {
                let _ = reply.send(self.user_turn(text));
            }
            HostMsg::UserInput { text, reply } => {
                let _ = reply.send(self.user_input(text));
            }
            HostMsg::Run { text, reply } => self.run(text, reply),
            HostMsg::GenerateReply { instructions, tool_choice, reply } => {
                let content = SpeechContent::Reply {
                    kind: RequestKind::GenerateReply,
                    extra_instructions: instructions,
                    tool_choice,
                };
                let _ = reply.send(self.create_speech(SpeechSource::GenerateReply, content));
            }
            HostMsg::Say { text, reply } => {
                let content = SpeechContent::Say { text };
                let _ = reply.send(self.create_speech(SpeechSource::Say, content));
            }
            HostMsg::Interrupt { reply } => {
                let interrupt = ActivityMsg::Interrupt { reply: Some(reply) };
                let _ = self.agent.current.activity().cast(interrupt);
            }
            HostMsg::SetUserSpeaking(speaking) => self.set_user_speaking(speaking),
            HostMsg::MockTools { scope, mocks, reply } => {
                let _ = reply.send(self.mock_tools(scope, mocks));
            }
            HostMsg::Handoff { agent } => self.request_handoff(agent),
            HostMsg::Close { reason, reply } => self.close(reason, Some(reply)),
            HostMsg::Released => self.close(RELEASED.into(), None),
            HostMsg::Resumed { in_doubt, owed } => self.resumed(in_doubt, owed),
        }
    }

    pub(super) fn on_tool(&mut self, message: ToolMsg) {
        match message {
            ToolMsg::HoldFloor(reply) => self.hold_floor(reply),
            ToolMsg::ReleaseFloor(hold) => self.release_floor(hold),
            ToolMsg::EndAfterSpeech { speech_id, reason, watchdog } => {
                self.end_after_speech(speech_id, reason, watchdog);
            }
            ToolMsg::CancelCall { call_id, reply } => self.tools.calls.cancel(call_id, reply),
            ToolMsg::AnswerApproval { call_id, reason, reply } => {
                self.tools.calls.answer(call_id, reason, reply);
            }
        }
    }

    pub(super) fn on_observe(&mut self, message: ObserveMsg) {
        match message {
            ObserveMsg::Subscribe(subscriber) => self.host.events.subscribe(subscriber),
            ObserveMsg::AddBroadcast(tx) => self.host.events.add_broadcast(tx),
            ObserveMsg::History(reply) => {
                let _ = reply.send(self.conversation.history_items());
            }
            ObserveMsg::Context { agent, reply } => {
                let _ = reply.send(self.conversation.context(&agent).cloned());
            }
            ObserveMsg::Inspect(reply) => {
                let _ = reply.send(self.inspect());
            }
            ObserveMsg::States(reply) => {
                let presence = &self.floor.presence;
                let _ = reply.send((presence.agent(), presence.user()));
            }
            ObserveMsg::RunningCalls(reply) => {
                let _ = reply.send(self.tools.calls.list());
            }
            ObserveMsg::WaitForIdle { quiet, reply } => self.wait_for_idle(reply, quiet),
        }
    }

    /// Applies a child's message; what it leaves to await (rare, or a call's end) comes back
    /// as a small [`FollowUp`] the handler awaits itself: an async fn here would hold the
    /// message across its awaits and grow every session's task (docs/decisions.md#boxed-futures).
    pub(super) fn on_child(&mut self, message: ChildMsg) -> FollowUp {
        match message {
            ChildMsg::Report(report) => FollowUp::ended(self.apply_report(report)),
            ChildMsg::Reports(reports) => FollowUp::ended(self.apply_all(reports)),
            ChildMsg::BeginLlmStep { agent, speech_id, resumed, reports, reply } => {
                let ended = self.apply_all(reports);
                self.input_taken(&speech_id, &agent);
                if resumed {
                    self.speech_waiting(speech_id, false);
                }
                self.set_agent_state(AgentState::Thinking);
                let context = self.request_context(&agent);
                match &mut self.host.journal {
                    // Written ahead: the model reads nothing a crash could take back.
                    Some(journal) => journal.answer_read((reply, context)),
                    None => drop(reply.send(context)),
                }
                FollowUp::ended(ended)
            }
            ChildMsg::SpeechWaiting { speech_id, waiting } => {
                if waiting {
                    self.set_agent_state(AgentState::Thinking);
                }
                self.speech_waiting(speech_id, waiting);
                FollowUp::None
            }
            ChildMsg::CallRegistered { call, toolset, cancellable, agent_scoped, resumed } => {
                self.call_registered(call, toolset, cancellable, agent_scoped, resumed);
                FollowUp::None
            }
            ChildMsg::ResultRemembered { key, result } => {
                self.apply(Fact::ResultRemembered { key: &key, result: &result });
                FollowUp::None
            }
            ChildMsg::CallWaiting { call_id } => {
                self.apply(Fact::CallWaiting { call_id: &call_id });
                FollowUp::None
            }
            ChildMsg::CallLetThrough { call_id } => {
                self.call_let_through(&call_id);
                FollowUp::None
            }
            ChildMsg::AdmitReply { batch, coalescer } => {
                self.offer_reply(&batch, &coalescer);
                FollowUp::None
            }
            ChildMsg::Handoff { agent } => {
                self.request_handoff(agent);
                FollowUp::None
            }
            ChildMsg::Enqueue(pending) => FollowUp::Enqueue(Box::new(pending)),
            ChildMsg::ActivityDrained { kept } => FollowUp::Drained(kept),
            ChildMsg::ActivityClosed => FollowUp::ActivityClosed,
        }
    }

    pub(super) fn on_timer(&mut self, message: TimerMsg) {
        match message {
            TimerMsg::EndNow => self.end_now(true),
            TimerMsg::DrainTimeout => self.drain_timeout(),
            TimerMsg::AwayTimeout(generation) => self.away_timeout(generation),
            TimerMsg::StoreFailed(why) => self.store_failed(why, CloseReason::StoreFailed),
            TimerMsg::LeaseLost(why) => self.store_failed(why, CloseReason::LeaseLost),
            TimerMsg::Stored(through) => self.journal_stored(through),
        }
    }

    /// Applies reports in order; true when one ended a tool call. The caller follows that up
    /// once, after the batch (nothing awaits between two reports, so the handler's future
    /// stays small).
    fn apply_all(&mut self, reports: Vec<Report>) -> bool {
        let mut ended = false;
        for report in reports {
            ended |= self.apply_report(report);
        }
        ended
    }

    /// Applies one report of the session's own actors; true when it ended a tool call.
    fn apply_report(&mut self, report: Report) -> bool {
        match report {
            Report::Emit(event) => {
                let ended = matches!(event.kind, EventKind::ToolCallEnded { .. });
                self.emit(event);
                ended
            }
            Report::Commit { agent, speech_id, items, awaits_reply } => {
                self.commit(agent, speech_id, items);
                if let Some(update_id) = awaits_reply {
                    self.await_reply(update_id);
                }
                false
            }
            Report::SpeechDone { speech_id, interrupted } => {
                self.speech_done(speech_id, interrupted);
                false
            }
            Report::AgentState(agent_state) => {
                self.set_agent_state(agent_state);
                false
            }
        }
    }

    /// Sends `fact` to the concerns whose state it changes: the one way the Session's state
    /// changes (its handles aside).
    pub(super) fn apply(&mut self, fact: Fact<'_>) {
        tracing::trace!(session = %self.link.id, ?fact, "fact");
        let due = self.host.commands.apply(fact);
        if let Some(journal) = &mut self.host.journal {
            journal.record(fact, self.link.clock.elapsed_ms());
        }
        match fact {
            Fact::Committed { .. } => {
                self.conversation.apply(fact);
                self.tools.apply(fact); // a reply speech said something
            }
            Fact::AgentEntered { .. } => {
                self.conversation.apply(fact);
                self.agent.apply(fact);
                self.host.apply(fact); // a run lists the marker
            }
            Fact::PairMoved { .. } | Fact::InputQueued { .. } | Fact::InputTaken { .. } => {
                self.conversation.apply(fact);
            }
            Fact::TurnBegan
            | Fact::SpeechWaiting { .. }
            | Fact::SpeechesLost
            | Fact::HoldAsked
            | Fact::AgentStateChanged(_)
            | Fact::UserStateChanged(_) => self.floor.apply(fact),
            Fact::SpeechCreated { .. } | Fact::HoldGranted { .. } | Fact::HoldReleased { .. } => {
                self.floor.apply(fact);
                self.host.apply(fact); // a run watches them
            }
            Fact::SpeechDone { .. } => {
                self.floor.apply(fact);
                self.tools.apply(fact); // a reply speech ended
                self.host.apply(fact);
            }
            Fact::CallStarted { .. }
            | Fact::ApprovalAsked { .. }
            | Fact::CallApproved { .. }
            | Fact::CallEnded { .. }
            | Fact::CallWaiting { .. }
            | Fact::CallLetThrough { .. }
            | Fact::RerunsAsked { .. }
            | Fact::RerunsAbandoned
            | Fact::ResultRemembered { .. }
            | Fact::CoalescerInvited
            | Fact::CoalescerOffered
            | Fact::ReplySpeechStarted { .. }
            | Fact::RepliesDropped => self.tools.apply(fact),
            Fact::ReplyAwaited { .. } | Fact::RepliesTaken { .. } => {
                self.tools.apply(fact);
                self.host.apply(fact); // a run waits for the reply
            }
            Fact::HandoffBegan { .. }
            | Fact::WorkQueued(_)
            | Fact::OldAgentDrained
            | Fact::HandoffEnded => self.agent.apply(fact),
            Fact::RunStarted
            | Fact::RunRecorded { .. }
            | Fact::RunFailed { .. }
            | Fact::RunEnded
            | Fact::CloseBegan { .. }
            | Fact::ActivityQuiet
            | Fact::CloseFinished
            | Fact::EndAfterSpeech { .. }
            | Fact::EndAfterTaken => self.host.apply(fact),
            // Only the journal keeps these: the calls in doubt were never in the running index,
            // a seeded history is in the state from the start, a command is taken already.
            Fact::Resumed { .. } | Fact::HistorySeeded { .. } | Fact::CommandTaken { .. } => {}
        }
        // After the record of what the commands did, in the same batch.
        for id in due {
            self.apply(Fact::CommandTaken { id: &id });
        }
    }

    pub(super) fn emit_now(&mut self, kind: EventKind) {
        let event = SessionEvent { at_ms: self.link.clock.elapsed_ms(), kind };
        self.emit(event);
    }

    /// Fans an event out, after what it says about the session: an LLM error fails the run
    /// in progress, and the running-call index follows the calls' events (calls.rs).
    pub(super) fn emit(&mut self, event: SessionEvent) {
        if !self.host.held_starts.is_empty()
            && let Some(call_id) = call_of(&event.kind)
        {
            self.release_start_of(call_id);
        }
        match &event.kind {
            EventKind::Error { source: ErrorSource::Llm, message, .. } => {
                if self.host.testing.running() {
                    self.apply(Fact::RunFailed { message });
                }
            }
            kind => self.note_call_event(kind),
        }
        self.host.events.send(event, &self.link.id, &self.link.clock);
    }
}

/// The call an event is about, if it is about one (its start goes out before it).
fn call_of(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::ToolCallUpdated { call_id, .. }
        | EventKind::ToolCallEnded { call_id, .. }
        | EventKind::ToolCallDropped { call_id, .. }
        | EventKind::ToolCallRetry { call_id, .. }
        | EventKind::ToolApprovalRequested { call_id, .. }
        | EventKind::ToolCallApproved { call_id } => Some(call_id),
        _ => None,
    }
}
