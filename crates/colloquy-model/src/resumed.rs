//! What a session resumed from its store says of the calls that were running when the process
//! that ran it ended (docs/durability.md).

use serde::{Deserialize, Serialize};

/// A call that was running when the process of its session ended, as
/// [`EventKind::SessionResumed`](crate::EventKind::SessionResumed) names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ResumedCall {
    /// Its id.
    pub call_id: String,
    /// Its tool.
    pub name: String,
    /// What became of it.
    pub outcome: InDoubtOutcome,
}

impl ResumedCall {
    /// Call `call_id` of tool `name`, which became `outcome`.
    pub fn new(
        call_id: impl Into<String>,
        name: impl Into<String>,
        outcome: InDoubtOutcome,
    ) -> Self {
        Self { call_id: call_id.into(), name: name.into(), outcome }
    }
}

/// What a resumed session did with a call that was running when its process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InDoubtOutcome {
    /// It ended as an error the model reads: the call was interrupted by a restart and may or
    /// may not have done its work.
    Failed,
    /// Its body runs again, with the idempotency key it had (`rerun` tools); its result comes
    /// as a deferred reply.
    Rerun,
    /// The host is asked whether it runs again, as an approval (`ask` tools).
    Asked,
    /// It had not started: it waited for approval (asked again now) or for a place under its
    /// cap (it waits again), and runs as it would have. Whatever its tool's policy.
    NotStarted,
}

impl InDoubtOutcome {
    /// As the journal and the wire spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Rerun => "rerun",
            Self::Asked => "asked",
            Self::NotStarted => "not_started",
        }
    }
}

/// What a resumed session does with a call of a tool that was running when the process of the
/// session ended, so that neither its result nor its side effect is lost or doubled unseen
/// (docs/durability.md#on-interrupted). Set on the tool, a toolset, or the session
/// (`SessionOptions::on_interrupted`); the innermost that sets one wins.
///
/// ```
/// use colloquy_model::OnInterrupted;
/// assert_eq!("rerun".parse::<OnInterrupted>(), Ok(OnInterrupted::Rerun));
/// assert_eq!(OnInterrupted::default(), OnInterrupted::Fail);
/// assert!("again".parse::<OnInterrupted>().unwrap_err().contains("fail, rerun or ask"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnInterrupted {
    /// The call ends as an error the model reads: `NAME` was interrupted by a restart and may
    /// or may not have completed. Nothing runs again (the default: safe for any tool).
    #[default]
    Fail,
    /// The body runs again, with the same [`RunContext::idempotency_key`] as the first time:
    /// for tools safe to repeat, or whose service deduplicates by that key (a payment API).
    ///
    /// [`RunContext::idempotency_key`]: crate::RunContext::idempotency_key
    Rerun,
    /// The host decides, as for a tool that requires approval: approved, the body runs again
    /// as with `Rerun`; rejected (or unanswered in time), the call ends rejected.
    Ask,
}

impl OnInterrupted {
    /// As a tool attribute, a scenario file and the docs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Rerun => "rerun",
            Self::Ask => "ask",
        }
    }
}

impl std::str::FromStr for OnInterrupted {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(Self::Fail),
            "rerun" => Ok(Self::Rerun),
            "ask" => Ok(Self::Ask),
            other => Err(format!("`{other}` is no on_interrupted policy: fail, rerun or ask")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OnInterrupted::{Ask, Rerun};
    use crate::{FunctionTool, RunContext, ToolError, Toolset};

    fn tool(name: &str) -> FunctionTool {
        FunctionTool::new(name, "A tool.", |_ctx: RunContext, _a: crate::tool::NoArgs| async {
            Ok::<_, ToolError>("ok")
        })
    }

    #[test]
    fn the_innermost_policy_wins_whatever_the_builder_order() {
        let inner = Toolset::new("inner").tool(tool("b").on_interrupted(Rerun)).tool(tool("c"));
        let outer = Toolset::new("outer").tool(tool("a")).toolset(inner).on_interrupted(Ask);
        let policies: Vec<_> =
            outer.flatten().iter().map(|t| (t.name(), t.limits().on_interrupted)).collect();
        assert_eq!(policies, [("a", Some(Ask)), ("b", Some(Rerun)), ("c", Some(Ask))]);
        assert_eq!(tool("d").limits().on_interrupted, None, "left to the session");
    }
}
