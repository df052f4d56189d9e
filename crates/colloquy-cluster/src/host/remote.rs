//! [`RemoteSession`]: a session on another node, driven with the `SessionHandle` methods a
//! remote client can call. Each is one request of the session protocol on the session's
//! command subject, bounded by the cluster's [`Timeouts`](super::Timeouts).

use std::sync::Arc;
use std::time::Duration;

use colloquy_actors::{RunningToolCall, SessionSnapshot};
use colloquy_edge::{from_proto, to_proto};
use colloquy_llm::ToolChoice;
use colloquy_model::{AgentState, ChatItem, UserState};
use colloquy_protocol::{Command, ErrorKind, ProtocolError, Reply, Request};
use tokio::time::Instant;

use super::events::{EventCursor, RemoteEvents};
use super::loss::{Placement, Tracked};
use super::moves;
use super::shared::{ClusterInner, Holder, NoAnswer};
use crate::error::ClusterError;
use crate::names;
use crate::nats::{HEADROOM, payload_limit};

/// The pause before a command nobody listened to is sent again.
const RESEND_PAUSE: Duration = Duration::from_millis(100);
/// How long a session whose record cannot be found, while its node is live and no delete of
/// the record shows, is taken to be a server still recovering its buckets (a restart) rather
/// than a session that ended.
const MISSING_GRACE: Duration = Duration::from_secs(2);

/// A session running on a node of the cluster. Cheap to clone; dropping it leaves the session
/// running (close it, or let the node's drain do it).
///
/// When its node is lost, a session the node journaled moves to another node
/// (docs/cluster.md#moves): calls made meanwhile wait for the move and go there, and so does
/// a call under way at the loss. Each command that changes the conversation carries an id,
/// and the session runs it once however often it is sent (docs/cluster.md#commands): one that
/// got no answer is sent again, to the node the session moved to or to the one that stalled,
/// for at most [`Timeouts::resend`](super::Timeouts::resend). A session that cannot move is
/// lost with its node: every call fails with [`ClusterError::NodeLost`] at once
/// (docs/cluster.md#failure).
#[derive(Clone)]
pub struct RemoteSession {
    inner: Arc<ClusterInner>,
    tracked: Arc<Tracked>,
    /// The id its commands carry, if the host chose one ([`Self::with_command_id`]).
    command: Option<Arc<str>>,
}

impl std::fmt::Debug for RemoteSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSession")
            .field("id", &self.tracked.id)
            .field("node", &self.tracked.placement().node)
            .finish()
    }
}

impl RemoteSession {
    pub(crate) fn new(inner: Arc<ClusterInner>, tracked: Arc<Tracked>) -> Self {
        Self { inner, tracked, command: None }
    }

    /// This handle, its commands sent with `id` instead of an id of their own: for a host
    /// that relays commands its clients number, so that a client's resend (after a
    /// reconnect, say) runs no command twice either. The session runs a command once per id
    /// and answers a resend of one it took `Ok`, on whichever node it runs by then
    /// (docs/cluster.md#commands, `SessionHandle::with_command_id`). Use each id for one
    /// command.
    #[must_use]
    pub fn with_command_id(&self, id: impl Into<String>) -> Self {
        Self { command: Some(Arc::from(id.into())), ..self.clone() }
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.tracked.id
    }

    /// The node that holds it: the last one this host knows of, which changes when the
    /// session moves.
    pub fn node(&self) -> String {
        self.tracked.placement().node.clone()
    }

    /// Whether this host has found the session lost with its node: it could not move.
    pub fn is_node_lost(&self) -> bool {
        self.tracked.is_lost()
    }

    /// Whether its node was lost and the session is moving to another.
    pub fn is_moving(&self) -> bool {
        self.tracked.phase() == super::loss::Phase::Moving
    }

    /// The user said `text`; returns once the session has taken the turn.
    pub async fn user_turn(&self, text: impl Into<String>) -> Result<(), ClusterError> {
        self.unit(Command::UserTurn { text: text.into() }).await
    }

