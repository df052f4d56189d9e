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

/// What the model reads for a call whose arguments the provider cut off (its response ended
/// `length`): nothing ran, and the arguments it sent are not shown back to it.
pub fn call_cut_off(name: &str) -> String {
    format!(
        "Not run: your response was cut off before the arguments of `{name}` were complete. \
         Call it again with complete arguments, keeping the rest of your answer short."
    )
}

/// What the model reads when a call runs past its deadline: ``Tool `NAME` timed out after N s``.
pub fn tool_timed_out(name: &str, after: std::time::Duration) -> String {
    format!("Tool `{name}` timed out after {} s", seconds(after))
}

/// What the model reads when the host's `before_tool_call` hook rejects a call.
pub fn tool_rejected_by_host(name: &str, reason: &str) -> String {
    format!("The host rejected `{name}`: {reason}")
}

/// What the model reads for a running call: the placeholder of a blocking call in another
/// reply's request (§16), and the output of a call an interrupted speech stopped waiting for.
pub const STILL_RUNNING: &str = "The tool call is still in progress.";

/// The output a call gets when its session resumes after the process that ran it ended while
/// it was running (`{name}`: its tool); the model reads that it may or may not have done its
/// work (docs/durability.md).
pub const INTERRUPTED_BY_RESTART: &str = "`{name}` was interrupted by a restart: it may or may not have completed. Check before \
     doing it again.";

/// The output a call of a `rerun` tool gets when its session resumes after the process that
/// ran it ended while it was running: it runs again, and its result follows as a deferred
/// reply (docs/durability.md#on-interrupted).
pub const INTERRUPTED_RERUN: &str =
    "`{name}` was interrupted by a restart: it is running again, and its result will follow.";

/// As [`INTERRUPTED_RERUN`], for an `ask` tool: it runs again only if the host approves.
pub const INTERRUPTED_ASK: &str = "`{name}` was interrupted by a restart: it runs again if \
     approved, and its result will follow.";

/// The output a call gets at a resume when it had not started (it waited for approval or a
/// place) and has not been answered yet: it goes on as it would have.
pub const INTERRUPTED_NOT_STARTED: &str = "`{name}` had not started when the session \
     restarted: it runs as it would have, and its result will follow.";

/// Why a call waiting for approval was rejected when nobody answered in time.
pub fn approval_timed_out(after: std::time::Duration) -> String {
    format!("no answer within {} s", seconds(after))
}

/// Why an agent-scoped call waiting for approval was rejected at a handoff.
pub const APPROVAL_HANDOFF: &str = "the conversation moved to another agent before approval";

/// Why a call waiting for approval was rejected when the session closed.
pub const APPROVAL_CLOSED: &str = "the session closed before approval";

/// What the model reads when a call goes without an update past its heartbeat.
pub fn tool_heartbeat_missed(name: &str, quiet: std::time::Duration) -> String {
    format!("Tool `{name}` timed out: no update for {} s", seconds(quiet))
}

/// What the model reads for a call past its turn's budget of tool calls (not run).
pub fn tool_budget_exhausted(limit: u32) -> String {
    format!(
        "Not run: this turn has used its {limit} tool calls. Answer the user with what you have."
    )
}

/// A remembered result's output for a tool that asks the model to be told
/// (`FunctionTool::note_remembered`).
pub fn remembered_result(output: &str, name: &str, ago: std::time::Duration) -> String {
    format!(
        "{output}\n(Remembered from a call {} s ago; `{name}` did not run again.)",
        seconds(ago)
    )
}

/// Seconds as a person writes them: `30`, `0.5`, `1.25` (at most millisecond precision).
fn seconds(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    let (whole, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:03}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod timeout_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timeouts_read_in_seconds() {
        let name = "lookup";
        assert_eq!(
            tool_timed_out(name, Duration::from_secs(30)),
            "Tool `lookup` timed out after 30 s"
        );
        assert_eq!(
            tool_timed_out(name, Duration::from_millis(500)),
            "Tool `lookup` timed out after 0.5 s"
        );
        assert_eq!(
            tool_timed_out(name, Duration::from_millis(1250)),
            "Tool `lookup` timed out after 1.25 s"
        );
        assert_eq!(
            tool_heartbeat_missed(name, Duration::from_secs(10)),
            "Tool `lookup` timed out: no update for 10 s"
        );
    }
}
