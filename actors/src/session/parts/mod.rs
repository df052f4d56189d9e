//! The Session's state, by concern: each file holds one concern's state (fields private) and
//! applies the [`Fact`](fact::Fact)s that change it. Nothing here imports the Session above it:
//! a concern learns what it needs from the fact or from its method's arguments.
//!
//! Five groups, one per field of `SessionState` beside its link: the conversation (history,
//! contexts, queued inputs), the agent (the current one and a handoff in progress), the floor
//! (speeches, holds, agent and user state, idle waiters), the tools (running calls, deferred
//! replies) and the host's side (event fan-out, the testing API's run, the close).

pub(super) mod activity_factory;
pub(super) mod agent;
pub(super) mod calls;
pub(super) mod close;
pub(super) mod commands;
pub(super) mod conversation;
pub(super) mod events;
pub(super) mod fact;
pub(super) mod floor;
pub(super) mod handoff;
pub(super) mod host;
pub(super) mod idle;
pub(super) mod journal;
pub(super) mod presence;
pub(super) mod replies;
pub(super) mod testing;
pub(super) mod tools;