    /// The user said `text`, queued behind the agent's current reply instead of interrupting
    /// it (`SessionHandle::user_input`); returns once the session has taken it.
    pub async fn user_input(&self, text: impl Into<String>) -> Result<(), ClusterError> {
        self.unit(Command::UserInput { text: text.into() }).await
    }

    /// Runs any protocol command on the session and returns its reply, for a host that relays
    /// the protocol (a server, a bridge); the session's own refusal is
    /// [`ClusterError::Session`].
    pub async fn execute(&self, command: Command) -> Result<Reply, ClusterError> {
        self.call(command).await
    }

    /// A reply with extra instructions for its first step.
    pub async fn generate_reply(
        &self,
        instructions: impl Into<String>,
    ) -> Result<(), ClusterError> {
        self.unit(Command::GenerateReply { instructions: instructions.into(), tool_choice: None })
            .await
    }

    /// [`generate_reply`](Self::generate_reply) with the first step's `tool_choice`.
    pub async fn generate_reply_with(
        &self,
        instructions: impl Into<String>,
        tool_choice: ToolChoice,
    ) -> Result<(), ClusterError> {
        let instructions = instructions.into();
        let tool_choice = Some(to_proto::tool_choice(tool_choice));
        self.unit(Command::GenerateReply { instructions, tool_choice }).await
    }

    /// Speaks a fixed text.
    pub async fn say(&self, text: impl Into<String>) -> Result<(), ClusterError> {
        self.unit(Command::Say { text: text.into() }).await
    }

    /// Stops the current speech.
    pub async fn interrupt(&self) -> Result<(), ClusterError> {
        self.unit(Command::Interrupt).await
    }

    /// The user started or stopped speaking.
    pub async fn set_user_speaking(&self, speaking: bool) -> Result<(), ClusterError> {
        self.unit(Command::SetUserSpeaking { speaking }).await
    }

    /// Cancels a running call.
    pub async fn cancel_tool_call(&self, call_id: impl Into<String>) -> Result<(), ClusterError> {
        self.unit(Command::CancelToolCall { call_id: call_id.into() }).await
    }

    /// Lets a call that waits for approval run.
    pub async fn approve(&self, call_id: impl Into<String>) -> Result<(), ClusterError> {
        self.unit(Command::Approve { call_id: call_id.into() }).await
    }

