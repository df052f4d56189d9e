//! The Session's state, one part per concern. Each part keeps its own invariant (written at
//! the top of its file) and knows nothing of the others or of the Session; the transitions
//! that span parts are `impl SessionState` blocks one folder up.

pub(super) mod agent;
pub(super) mod calls;
pub(super) mod close;
pub(super) mod conversation;
pub(super) mod events;
pub(super) mod floor;
pub(super) mod handoff;
pub(super) mod idle;
pub(super) mod presence;
pub(super) mod replies;
pub(super) mod run;
