//! The journal's format: one [`Record`] per fact a resume needs, in an [`Entry`] that numbers
//! it. Serialized as JSON (`{"seq":1,"at_ms":0,"type":"items_committed",…}`); a change to any
//! type here is a new [`SCHEMA_VERSION`] with a migration (docs/durability.md#format).

use std::sync::Arc;

use colloquy_model::{ChatItem, FunctionCall};
use serde::{Deserialize, Serialize};

/// The version of the records (and of the store's tables) this build writes and reads. A store
/// refuses a journal of a newer version rather than misread it, and migrates an older one
/// (2 adds the leases: docs/durability.md#leases; 3 keeps a journal as a chain of batches; 4
/// adds [`Record::CommandTaken`]).
pub const SCHEMA_VERSION: u32 = 4;

/// One record of a session's journal, numbered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Entry {
    /// 1 for a session's first record, then one more for each.
    pub seq: u64,
    /// Milliseconds since the session started, when the fact was decided.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub record: Record,
}

impl Entry {
    /// Record `record`, numbered `seq`, decided `at_ms` into the session.
    pub fn new(seq: u64, at_ms: u64, record: Record) -> Self {
        Self { seq, at_ms, record }
    }
}

/// What happened to a session, as much as a resume needs to continue it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Record {
    /// Items committed to `agent`'s context and the history (messages, tool calls and their
    /// outputs, in order).
    ItemsCommitted {
        /// The agent whose context they joined.
        agent: String,
        /// The items (shared with the session that committed them: a record costs no copy).
        items: Vec<Arc<ChatItem>>,
    },
    /// An agent entered: its `agent_handoff` item (the history only; it opens the agent's
    /// context).
    AgentEntered {
        /// The `agent_handoff` item.
        item: Arc<ChatItem>,
    },
    /// The pair `update_id` was copied from `from`'s context into `to`'s (a deferred reply
    /// delivered by another agent).
    PairMoved {
        /// The agent that received the pair.
        from: String,
        /// The agent that delivers its reply.
        to: String,
        /// The pair's call id.
        update_id: String,
    },
    /// A tool call started.
    CallStarted {
        /// The call, as the model made it.
        call: FunctionCall,
        /// Whether it could be cancelled.
        cancellable: bool,
    },
    /// A started call waits for the host's approval or a place under its cap: its body has
    /// not begun.
    CallWaiting {
        /// Its id.
        call_id: String,
    },
    /// A call that waited is let through: its body begins once this is on disk.
    CallLetThrough {
        /// Its id.
        call_id: String,
    },
    /// An `idempotent` tool's result was remembered: a later call with the same key gets it
    /// without running, until `until_unix_ms` (wall-clock milliseconds, so the window
    /// counts across processes).
    ResultRemembered {
        /// The call's result key (its tool's name and validated arguments).
        key: String,
        /// What the model read.
        output: String,
        /// Whether it asked for a reply.
        reply_required: bool,
        /// The `tool_call_ended` message.
        message: Option<String>,
        /// When it is forgotten.
        until_unix_ms: u64,
    },
    /// A tool call ended.
    CallEnded {
        /// Its id.
        call_id: String,
    },
    /// An inserted pair waits for its deferred reply.
    ReplyAwaited {
        /// The pair's call id.
        update_id: String,
    },
    /// A reply took these pairs.
    RepliesTaken {
        /// Their call ids.
        update_ids: Vec<String>,
    },
    /// The session began closing.
    CloseBegan {
        /// Why.
        reason: String,
    },
    /// A host's command, sent with an id (`SessionHandle::with_command_id`), did something:
    /// written in the batch that holds the first of what it did, so a resume knows it ran
    /// and a resend runs it no more (docs/durability.md#commands).
    CommandTaken {
        /// The id its host gave it.
        id: String,
    },
    /// The session resumed after its process ended: these calls were running then.
    Resumed {
        /// The calls in doubt and what became of each.
        in_doubt: Vec<CallInDoubtRecord>,
    },
}

/// A call that was running when its process ended, as a [`Record::Resumed`] lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallInDoubtRecord {
    /// Its id.
    pub call_id: String,
    /// Its tool.
    pub name: String,
    /// What became of it (`failed`: the model was told it may or may not have completed).
    pub outcome: String,
}

impl CallInDoubtRecord {
    /// Call `call_id` of tool `name`, which ended as `outcome`.
    pub fn new(call_id: impl Into<String>, name: impl Into<String>, outcome: &str) -> Self {
        Self { call_id: call_id.into(), name: name.into(), outcome: outcome.to_string() }
    }
}
