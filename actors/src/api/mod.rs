//! The top of the runtime: the builder that starts a session and the `Host` that supervises
//! sessions. The types a host reads back or plugs in are `types/`; the handle that drives a
//! session is `messages/handle.rs`; `lib.rs` re-exports what is public.

pub(crate) mod builder;
pub(crate) mod host;
