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
}

impl InDoubtOutcome {
    /// As the journal and the wire spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
        }
    }
}
