//! Fixed texts the LLM sees (decision 18 and §4), kept in one place so traces
//! and prompts stay in step.

/// Output of a tool that failed or panicked; the real error only goes to events and logs.
pub const INTERNAL_ERROR: &str = "An internal error occurred.";

/// How a call ends when a drain (handoff, close) runs out of time (decision 7).
pub const DRAIN_TIMEOUT: &str = "drain timeout";

/// Output for an LLM call to a name that is not a visible tool (§4 step 2), without the list.
pub fn unknown_function(name: &str, available: &[&str]) -> String {
    format!("Unknown function: {name} - available tools: {}", available.join(", "))
}

/// Prefix of every argument error (§5, decision 19).
pub fn argument_error_prefix(name: &str) -> String {
    format!("Error parsing arguments for `{name}`: ")
}

/// An error's text followed by its sources' (`top: cause: root cause`): what really failed
/// (refused, reset, a parse error) for a log or an event.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
