//! How a session's own actors and tasks talk to it — events, commits and state changes, all
//! through the Session's mailbox so their order is the order they were sent in — and what they
//! all read: the session's options, clock and what the host plugged in, built once.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use colloquy_llm::Llm;
use colloquy_model::{BeforeToolCall, ChatContext, ChatItem, EventKind, SessionEvent};
use ractor::ActorRef;

use super::coalescer::{CoalescerMsg, CoalescerSlot, PendingReply};
use super::session::{ChildMsg, ClosedSession, Report, SessionMsg};
use crate::support::clock::SessionClock;
use crate::support::lifecycle_sink::LifecycleSink;
use crate::types::options::SessionOptions;
use crate::types::speech_sink::SpeechSink;

/// A session as its own actors and tasks see it: the way to the Session (events, commits and
/// LLM steps all go through its mailbox, so their order is the order they were sent in), and
/// what every actor of the session reads and nobody changes. The Session builds it once and
/// hands a clone to each child; a clone is one reference count, whatever the session holds.
#[derive(Clone)]
pub(crate) struct SessionLink(Arc<SessionShared>);

/// What a [`SessionLink`] shares. A new session setting is read from `options` where it is
/// used: nothing in between copies it.
pub(crate) struct SessionShared {
    pub actor: ActorRef<SessionMsg>,
    pub clock: SessionClock,
    /// The session's id (for handles given to tools).
    pub id: Arc<str>,
    /// Where actors report their lifecycle.
    pub lifecycle: LifecycleSink,
    /// The session's `tracing` span: turn, speech and tool-call spans descend from it.
    pub span: tracing::Span,
    /// How the session closed, once it has (shared with every handle).
    pub closed: Arc<std::sync::OnceLock<ClosedSession>>,
    /// Whether a subscriber asked for the agent's text.
    pub text_wanted: TextWanted,
    /// The ReplyCoalescer, once the Session has spawned it.
    pub coalescer: CoalescerSlot,
    pub options: SessionOptions,
    pub plugins: Plugins,
    /// The session keeps a journal: each call's body waits until its start is on disk
    /// (docs/durability.md#write-ahead).
    pub durable: bool,
    /// The results `idempotent` tools remembered before a resume, by result key: every
    /// toolset starts with those of its tools (a key names its tool).
    pub remembered: Arc<std::collections::BTreeMap<String, colloquy_store::RememberedResult>>,
}

/// What the host plugged into the session ([`SessionBuilder`](crate::SessionBuilder)).
#[derive(Clone)]
pub(crate) struct Plugins {
    pub llm: Arc<dyn Llm>,
    /// Where speech plays; without one it plays out at once.
    pub sink: Option<Arc<dyn SpeechSink>>,
    /// What every tool reads through `RunContext::userdata`.
    pub userdata: Option<Arc<dyn Any + Send + Sync>>,
    /// The host's hook, run in each call's task before its body.
    pub before_call: Option<BeforeToolCall>,
}

impl SessionLink {
    pub(crate) fn new(shared: SessionShared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for SessionLink {
    type Target = SessionShared;

    fn deref(&self) -> &SessionShared {
        &self.0
    }
}

/// Whether some subscriber asked for the agent's text (`x_agent_text`): the Session's fan-out
/// sets it as subscribers come and go, a speech reads it once per step, so a session nobody
/// asked builds and sends nothing per delta. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct TextWanted(Arc<AtomicBool>);

impl TextWanted {
    pub(crate) fn get(&self) -> bool {
        // Relaxed: a step that reads it late only starts forwarding at the next step.
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, wanted: bool) {
        self.0.store(wanted, Ordering::Relaxed);
    }
}

impl SessionLink {
    /// An event stamped now, to send in a [`Report`].
    pub(crate) fn event(&self, kind: EventKind) -> Report {
        Report::Emit(SessionEvent { at_ms: self.clock.elapsed_ms(), kind })
    }

    /// Emits an event stamped now. A closed session drops it (nobody is listening).
    pub(crate) fn emit(&self, kind: EventKind) {
        self.report(self.event(kind));
    }

    /// Queues a pair for a deferred reply: straight to the coalescer once it runs, else through
    /// the Session, which spawns it and forwards the pair (`ChildMsg::Enqueue`).
    pub(crate) fn enqueue_reply(&self, pending: PendingReply) {
        match self.coalescer.get() {
            Some(coalescer) => {
                let _ = coalescer.cast(CoalescerMsg::Enqueue(pending));
            }
            None => {
                let _ = self.actor.cast(ChildMsg::Enqueue(pending).into());
            }
        }
    }

    /// Sends one report.
    pub(crate) fn report(&self, report: Report) {
        let _ = self.actor.cast(ChildMsg::Report(report).into());
    }

    /// Sends reports that happened together as one message (applied in order).
    pub(crate) fn reports(&self, mut reports: Vec<Report>) {
        let message = match reports.len() {
            0 => return,
            1 => ChildMsg::Report(reports.remove(0)),
            _ => ChildMsg::Reports(reports),
        };
        let _ = self.actor.cast(message.into());
    }

    /// A commit of items a speech produced to `agent`'s context and the history; `None` when
    /// there is nothing to commit.
    pub(crate) fn speech_commit(
        agent: &Arc<str>,
        speech_id: &str,
        items: Vec<ChatItem>,
    ) -> Option<Report> {
        (!items.is_empty()).then(|| Report::Commit {
            agent: Arc::clone(agent),
            speech_id: Some(speech_id.to_string()),
            items,
            awaits_reply: None,
        })
    }

    /// Starts an LLM step: applies `reports` (the previous step's, held back to go with this
    /// message), reports `thinking` and returns the agent's current chat context for the
    /// request (a shared snapshot, with placeholders for running calls it does not mention),
    /// or `None` once the session is gone. One round trip for all of it. `resumed`: speech
    /// `speech_id` took the floor back after waiting for its tools (see
    /// `ChildMsg::BeginLlmStep`).
    pub(crate) async fn begin_llm_step(
        &self,
        agent: &Arc<str>,
        speech_id: &str,
        resumed: bool,
        reports: Vec<Report>,
    ) -> Option<Arc<ChatContext>> {
        let (agent, speech_id) = (Arc::clone(agent), speech_id.to_string());
        let step =
            |reply| ChildMsg::BeginLlmStep { agent, speech_id, resumed, reports, reply }.into();
        match self.actor.call(step, None).await {
            Ok(ractor::rpc::CallResult::Success(ctx)) => ctx,
            _ => None,
        }
    }
}
