//! The tools' side of the session: the calls running now (calls.rs) and the pairs waiting for
//! their deferred reply (replies.rs).

use super::calls::RunningCalls;
use super::fact::Fact;
use super::replies::Replies;

#[derive(Default)]
pub(crate) struct Tools {
    pub(crate) calls: RunningCalls,
    pub(crate) replies: Replies,
}

impl Tools {
    pub(crate) fn apply(&mut self, fact: Fact<'_>) {
        self.calls.apply(fact);
        self.replies.apply(fact);
    }
}
