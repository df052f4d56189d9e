//! The session the chat talks to: one in this process ([`SessionHandle`]) or one on a node of
//! a cluster ([`RemoteSession`]). The chat's loop, its commands and its shutdown call these
//! methods and never ask which; an error comes back as the text the chat shows.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;

use colloquy::chat::ChatItem;
use colloquy::cluster::{ClusterError, ErrorKind, RemoteSession};
use colloquy::events::{AgentState, EventKind, SpeechSource};
use colloquy::session::{RunningToolCall, SessionHandle, SessionSnapshot};
use colloquy::toolsets::END_CALL;
use tokio::sync::watch;

use super::terminal::{Style, Terminal};

/// The reply in progress: resolves once its speech is done (true) or the session has closed
/// (false).
pub(crate) type Reply = Pin<Box<dyn Future<Output = bool> + Send>>;

/// What the chat knows of the session's speeches, from the events its printer shows: a
/// reply is over once the speech answering its line is done, whatever deferred replies
/// follow (background tools go on, and so does the conversation, as it would by voice).
#[derive(Debug, Default)]
pub(crate) struct Speeches {
    /// Speeches that answer a user line, created so far.
    turns: u64,
    /// The user-turn ordinal of each live speech that answers a user line.
    live_turns: std::collections::BTreeMap<String, u64>,
    /// Those that are done.
    done_turns: BTreeSet<u64>,
    /// Speeches created and not yet done (any source).
    live: BTreeSet<String>,
    /// The agent called end_call: the session closes after its reply.
    ending: bool,
    /// The session has closed, or its events ended.
    ended: bool,
    /// Events seen: the session shows progress.
    events: u64,
    /// The agent's last state was `thinking`: a model reading its prompt, or a blocking tool.
    thinking: bool,
}

impl Speeches {
    /// Notes what `event` changes.
    pub(crate) fn note(&mut self, event: &EventKind) {
        self.events += 1;
        match event {
            EventKind::SpeechCreated { speech_id, source } => {
                self.live.insert(speech_id.clone());
                if *source == SpeechSource::UserTurn {
                    self.turns += 1;
                    self.live_turns.insert(speech_id.clone(), self.turns);
                }
            }
            EventKind::SpeechDone { speech_id, .. } => {
                self.live.remove(speech_id);
                if let Some(turn) = self.live_turns.remove(speech_id) {
                    self.done_turns.insert(turn);
                }
            }
            EventKind::ToolCallStarted { name, .. } if name == END_CALL => self.ending = true,
            EventKind::SessionClosed { .. } => self.ended = true,
            EventKind::AgentState { state } => self.thinking = *state == AgentState::Thinking,
            _ => {}
        }
    }

    /// The printer stopped: no more events will come.
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    /// Whether the agent is speaking (or has a speech queued).
    pub(crate) fn speaking(&self) -> bool {
        !self.live.is_empty()
    }

    /// Whether the agent is thinking: its model has not answered yet (or a blocking tool runs).
    pub(crate) fn thinking(&self) -> bool {
        self.thinking
    }
}

/// A session in this process or on a node, and what the chat's printer saw of its speeches;
/// cheap to clone.
#[derive(Clone)]
pub(crate) struct ChatSession {
    target: Target,
    speeches: watch::Receiver<Speeches>,
    /// Kept in a store: leaving suspends it (it resumes later) instead of closing it.
    kept: bool,
}

#[derive(Clone)]
enum Target {
    /// Started by the chat in this process.
    Local(SessionHandle),
    /// Placed on a node.
    Remote(RemoteSession),
}

/// Why a user turn was not taken.
pub(crate) enum TurnRefused {
    /// The session has closed (the agent ended the call): the chat leaves.
    Closed,
    /// The node that held it is gone: the chat says so and leaves.
    Lost(String),
    /// Anything else (no answer in time): the chat says so and goes on.
    Failed(String),
}

impl ChatSession {
    /// A session in this process; `speeches` as its printer sees them.
    pub(crate) fn local(
        session: SessionHandle,
        speeches: watch::Receiver<Speeches>,
        kept: bool,
    ) -> Self {
        Self { target: Target::Local(session), speeches, kept }
    }

    /// A session on a node; `speeches` as its printer sees them.
    pub(crate) fn remote(session: RemoteSession, speeches: watch::Receiver<Speeches>) -> Self {
        Self { target: Target::Remote(session), speeches, kept: false }
    }

    /// The session's id.
    pub(crate) fn id(&self) -> &str {
        match &self.target {
            Target::Local(session) => session.id(),
            Target::Remote(session) => session.id(),
        }
    }

