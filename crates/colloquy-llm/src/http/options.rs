//! Timeouts and retries.

use std::time::Duration;

/// Timeouts and retries of a provider's requests.
///
/// ```
/// use colloquy_llm::http::HttpOptions;
/// use std::time::Duration;
/// let fast = HttpOptions { max_retries: 0, ..HttpOptions::default() };
/// assert_eq!(fast.first_token_timeout, Duration::from_secs(30));
/// assert_eq!(fast.stall_timeout, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Connecting to the server (TCP and TLS).
    pub connect_timeout: Duration,
    /// From sending the request to the first event of the stream (a retryable failure).
    pub first_token_timeout: Duration,
    /// Between two reads of the body once the stream flows.
    pub read_timeout: Duration,
    /// From the first event, and again from each piece of text or tool call, to the next:
    /// past it the step ends with a `timeout` error. Empty deltas, keep-alive pings and usage
    /// do not reset it (reasoning a provider streams does), so a server trickling them cannot
    /// hold a step forever.
    pub stall_timeout: Duration,
    /// New attempts after a retryable failure before the first event (0 = none).
    pub max_retries: u32,
    /// The first backoff; each later one doubles, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The longest backoff, and the longest `Retry-After` honoured (a longer one fails now).
    pub max_backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_token_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(60),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
        }
    }
}