    /// Ends a call that waits for approval without running it; the model reads `reason`.
    pub async fn reject(
        &self,
        call_id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Result<(), ClusterError> {
        self.unit(Command::Reject { call_id: call_id.into(), reason: reason.into() }).await
    }

    /// The calls running now.
    pub async fn running_tool_calls(&self) -> Result<Vec<RunningToolCall>, ClusterError> {
        match self.call(Command::RunningToolCalls).await? {
            Reply::Calls { calls } => Ok(calls.into_iter().map(from_proto::running_call).collect()),
            other => Err(unexpected(other, "calls")),
        }
    }

    /// The session history.
    pub async fn history(&self) -> Result<Vec<ChatItem>, ClusterError> {
        match self.call(Command::History).await? {
            Reply::History { items } => Ok(items),
            other => Err(unexpected(other, "history")),
        }
    }

    /// A snapshot of the session (its actor ids are all `ActorId::Local(0)`: the node's are
    /// local to it).
    pub async fn inspect(&self) -> Result<SessionSnapshot, ClusterError> {
        match self.call(Command::Inspect).await? {
            Reply::Snapshot { snapshot } => Ok(from_proto::snapshot(*snapshot)),
            other => Err(unexpected(other, "snapshot")),
        }
    }

    /// The agent and user states.
    pub async fn states(&self) -> Result<(AgentState, UserState), ClusterError> {
        match self.call(Command::States).await? {
            Reply::States { agent, user } => Ok((agent, user)),
            other => Err(unexpected(other, "states")),
        }
    }

    /// Returns once the session is idle (bounded by [`Timeouts::wait`](super::Timeouts::wait)).
    pub async fn wait_for_idle(&self) -> Result<(), ClusterError> {
        self.unit(Command::WaitForIdle).await
    }

    /// Returns once the session is idle and no background call runs.
    pub async fn wait_for_quiet(&self) -> Result<(), ClusterError> {
        self.unit(Command::WaitForQuiet).await
    }

    /// Closes the session (reason `close`); closing a session that is gone is a no-op.
    pub async fn close(&self) -> Result<(), ClusterError> {
        match self.close_with_reason("close").await {
            Ok(_) | Err(ClusterError::NotFound(_)) => Ok(()),
            Err(ClusterError::Session(e)) if e.kind == ErrorKind::Closed => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Closes the session with `reason` (carried by `session_closed`) and returns its final
    /// history: its newest items, if the whole is over the NATS server's `max_payload`
    /// (docs/cluster.md#limits).
    pub async fn close_with_reason(
        &self,
        reason: impl Into<String>,
    ) -> Result<Vec<ChatItem>, ClusterError> {
        match self.call(Command::Close { reason: reason.into() }).await? {
            Reply::Closed { history } => Ok(history),
            other => Err(unexpected(other, "closed")),
        }
    }

    /// The session's events from its first, in order, each with its index and cursor; the
    /// stream ends after `session_closed`. Lossless: it reads the stream the node stores them in.
    pub async fn subscribe(&self) -> Result<RemoteEvents, ClusterError> {
        self.subscribe_from(EventCursor::START).await
    }

    /// The session's events after the one `after` points at (the cursor of the last event a
    /// subscriber saw, kept across a reconnect or a restart): no gap, no duplicate.
    pub async fn subscribe_from(&self, after: EventCursor) -> Result<RemoteEvents, ClusterError> {
        RemoteEvents::open(&self.inner, Arc::clone(&self.tracked), after).await
    }

    async fn unit(&self, command: Command) -> Result<(), ClusterError> {
        match self.call(command).await? {
            Reply::Ok => Ok(()),
            other => Err(unexpected(other, "ok")),
        }
    }

    /// One command: a request on the session's subject (wherever the session runs, once it
    /// is not moving), its reply, or the error that says what happened (the node lost, the
    /// session gone, no answer in time). A command that changes the conversation carries an
    /// id, so the session runs it once: one that got no answer — its node stalled past the
    /// command's timeout, or was lost with it under way — is sent again, until the resend
    /// bound (docs/cluster.md#commands); so is one nobody listened to, as a node reconnects
    /// or the session moves.
    async fn call(&self, command: Command) -> Result<Reply, ClusterError> {
        let timeout = self.timeout_for(&command);
        let name = command.name();
        let waiting = waits(&command);
        let id = takes_id(&command).then(|| self.command_id());
        let subject = names::command_subject(self.id());
        let body = Request::new(command).encode();
        let limit = payload_limit(&self.inner.backend.client);
        if body.len() > limit {
            let message = format!(
                "the `{name}` request is {} bytes, over the NATS server's max_payload ({} bytes)",
                body.len(),
                limit + HEADROOM
            );
            return Err(ClusterError::Session(ProtocolError::new(ErrorKind::TooLarge, message)));
        }
        // The last moment a send may start: a wait's own bound, which covers a move.
        let bound = match waiting {
            true => timeout,
            false => timeout.max(self.inner.timeouts.resend),
        };
        let until = Instant::now() + bound;
        let timed_out = || ClusterError::Timeout { what: name.to_owned(), after: bound };
        let mut missing_since = None;
        let answer = loop {
            let placement = match tokio::time::timeout_at(until, self.tracked.settled()).await {
                Ok(Some(placement)) => placement,
                Ok(None) => return Err(self.lost()),
                Err(_) => return Err(timed_out()),
            };
            let left =
                until.min(Instant::now() + timeout).saturating_duration_since(Instant::now());
            let losses = self.tracked.losses();
            let sent = tokio::select! {
                biased;
                // Under way at the loss: sent again wherever the session moves.
                () = self.tracked.lost_since(losses) => continue,
                sent = self.inner.command(subject.clone(), body.clone(), left, id.as_deref()) => sent,
            };
            let unanswered = match sent {
                Ok(answer) => break answer,
                Err(NoAnswer::Failed(e)) => return Err(e),
                Err(NoAnswer::NoResponders) => false,
                Err(NoAnswer::TimedOut(_)) => true,
            };
            if let Some(gone) = self.gone(&placement, &mut missing_since).await {
                return Err(gone);
            }
            if Instant::now() + RESEND_PAUSE >= until {
                return Err(timed_out());
            }
            if unanswered {
                tracing::debug!(session = %self.id(), command = name, "no answer: sent again");
            } else if self.tracked.placement() == placement {
                tokio::time::sleep(RESEND_PAUSE).await;
            }
        };
        match Reply::decode(&answer).map_err(ClusterError::Session)? {
            Reply::Error(e) => Err(ClusterError::Session(e)),
            reply => Ok(reply),
        }
    }

    /// The id of a command about to be sent: the host's, or a new one.
    fn command_id(&self) -> String {
        match &self.command {
            Some(id) => id.to_string(),
            None => uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The error of a session lost with its node.
    fn lost(&self) -> ClusterError {
        ClusterError::NodeLost { node: self.tracked.placement().node.clone() }
    }

    fn timeout_for(&self, command: &Command) -> Duration {
        let timeouts = self.inner.timeouts;
        if waits(command) { timeouts.wait } else { timeouts.command }
    }

    /// What the session's record and node say of `placement`, which did not answer:
    /// `NotFound` if the session has ended, `NodeLost` if it was lost with its node; `None`
    /// if it still runs there, moved on (the record names a newer placement, which this
    /// host now follows) or is moving (its node was lost and journaled it).
    async fn gone(
        &self,
        placement: &Arc<Placement>,
        missing_since: &mut Option<Instant>,
    ) -> Option<ClusterError> {
        let tracked = &self.tracked;
        let lost = match self.inner.session_entry(&tracked.id).await {
            Ok(None) => {
                let since = *missing_since.get_or_insert_with(Instant::now);
                let recovering = since.elapsed() < MISSING_GRACE
                    && self.node_holds(placement).await
                    && !self.inner.record_deleted(&tracked.id).await;
                return (!recovering).then(|| ClusterError::NotFound(tracked.id.clone()));
            }
            Ok(Some((record, revision))) if !placement.named_by(&record) => {
                tracked.moved(Placement::of(&record, revision));
                return None;
            }
            // Declared lost: by a host, or by the node that stopped it at its fence while its
            // entry lived on.
            Ok(Some((record, _))) if record.lost => true,
            // Back under another lease: it let its sessions go. An entry not found is left to
            // the watch, which sees its expiry for sure (a read right after a server restart
            // may find nothing yet, and a loss declared wrongly would move a live session).
            Ok(Some(_)) => {
                matches!(self.inner.holder(&placement.node).await, Holder::Live(l) if l != placement.lease)
            }
            Err(_) => false,
        };
        if lost && tracked.lose(placement) {
            moves::found_lost(&self.inner, vec![(Arc::clone(tracked), Arc::clone(placement))]);
        }
        tracked.is_lost().then(|| self.lost())
    }

    /// Whether the node of `placement` is live under that lease.
    async fn node_holds(&self, placement: &Placement) -> bool {
        matches!(self.inner.holder(&placement.node).await, Holder::Live(l) if l == placement.lease)
    }
}

/// Whether `command` changes the conversation, and so carries an id the session runs it once
/// by. The others do no harm run twice: a read, a wait, a state set to a value, a close (a
/// second finds the session closed).
fn takes_id(command: &Command) -> bool {
    matches!(
        command,
        Command::UserTurn { .. }
            | Command::UserInput { .. }
            | Command::GenerateReply { .. }
            | Command::Say { .. }
            | Command::CancelToolCall { .. }
            | Command::Approve { .. }
            | Command::Reject { .. }
    )
}

/// Whether `command` waits for the session, bounded by [`Timeouts::wait`](super::Timeouts::wait).
fn waits(command: &Command) -> bool {
    matches!(command, Command::WaitForIdle | Command::WaitForQuiet | Command::Close { .. })
}

fn unexpected(reply: Reply, wanted: &str) -> ClusterError {
    ClusterError::Session(reply.unexpected(wanted))
}
