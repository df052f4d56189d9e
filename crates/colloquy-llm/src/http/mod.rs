//! The HTTP side every provider crate shares (feature `http`): one reqwest client on rustls
//! with ring, a POST whose body is a server-sent-event stream, retries with backoff before the
//! first event, timeouts, and the key kept out of every error.
//!
//! A provider supplies only a [`SseDecoder`] (its events → [`LlmChunk`](crate::LlmChunk)s) and the request
//! ([`StreamRequest`]); its [`Endpoint`] holds the key, base URL, model and client. The
//! request runs in a task whose stream is returned; dropping the stream aborts the task,
//! which cancels the request.

mod endpoint;
mod key;
mod options;
mod request;
mod transport;
mod utf8;

pub use endpoint::{ConfigError, Endpoint, HttpProvider, KeyHeader};
pub use key::ApiKey;
pub use options::HttpOptions;
pub use request::{SseDecoder, StreamRequest};
pub use transport::HttpTransport;
