//! A failed tool call: the text the model reads, and the text the logs and events get
//! (§4, decision 13).

use std::fmt;

/// Whether an error's text is meant for the model or is an internal failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The model sees the message (e.g. "card declined").
    Tool,
    /// The model sees only [`crate::text::INTERNAL_ERROR`]; the message goes to events and logs.
    Internal,
}

/// A failed tool call.
///
/// ```
/// use colloquy_model::ToolError;
/// let declined = ToolError::new("card declined");            // the model reads this
/// let broken = ToolError::internal("db timeout on shard 3"); // the model reads a generic text
/// assert_eq!(declined.model_text(), "card declined");
/// assert_eq!(broken.model_text(), "An internal error occurred.");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    kind: ToolErrorKind,
}

impl ToolError {
    /// An error whose message the model sees.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), kind: ToolErrorKind::Tool }
    }

    /// An unexpected failure: the model sees only the internal-error text.
    pub fn internal(message: impl fmt::Display) -> Self {
        Self { message: message.to_string(), kind: ToolErrorKind::Internal }
    }

    /// The real message (what `ToolCallEnded` carries).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Which kind of error this is.
    pub fn kind(&self) -> ToolErrorKind {
        self.kind
    }

    /// The text the model sees.
    pub fn model_text(&self) -> &str {
        match self.kind {
            ToolErrorKind::Tool => &self.message,
            ToolErrorKind::Internal => crate::text::INTERNAL_ERROR,
        }
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `?` on any error in a tool body: it becomes an internal error — the model reads the
/// generic text, the log and `tool_call_ended` get the error with its sources. `ToolError`
/// does not implement `std::error::Error` itself so that this conversion can exist (as
/// `anyhow::Error` does not); [`ToolError::message`] and `Display` give its text.
///
/// ```
/// use colloquy_model::ToolError;
/// fn parse(text: &str) -> Result<u32, ToolError> {
///     Ok(text.parse::<u32>()?)
/// }
/// let error = parse("many").unwrap_err();
/// assert_eq!(error.model_text(), "An internal error occurred.");
/// assert_eq!(error.message(), "invalid digit found in string");
/// ```
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> Self {
        ToolError::internal(crate::text::error_chain(&error))
    }
}
