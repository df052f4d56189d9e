//! The runtime's plain types, at the bottom of the crate: the session's options, its errors,
//! the snapshots `inspect` returns, the lifecycle records, and the speech-sink trait a host
//! plugs in. They import nothing of the crate but one another.

pub(crate) mod error;
pub(crate) mod lifecycle;
pub(crate) mod options;
pub(crate) mod snapshot;
pub(crate) mod speech_sink;
