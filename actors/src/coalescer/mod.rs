//! The ReplyCoalescer actor: one per session (decision 17). It holds every pair that waits for
//! a deferred reply and offers them, all at once, to the Session; the Session admits the reply
//! inside its own handler only if its floor is free, so a user turn arriving at the same
//! instant always wins. Pairs that land while the session is busy are delivered together.

pub(crate) mod messages;

use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef};

pub(crate) use messages::{CoalescerMsg, PendingReply};

use crate::session::SessionMsg;

pub(crate) struct CoalescerActor;

pub(crate) struct CoalescerState {
    session: ActorRef<SessionMsg>,
    /// In enqueue order.
    pending: Vec<PendingReply>,
}

impl Actor for CoalescerActor {
    type Msg = CoalescerMsg;
    type State = CoalescerState;
    type Arguments = ActorRef<SessionMsg>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        session: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CoalescerState { session, pending: Vec::new() })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CoalescerMsg::Enqueue(pending) => {
                state.pending.push(pending);
                state.offer().await;
            }
            CoalescerMsg::SessionIdle => state.offer().await,
        }
        Ok(())
    }
}

impl CoalescerState {
    /// Offers everything pending; the Session answers whether it admitted the reply. The
    /// Session never waits on this actor, so the call cannot deadlock.
    async fn offer(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = self.pending.clone();
        match self.session.call(|reply| SessionMsg::AdmitReply { batch, reply }, None).await {
            Ok(CallResult::Success(true)) => self.pending.clear(),
            Ok(CallResult::Success(false)) => {} // busy: the Session says when it is idle
            _ => self.pending.clear(),           // the session is gone
        }
    }
}
