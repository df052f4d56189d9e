//! What the host sees of the session and waits on: the event fan-out (events.rs), the testing
//! API's run and mocks (testing.rs), and the close (close.rs).

use super::close::CloseState;
use super::events::Fanout;
use super::fact::Fact;
use super::testing::Testing;

pub(crate) struct HostSide {
    pub(crate) events: Fanout,
    pub(crate) testing: Testing,
    pub(crate) close: CloseState,
}

impl HostSide {
    pub(crate) fn apply(&mut self, fact: &Fact) {
        self.testing.apply(fact);
        self.close.apply(fact);
    }
}