    /// Whether the session still runs, as far as the chat knows.
    pub(crate) fn is_running(&self) -> bool {
        match &self.target {
            Target::Local(session) => session.is_running() && !self.speeches.borrow().ended,
            Target::Remote(_) => !self.speeches.borrow().ended,
        }
    }

    /// Why the session is gone without closing: a remote one whose node this host found lost.
    pub(crate) fn lost(&self) -> Option<ClusterError> {
        match &self.target {
            Target::Remote(session) if session.is_node_lost() => {
                Some(ClusterError::NodeLost { node: session.node() })
            }
            _ => None,
        }
    }

    /// Whether the agent is speaking (or has a speech queued).
    pub(crate) fn speaking(&self) -> bool {
        self.speeches.borrow().speaking()
    }

    /// How long the reply in progress may show nothing before a script that has ended stops
    /// waiting for it: longer while the agent thinks (a slow model reading a long prompt
    /// shows nothing for seconds), [`SCRIPT_QUIT_WAIT`](super::SCRIPT_QUIT_WAIT) otherwise.
    pub(crate) fn quiet_bound(&self) -> std::time::Duration {
        match self.speeches.borrow().thinking() {
            true => super::SCRIPT_THINKING_WAIT,
            false => super::SCRIPT_QUIT_WAIT,
        }
    }

    /// Changes with every event the chat shows from now on.
    pub(crate) fn progress(&self) -> watch::Receiver<Speeches> {
        let mut progress = self.speeches.clone();
        progress.borrow_and_update();
        progress
    }

    /// Resolves once the session has closed without the chat asking: a remote one that its
    /// node's drain closed. (A local session closes only through the chat, or end_call, which
    /// the reply sees.)
    pub(crate) async fn ended(&self) {
        match self.target {
            Target::Local(_) => std::future::pending().await,
            Target::Remote(_) => {
                let _ = self.speeches.clone().wait_for(|s| s.ended).await;
            }
        }
    }

