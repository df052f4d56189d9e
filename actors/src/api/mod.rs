//! What a host touches: the builder that starts a session, the handle that drives it, the
//! `Host` that supervises sessions, their options and errors, and what a host reads back
//! (snapshots, lifecycle records) or plugs in (the speech sink). `lib.rs` re-exports the
//! public types. The plain types (options, errors, snapshots, lifecycle records, the sink)
//! sit below every actor; only `builder` and `host` sit above them.

pub(crate) mod builder;
pub(crate) mod error;
pub(crate) mod handle;
pub(crate) mod host;
pub(crate) mod inspect;
pub(crate) mod lifecycle;
pub(crate) mod options;
pub(crate) mod snapshot;
pub(crate) mod speech_sink;
