//! The Session's state: its link and five concerns, each a group defined (with its fields
//! private) in `parts/`, changed only by the [`Fact`]s `dispatch.rs` routes to it, and by
//! installing or taking the handles it keeps (docs/decisions.md#session-facts).

use std::collections::BTreeMap;
use std::sync::Arc;

use colloquy_model::{Agent, ChatContext};
use ractor::ActorRef;

use super::parts::activity_factory::ActivityFactory;
use super::parts::agent::{AgentSlot, CurrentAgent};
use super::parts::close::CloseState;
use super::parts::commands::Commands;
use super::parts::conversation::Conversation;
use super::parts::events::Fanout;
use super::parts::floor::Floor;
use super::parts::host::HostSide;
use super::parts::journal::JournalOut;
use super::parts::tools::Tools;
use crate::catalog::ToolCatalog;
use crate::messages::{ActivityMsg, CloseCallback, SessionLink, SessionPart, Subscriber};

#[cfg(doc)]
use super::parts::fact::Fact;

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
    /// Whether the first agent greets (not on a resume).
    pub greets: bool,
    /// With a store: the journal.
    pub journal: Option<JournalOut>,
    /// The ids of the commands a resumed session had taken, oldest first.
    pub commands: Vec<String>,
}

pub(crate) struct SessionState {
    /// The session's id, options and address, as every child shares them.
    pub(super) link: SessionLink,
    /// The history, every agent's context, the queued inputs.
    pub(super) conversation: Conversation,
    /// The current agent, and a handoff in progress.
    pub(super) agent: AgentSlot,
    /// Speeches, holds, agent and user state, idle waiters.
    pub(super) floor: Floor,
    /// Running calls and deferred replies.
    pub(super) tools: Tools,
    /// Event fan-out, the testing API, the close.
    pub(super) host: HostSide,
}

impl SessionState {
    pub(super) fn new(init: Init) -> Self {
        let options = &init.link.options;
        let current = CurrentAgent::new(
            init.agent,
            init.catalog,
            init.activity,
            init.previous_agent,
            init.greets,
            init.factory,
            options,
        );
        let text_wanted = init.link.text_wanted.clone();
        let events = Fanout::new(init.subscribers, options.max_unread_events, text_wanted);
        Self {
            link: init.link,
            conversation: Conversation::new(init.history, init.contexts),
            agent: AgentSlot { current, handoff: None },
            floor: Floor::default(),
            tools: Tools::default(),
            host: HostSide {
                events,
                testing: Default::default(),
                close: CloseState::new(init.on_close),
                journal: init.journal.map(Box::new),
                commands: Commands::resumed(init.commands),
                held_starts: Vec::new(),
            },
        }
    }

    /// The Session's part of a snapshot (`SessionHandle::inspect`).
    pub(super) fn inspect(&self) -> SessionPart {
        let kept = self.agent.handoff.iter().flat_map(|h| h.kept().values());
        let current = &self.agent.current;
        let session_toolsets = current.factory().session_toolsets().values();
        SessionPart {
            at_ms: self.link.clock.elapsed_ms(),
            session_id: self.link.id.to_string(),
            agent: current.id().to_string(),
            agent_state: self.floor.presence.agent(),
            user_state: self.floor.presence.user(),
            closing: self.host.close.is_closing(),
            activity: current.activity().clone(),
            coalescer: self.link.coalescer.get().cloned(),
            toolsets: session_toolsets.chain(kept).cloned().collect(),
        }
    }
}
