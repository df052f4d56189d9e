//! What the host sees of the session and waits on: the event fan-out (events.rs), the testing
//! API's run and mocks (testing.rs), the close (close.rs), the journal on its way to the
//! host's store (journal.rs), and the commands sent with an id (commands.rs).

use colloquy_model::SessionEvent;

use super::close::CloseState;
use super::commands::Commands;
use super::events::Fanout;
use super::fact::Fact;
use super::journal::JournalOut;
use super::testing::Testing;

pub(crate) struct HostSide {
    pub(crate) events: Fanout,
    pub(crate) testing: Testing,
    pub(crate) close: CloseState,
    /// With a store: the records of the facts, on their way to it (boxed: most sessions have
    /// none, and this state is part of every Session's task).
    pub(crate) journal: Option<Box<JournalOut>>,
    /// The commands sent with an id the session took.
    pub(crate) commands: Commands,
    /// In a durable session, the `tool_call_started` of calls whose start is not on disk yet,
    /// with the record each waits for (docs/durability.md#starts-seen).
    pub(crate) held_starts: Vec<(u64, SessionEvent)>,
}

impl HostSide {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        self.testing.apply(fact);
        self.close.apply(fact);
    }
}
