//! The typed failure of an LLM request ([`LlmError`]).

use std::time::Duration;

use colloquy_core::LlmErrorKind;

/// Longest body excerpt an error keeps: enough to read the provider's message, short enough
/// for a log line.
pub const BODY_EXCERPT: usize = 300;

/// Why an LLM request failed. Its text never contains an API key (adapters redact it from
/// anything a server echoes back).
///
/// ```
/// use colloquy_llm::LlmError;
/// use colloquy_core::LlmErrorKind;
/// let e = LlmError::Http { status: 503, body: "overloaded".into() };
/// assert_eq!(e.kind(), LlmErrorKind::Http);
/// assert_eq!(e.to_string(), "the LLM server answered HTTP 503: overloaded");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The provider refused the credentials.
    #[error("the LLM server refused the credentials (HTTP {status}): {body}")]
    Auth {
        /// 401 or 403.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// Too many requests, still so after the retries.
    #[error("the LLM server is rate limiting (HTTP 429): {body}")]
    RateLimit {
        /// What the server asked to wait, if it said.
        retry_after: Option<Duration>,
        /// The start of the response body.
        body: String,
    },
    /// Another unsuccessful HTTP status.
    #[error("the LLM server answered HTTP {status}: {body}")]
    Http {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// A chunk of the stream was not what the protocol allows.
    #[error("invalid chunk in the LLM stream: {detail}")]
    InvalidChunk {
        /// What was wrong, with the start of the chunk.
        detail: String,
    },
    /// The stream ended early or the connection broke.
    #[error("the LLM stream was cut: {detail}")]
    StreamCut {
        /// What happened.
        detail: String,
    },
    /// Nothing arrived for too long.
    #[error("LLM request timed out: nothing received for {} ms", .waited.as_millis())]
    Timeout {
        /// How long it waited.
        waited: Duration,
    },
    /// The stream went on, but with no text or tool call for too long (only empty deltas,
    /// keep-alives or usage, or nothing): the kind is `timeout`.
    #[error(
        "LLM request timed out: the stream sent no text or tool call for {} ms (empty deltas \
         and keep-alive events do not count)",
        .waited.as_millis()
    )]
    Stalled {
        /// How long it waited since the last text or tool call (or the first event).
        waited: Duration,
    },
    /// The server could not be reached.
    #[error("cannot reach the LLM server: {detail}")]
    Connect {
        /// The transport's own words.
        detail: String,
    },
    /// The provider (or a script) reported an error in the stream itself.
    #[error("{message}")]
    Provider {
        /// The provider's message.
        message: String,
    },
}

impl LlmError {
    /// The kind, as error events carry it.
    pub fn kind(&self) -> LlmErrorKind {
        match self {
            LlmError::Auth { .. } => LlmErrorKind::Auth,
            LlmError::RateLimit { .. } => LlmErrorKind::RateLimit,
            LlmError::Http { .. } => LlmErrorKind::Http,
            LlmError::InvalidChunk { .. } => LlmErrorKind::InvalidChunk,
            LlmError::StreamCut { .. } => LlmErrorKind::StreamCut,
            LlmError::Timeout { .. } | LlmError::Stalled { .. } => LlmErrorKind::Timeout,
            LlmError::Connect { .. } => LlmErrorKind::Connect,
            LlmError::Provider { .. } => LlmErrorKind::Provider,
        }
    }

    /// The error for an unsuccessful HTTP status and its body (cut to an excerpt).
    pub fn from_status(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let body = excerpt(body);
        match status {
            401 | 403 => LlmError::Auth { status, body },
            429 => LlmError::RateLimit { retry_after, body },
            _ => LlmError::Http { status, body },
        }
    }

    /// Whether a new attempt may succeed: connection failures (a stream cut among them),
    /// 429, 5xx and 408, and timeouts. The transport asks only before the first event; after
    /// it, nothing is retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect { .. }
            | LlmError::StreamCut { .. }
            | LlmError::RateLimit { .. }
            | LlmError::Timeout { .. }
            | LlmError::Stalled { .. } => true,
            LlmError::Http { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }
}

/// The first [`BODY_EXCERPT`] characters of a text, whitespace-collapsed, with `…` when cut.
pub fn excerpt(text: &str) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match collapsed.char_indices().nth(BODY_EXCERPT) {
        Some((at, _)) => format!("{}…", &collapsed[..at]),
        None => collapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds_and_retryability() {
        let e = LlmError::from_status(401, "bad key", None);
        assert_eq!((e.kind(), e.is_retryable()), (LlmErrorKind::Auth, false));
        let e = LlmError::from_status(429, "slow down", Some(Duration::from_secs(2)));
        assert_eq!((e.kind(), e.is_retryable()), (LlmErrorKind::RateLimit, true));
        assert!(LlmError::from_status(502, "", None).is_retryable());
        assert!(!LlmError::from_status(400, "bad request", None).is_retryable());
    }

    #[test]
    fn excerpts_are_short_and_on_one_line() {
        let long = "word\n".repeat(200);
        let cut = excerpt(&long);
        assert!(cut.ends_with('…') && !cut.contains('\n'));
        assert_eq!(cut.chars().count(), BODY_EXCERPT + 1);
        assert_eq!(excerpt("  a \n b "), "a b");
    }

    #[test]
    fn timeouts_read_as_the_runtime_always_wrote_them() {
        let e = LlmError::Timeout { waited: Duration::from_secs(5) };
        assert_eq!(e.to_string(), "LLM request timed out: nothing received for 5000 ms");
    }
}
