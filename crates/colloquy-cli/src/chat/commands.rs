//! The chat's slash commands, parsed from a line (pure).

/// What a line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A user turn.
    Say(String),
    /// Nothing (a blank line).
    Nothing,
    /// `/help`.
    Help,
    /// `/tools`: the agent's tools and the running calls.
    Tools,
    /// `/cancel ID`.
    Cancel(String),
    /// `/approve ID`: let a call waiting for approval run.
    Approve(String),
    /// `/reject ID REASON`: end a call waiting for approval; the model reads the reason.
    Reject {
        /// The call id.
        id: String,
        /// Why (what the model reads).
        reason: String,
    },
    /// `/inspect`: the actor tree, indented (`/inspect json`: as JSON).
    Inspect {
        /// The whole snapshot as JSON.
        json: bool,
    },
    /// `/timeline FILE.html`.
    Timeline(String),
    /// `/history`.
    History,
    /// `/quit`.
    Quit,
    /// `/new` (or `/clear`): a new session, its history empty.
    New,
    /// A command that is not one, with why.
    Invalid(String),
}

/// The commands, for `/help`.
pub const HELP: &str = "\
commands:
  /tools              the agent's tools, and the calls running now
  /cancel ID          cancel a running call: #N from its lines, or its id (a prefix will do)
  /approve ID         let a call that waits for approval run
  /reject ID REASON   refuse a call that waits for approval; the agent hears why
  /inspect            the session's actor tree (/inspect json: the whole snapshot as JSON)
  /timeline FILE.html write the conversation so far as a timeline page
  /history            the conversation history
  /new                start over: a new session with the same agent, its history empty
  /quit               close the session and leave (end of input does the same)
A line typed while the agent speaks interrupts it; Ctrl-C interrupts the agent's reply,
and Ctrl-C twice within a second quits.";

/// Reads one input line.
///
/// ```
/// use colloquy_cli::chat::commands::{parse, Line};
/// assert_eq!(parse("/cancel call_1"), Line::Cancel("call_1".into()));
/// assert_eq!(parse("hello"), Line::Say("hello".into()));
/// ```
pub fn parse(line: &str) -> Line {
    let line = line.trim();
    let Some(command) = line.strip_prefix('/') else {
        return match line.is_empty() {
            true => Line::Nothing,
            false => Line::Say(line.to_string()),
        };
    };
    let (name, rest) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
    let rest = rest.trim();
    match (name, rest.is_empty()) {
        ("help", _) => Line::Help,
        ("tools", true) => Line::Tools,
        ("inspect", true) => Line::Inspect { json: false },
        ("inspect", false) if rest == "json" => Line::Inspect { json: true },
        ("history", true) => Line::History,
        ("quit" | "exit", true) => Line::Quit,
        ("new" | "clear", true) => Line::New,
        ("cancel", false) => Line::Cancel(rest.to_string()),
        ("cancel", true) => Line::Invalid("/cancel needs a call id (see /tools)".into()),
        ("approve", false) if !rest.contains(char::is_whitespace) => {
            Line::Approve(rest.to_string())
        }
        ("approve", false) => Line::Invalid("/approve takes one call id".into()),
        ("reject", false) => match rest.split_once(char::is_whitespace) {
            Some((id, reason)) => Line::Reject { id: id.to_string(), reason: reason.trim().into() },
            None => Line::Invalid("/reject needs a call id and a reason".into()),
        },
        ("approve" | "reject", true) => {
            Line::Invalid(format!("/{name} needs a call id: #N (it is in the `waits` line)"))
        }
        ("timeline", false) => Line::Timeline(rest.to_string()),
        ("timeline", true) => Line::Invalid("/timeline needs a file name".into()),
        ("inspect", false) => Line::Invalid("/inspect takes `json` or nothing".into()),
        ("tools" | "history" | "quit" | "exit" | "new" | "clear", false) => {
            Line::Invalid(format!("/{name} takes no argument"))
        }
        _ => Line::Invalid(format!("unknown command /{name} (/help lists them)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_turns() {
        assert_eq!(parse("  "), Line::Nothing);
        assert_eq!(parse("/tools"), Line::Tools);
        assert_eq!(parse("/timeline out.html"), Line::Timeline("out.html".into()));
        assert_eq!(parse("/quit"), Line::Quit);
        assert_eq!(parse("/new"), Line::New);
        assert_eq!(parse("/clear"), Line::New);
        assert_eq!(parse("/cancel #2"), Line::Cancel("#2".into()));
        assert_eq!(parse("/inspect"), Line::Inspect { json: false });
        assert_eq!(parse("/inspect json"), Line::Inspect { json: true });
        assert!(matches!(parse("/inspect yaml"), Line::Invalid(_)));
        assert!(matches!(parse("/cancel"), Line::Invalid(_)));
        assert_eq!(parse("/approve c1"), Line::Approve("c1".into()));
        assert!(matches!(parse("/approve c1 c2"), Line::Invalid(_)));
        assert!(matches!(parse("/approve"), Line::Invalid(_)));
        assert_eq!(
            parse("/reject c1  too  expensive "),
            Line::Reject { id: "c1".into(), reason: "too  expensive".into() }
        );
        assert!(matches!(parse("/reject c1"), Line::Invalid(_)));
        assert!(matches!(parse("/dance"), Line::Invalid(_)));
        assert!(matches!(parse("/tools now"), Line::Invalid(_)));
    }
}
