//! The ReplyCoalescer actor: one per session (decision 17). It holds every pair that waits for
//! a deferred reply and offers them, all at once, to the Session; the Session admits the reply
//! inside its own handler only if its floor is free, so a user turn arriving at the same
//! instant always wins. Pairs that land while the session is busy are delivered together.
//!
//! Offers and answers are one-way messages: neither actor ever waits on the other inside a
//! handler, so stopping the session (which stops this child) can never deadlock.

pub(crate) mod messages;

use ractor::{Actor, ActorProcessingErr, ActorRef};

pub(crate) use messages::{CoalescerMsg, PendingReply};

use crate::lifecycle::{ActorKind, Lifecycle, LifecycleSink};
use crate::session::{SessionLink, SessionMsg};

pub(crate) struct CoalescerActor;

pub(crate) struct CoalescerState {
    session: ActorRef<SessionMsg>,
    lifecycle: LifecycleSink,
    /// In enqueue order.
    pending: Vec<PendingReply>,
    /// An offer awaits the Session's answer.
    offered: bool,
}

impl Actor for CoalescerActor {
    type Msg = CoalescerMsg;
    type State = CoalescerState;
    type Arguments = SessionLink;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        link: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (session, lifecycle) = (link.actor, link.lifecycle);
        Ok(CoalescerState { session, lifecycle, pending: Vec::new(), offered: false })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.report(ActorKind::Coalescer, "coalescer", Lifecycle::Started);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.report(ActorKind::Coalescer, "coalescer", Lifecycle::Stopped);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CoalescerMsg::Enqueue(pending) => {
                state.pending.push(pending);
                state.offer(&myself);
            }
            CoalescerMsg::SessionIdle => state.offer(&myself),
            CoalescerMsg::Admitted(ids) => {
                state.offered = false;
                state.pending.retain(|p| !ids.contains(&p.update_id));
                // Pairs that came meanwhile: the Session is speaking now, so it will say Busy
                // and send `SessionIdle` once the reply is done.
                state.offer(&myself);
            }
            CoalescerMsg::Busy => state.offered = false,
        }
        Ok(())
    }
}

impl CoalescerState {
    /// Offers everything pending, unless an offer is still unanswered.
    fn offer(&mut self, myself: &ActorRef<CoalescerMsg>) {
        if self.offered || self.pending.is_empty() {
            return;
        }
        let batch = self.pending.clone();
        let offer = SessionMsg::AdmitReply { batch, coalescer: myself.clone() };
        self.offered = self.session.cast(offer).is_ok();
        if !self.offered {
            self.pending.clear(); // the session is gone
        }
    }
}