    /// The user said `text`: at once, interrupting the agent as speech would, or `queued`
    /// behind the speech in progress (a script's next line). The reply to it, as a future of
    /// its own. A remote session whose node is lost says why on `terminal` and counts as
    /// closed.
    pub(crate) async fn user_turn(
        &self,
        text: String,
        queued: bool,
        terminal: &Terminal,
    ) -> Result<Reply, TurnRefused> {
        // The user's lines are answered one speech each, in order: the next one is this line's.
        let turn = self.speeches.borrow().turns + 1;
        match &self.target {
            Target::Local(session) => {
                let sent = match queued {
                    true => session.user_input(text).await,
                    false => session.user_turn(text).await,
                };
                sent.map_err(|_| TurnRefused::Closed)?;
            }
            Target::Remote(session) => {
                let sent = match queued {
                    true => session.user_input(text).await,
                    false => session.user_turn(text).await,
                };
                match sent {
                    Ok(()) => {}
                    Err(e) if is_gone(&e) => return Err(TurnRefused::Closed),
                    Err(e @ ClusterError::NodeLost { .. }) => {
                        return Err(TurnRefused::Lost(e.to_string()));
                    }
                    Err(e) => return Err(TurnRefused::Failed(e.to_string())),
                }
            }
        }
        let spoken = spoken(self.speeches.clone(), turn);
        Ok(match &self.target {
            Target::Local(_) => Box::pin(spoken),
            Target::Remote(session) => {
                let (session, terminal) = (session.clone(), terminal.clone());
                let node = session.node();
                Box::pin(async move {
                    let lost = async {
                        match session.wait_for_idle().await {
                            // Moved to another node: the events say so, and the new node
                            // answers the next line (the reply under way was cut off).
                            Ok(()) if session.node() != node => true,
                            Err(ClusterError::NodeLost { .. }) if !session.is_node_lost() => true,
                            Err(e @ ClusterError::NodeLost { .. }) => {
                                terminal.line(Style::Error, &format!("error ! {e}"));
                                false
                            }
                            // Idle, or no answer in time: the events say when the reply is over.
                            _ => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        spoken = spoken => spoken,
                        running = lost => running,
                    }
                })
            }
        })
    }

    /// Stops the current speech.
    pub(crate) async fn interrupt(&self) {
        match &self.target {
            Target::Local(session) => drop(session.interrupt().await),
            Target::Remote(session) => drop(session.interrupt().await),
        }
    }

    pub(crate) async fn cancel_tool_call(&self, id: String) -> Result<(), String> {
        match &self.target {
            Target::Local(s) => s.cancel_tool_call(id).await.map_err(|e| e.to_string()),
            Target::Remote(session) => {
                session.cancel_tool_call(id).await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn approve(&self, id: String) -> Result<(), String> {
        match &self.target {
            Target::Local(s) => s.approve(id).await.map_err(|e| e.to_string()),
            Target::Remote(session) => session.approve(id).await.map_err(|e| e.to_string()),
        }
    }

    pub(crate) async fn reject(&self, id: String, reason: String) -> Result<(), String> {
        match &self.target {
            Target::Local(s) => s.reject(id, reason).await.map_err(|e| e.to_string()),
            Target::Remote(session) => session.reject(id, reason).await.map_err(|e| e.to_string()),
        }
    }

    pub(crate) async fn running_tool_calls(&self) -> Result<Vec<RunningToolCall>, String> {
        match &self.target {
            Target::Local(s) => s.running_tool_calls().await.map_err(|e| e.to_string()),
            Target::Remote(session) => {
                session.running_tool_calls().await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn inspect(&self) -> Result<SessionSnapshot, String> {
        match &self.target {
            Target::Local(s) => s.inspect().await.map_err(|e| e.to_string()),
            Target::Remote(session) => session.inspect().await.map_err(|e| e.to_string()),
        }
    }

    pub(crate) async fn history(&self) -> Result<Vec<ChatItem>, String> {
        match &self.target {
            Target::Local(s) => s.history().await.map_err(|e| e.to_string()),
            Target::Remote(session) => session.history().await.map_err(|e| e.to_string()),
        }
    }

    /// Closes the session; closing one that is gone is a no-op.
    pub(crate) async fn close(&self) {
        match &self.target {
            Target::Local(s) if self.kept => drop(s.suspend().await),
            Target::Local(s) => drop(s.close().await),
            Target::Remote(session) => drop(session.close().await),
        }
    }
}

/// Resolves once the `turn`-th speech answering a user line is done (true), whatever speeches
/// follow it, or the session has closed (false).
async fn spoken(mut speeches: watch::Receiver<Speeches>, turn: u64) -> bool {
    // After end_call the session closes once the reply is spoken: wait for that.
    let over = |s: &Speeches| s.ended || (s.done_turns.contains(&turn) && !s.ending);
    let _ = speeches.wait_for(over).await;
    !speeches.borrow().ended
}

/// The session has closed, or its node has forgotten it.
fn is_gone(e: &ClusterError) -> bool {
    match e {
        ClusterError::NotFound(_) => true,
        ClusterError::Session(e) => e.kind == ErrorKind::Closed,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(id: &str, source: SpeechSource) -> EventKind {
        EventKind::SpeechCreated { speech_id: id.into(), source }
    }

    fn done(id: &str) -> EventKind {
        EventKind::SpeechDone { speech_id: id.into(), interrupted: false }
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_is_over_once_its_speech_is_done_while_deferred_replies_go_on() {
        let (tx, rx) = watch::channel(Speeches::default());
        let reply = tokio::spawn(spoken(rx.clone(), 1));
        // A deferred reply starts before the line's speech ends, and another after it: the
        // session is never idle, the reply is over all the same.
        for event in [
            created("s1", SpeechSource::UserTurn),
            created("s2", SpeechSource::DeferredReply),
            done("s1"),
            created("s3", SpeechSource::DeferredReply),
        ] {
            tx.send_modify(|s| s.note(&event));
        }
        assert!(reply.await.unwrap(), "the session is still open");
        assert!(rx.borrow().speaking(), "the deferred replies still speak");
        // The next line's reply waits for its own speech, an errored one included.
        let next = tokio::spawn(spoken(rx.clone(), 2));
        tx.send_modify(|s| s.note(&created("s4", SpeechSource::UserTurn)));
        tokio::task::yield_now().await;
        assert!(!next.is_finished());
        let error = EventKind::Error {
            source: colloquy::events::ErrorSource::Llm,
            message: "HTTP 400".into(),
            llm_error: None,
        };
        tx.send_modify(|s| s.note(&error));
        tx.send_modify(|s| s.note(&done("s4")));
        assert!(next.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn after_end_call_the_reply_waits_for_the_close() {
        let (tx, rx) = watch::channel(Speeches::default());
        let reply = tokio::spawn(spoken(rx, 1));
        tx.send_modify(|s| s.note(&created("s1", SpeechSource::UserTurn)));
        let end_call = EventKind::ToolCallStarted { call_id: "c".into(), name: END_CALL.into() };
        tx.send_modify(|s| s.note(&end_call));
        tx.send_modify(|s| s.note(&done("s1")));
        tokio::task::yield_now().await;
        assert!(!reply.is_finished());
        tx.send_modify(|s| s.note(&EventKind::SessionClosed { reason: "end_call".into() }));
        assert!(!reply.await.unwrap(), "the session closed");
    }
}
