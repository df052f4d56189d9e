//! The typed failure of an LLM request ([`LlmError`]).

use std::time::Duration;

use colloquy_model::LlmErrorKind;

/// Longest body excerpt an error keeps: enough to read the provider's message, short enough
/// for a log line.
pub const BODY_EXCERPT: usize = 300;

/// Why an LLM request failed. Its text never contains an API key (adapters redact it from
/// anything a server echoes back).
///
/// ```
/// use colloquy_llm::LlmError;
/// use colloquy_model::LlmErrorKind;
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
    /// The request was over the model's context: the provider said so (OpenAI's
    /// `context_length_exceeded`, llama.cpp's `exceed_context_size_error`, vLLM's and
    /// Anthropic's words). Its figures, where the provider gave them, size the trimmed retry.
    #[error("the request is over the model's context (HTTP {status}): {body}")]
    ContextLength {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
        /// The model's context size in tokens, if the provider said.
        limit: Option<u64>,
        /// The refused prompt's size in tokens, if the provider said.
        prompt: Option<u64>,
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
            LlmError::ContextLength { .. } => LlmErrorKind::ContextLength,
        }
    }

    /// The error for an unsuccessful HTTP status and its body (cut to an excerpt).
    pub fn from_status(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let excerpt = excerpt(body);
        match status {
            401 | 403 => LlmError::Auth { status, body: excerpt },
            429 => LlmError::RateLimit { retry_after, body: excerpt },
            400..=500 if says_context_overflow(body) => {
                let (limit, prompt) = overflow_figures(body);
                LlmError::ContextLength { status, body: excerpt, limit, prompt }
            }
            _ => LlmError::Http { status, body: excerpt },
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

/// Whether an error body says the request was over the model's context, in the words of
/// OpenAI (`context_length_exceeded`, "maximum context length"), llama.cpp
/// (`exceed_context_size_error`, "exceeds the available context size"), vLLM ("maximum
/// context length") or Anthropic ("prompt is too long", "exceed context limit").
fn says_context_overflow(body: &str) -> bool {
    const MARKS: [&str; 7] = [
        "context_length_exceeded",
        "maximum context length",
        "exceed_context_size_error",
        "exceeds the available context size",
        "prompt is too long",
        "exceed context limit",
        "context window",
    ];
    let body = body.to_ascii_lowercase();
    MARKS.iter().any(|mark| body.contains(mark))
}

/// The model's context size and the prompt's size, where an overflow's body gives them:
/// llama.cpp's `n_ctx` and `n_prompt_tokens`; OpenAI's and vLLM's "maximum context length is
/// N tokens" with "resulted in N tokens", "requested N tokens" or "has N input tokens";
/// Anthropic's "N tokens > M maximum".
fn overflow_figures(body: &str) -> (Option<u64>, Option<u64>) {
    let body = body.to_ascii_lowercase();
    let limit = number_after(&body, "\"n_ctx\":")
        .or_else(|| number_after(&body, "maximum context length is "))
        .or_else(|| number_after(&body, " > "));
    let prompt = number_after(&body, "\"n_prompt_tokens\":")
        .or_else(|| number_after(&body, "resulted in "))
        .or_else(|| number_after(&body, "your request has "))
        .or_else(|| number_after(&body, "you requested "))
        .or_else(|| number_after(&body, "prompt is too long: "));
    (limit, prompt)
}

/// The whole number right after the first `mark` in `text` (spaces allowed before it).
fn number_after(text: &str, mark: &str) -> Option<u64> {
    let rest = text[text.find(mark)? + mark.len()..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
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
    fn context_overflows_are_recognised_in_each_providers_words() {
        let cases = [
            // OpenAI
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                (Some(128_000), Some(130_532)),
            ),
            // llama.cpp's server
            (
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5210,"n_ctx":4096}}"#,
                (Some(4096), Some(5210)),
            ),
            // vLLM
            (
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
                (Some(4096), Some(5000)),
            ),
            // Anthropic
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
                (Some(200_000), Some(208_310)),
            ),
        ];
        for (status, body, (limit, prompt)) in cases {
            let e = LlmError::from_status(status, body, None);
            assert_eq!(e.kind(), LlmErrorKind::ContextLength, "{body}");
            assert!(!e.is_retryable());
            let LlmError::ContextLength { limit: l, prompt: p, .. } = e else { unreachable!() };
            assert_eq!((l, p), (limit, prompt), "{body}");
        }
        let other = LlmError::from_status(400, r#"{"error":{"message":"bad tool schema"}}"#, None);
        assert_eq!(other.kind(), LlmErrorKind::Http);
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
