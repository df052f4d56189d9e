//! The ReplyCoalescer actor: one per session (decision 17). It holds every pair that waits for
//! a deferred reply and offers them, all at once, to the Session when the Session says its
//! floor is free (`SessionIdle`); the Session admits the reply inside its own handler only if
//! the floor is still free, so a user turn arriving at the same instant always wins. Pairs
//! that land while the session is busy are delivered together: nothing is offered to a busy
//! session, so a busy turn costs no offer that would be turned down.
//!
//! Offers and answers are one-way messages: neither actor ever waits on the other inside a
//! handler, so stopping the session (which stops this child) can never deadlock.
//!
//! The Session spawns it on the first pair that waits for a reply ([`forward`]): a
//! session that never defers a reply never pays for the actor.

use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

use crate::messages::{ChildMsg, CoalescerMsg, PendingReply, SessionLink, SessionMsg};
use crate::support::lifecycle_sink::LifecycleGuard;
use crate::types::lifecycle::ActorKind;
use crate::types::snapshot::CoalescerSnapshot;

pub(crate) struct CoalescerActor;

/// The Session's side of [`SessionLink::enqueue_reply`]: spawns the coalescer under
/// `supervisor` if it does not run yet, forwards the pair, and only then publishes the
/// coalescer in the link's slot, so a pair sent straight to it never overtakes one forwarded
/// here.
pub(crate) async fn forward(
    link: &SessionLink,
    supervisor: ActorCell,
    pending: PendingReply,
) -> Result<(), SpawnErr> {
    let slot = &link.coalescer;
    if let Some(coalescer) = slot.get() {
        let _ = coalescer.cast(CoalescerMsg::Enqueue(pending));
        return Ok(());
    }
    let (coalescer, _) =
        Box::pin(Actor::spawn_linked(None, CoalescerActor, link.clone(), supervisor)).await?;
    let _ = coalescer.cast(CoalescerMsg::Enqueue(pending));
    slot.set(coalescer);
    Ok(())
}

pub(crate) struct CoalescerState {
    session: ActorRef<SessionMsg>,
    lifecycle: LifecycleGuard,
    /// In enqueue order; shared with the offer that carries them.
    pending: Vec<Arc<PendingReply>>,
    /// An offer of the first `n` pending pairs awaits the Session's answer (pairs enqueued
    /// meanwhile go after them).
    offered: Option<usize>,
    /// The Session said its floor is free (`SessionIdle`) and nothing was offered since. The
    /// Session says so whenever a reply could start and it knows of unreplied pairs (it
    /// learns of each from the pair's commit), so pairs wait here until then.
    invited: bool,
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
        let lifecycle = LifecycleGuard::new(link.lifecycle.clone(), ActorKind::Coalescer, || {
            "coalescer".into()
        });
        let session = link.actor.clone();
        Ok(CoalescerState {
            session,
            lifecycle,
            pending: Vec::new(),
            offered: None,
            invited: false,
        })
    }

    async fn post_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.lifecycle.started();
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Only the Session stops its coalescer, as it closes.
        state.lifecycle.stopped(Some("parent stopped".into()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::support::counters::handled(crate::types::lifecycle::ActorKind::Coalescer);
        match message {
            CoalescerMsg::Enqueue(pending) => {
                state.pending.push(Arc::new(pending));
                state.offer(&myself);
            }
            CoalescerMsg::SessionIdle => {
                state.invited = true;
                state.offer(&myself);
            }
            CoalescerMsg::Admitted => {
                // Pairs that came meanwhile wait for the next `SessionIdle`.
                let offered = state.offered.take().unwrap_or(0);
                state.pending.drain(..offered.min(state.pending.len()));
            }
            CoalescerMsg::Busy => {
                // Something took the floor first; the Session says when it is free again.
                state.offered = None;
            }
            CoalescerMsg::Inspect(reply) => {
                let pending = state.pending.iter().map(|p| p.update_id.clone()).collect();
                let offered = state.offered.is_some();
                let _ = reply.send(CoalescerSnapshot { pending, offered });
            }
        }
        Ok(())
    }
}

impl CoalescerState {
    /// Offers everything pending once invited, unless an offer is still unanswered.
    fn offer(&mut self, myself: &ActorRef<CoalescerMsg>) {
        if !self.invited || self.offered.is_some() || self.pending.is_empty() {
            return;
        }
        self.invited = false;
        let batch = self.pending.clone();
        let count = batch.len();
        let offer = ChildMsg::AdmitReply { batch, coalescer: myself.clone() };
        if self.session.cast(offer.into()).is_ok() {
            self.offered = Some(count);
        } else {
            self.pending.clear(); // the session is gone
        }
    }
}
