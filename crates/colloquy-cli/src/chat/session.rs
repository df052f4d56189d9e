//! The session the chat talks to: one in this process ([`SessionHandle`]) or one on a node of
//! a cluster ([`RemoteSession`]). The chat's loop, its commands and its shutdown call these
//! methods and never ask which; an error comes back as the text the chat shows.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use colloquy::chat::ChatItem;
use colloquy::cluster::{ClusterError, ErrorKind, RemoteSession};
use colloquy::session::{RunningToolCall, SessionHandle, SessionSnapshot};
use tokio::sync::watch;

use super::terminal::{Style, Terminal};

/// The reply in progress: resolves once the session is idle (true) or has closed (false).
pub(crate) type Reply = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A remote session's events reach the chat after its commands' answers: once the session is
/// idle, the reply waits for its events to pause this long, so what the reply said is shown
/// before the next line's answer...
const EVENTS_PAUSE: Duration = Duration::from_millis(100);
/// ...but never longer than this (background calls may go on talking).
const EVENTS_CATCH_UP: Duration = Duration::from_secs(2);

/// A session in this process or on a node; cheap to clone.
#[derive(Clone)]
pub(crate) enum ChatSession {
    /// Started by the chat in this process.
    Local(SessionHandle),
    /// Placed on a node.
    Remote {
        /// The session.
        session: RemoteSession,
        /// Set by the chat's event printer on `session_closed`.
        closed: watch::Receiver<bool>,
        /// How many events the printer has shown.
        shown: watch::Receiver<u64>,
    },
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
    /// Whether the session still runs, as far as the chat knows.
    pub(crate) fn is_running(&self) -> bool {
        match self {
            ChatSession::Local(session) => session.is_running(),
            ChatSession::Remote { closed, .. } => !*closed.borrow(),
        }
    }

    /// Resolves once the session has closed without the chat asking: a remote one that its
    /// node's drain closed. (A local session closes only through the chat.)
    pub(crate) async fn ended(&self) {
        match self {
            ChatSession::Local(_) => std::future::pending().await,
            ChatSession::Remote { closed, .. } => {
                let _ = closed.clone().wait_for(|closed| *closed).await;
            }
        }
    }

    /// The user said `text`.
    pub(crate) async fn user_turn(&self, text: String) -> Result<(), TurnRefused> {
        match self {
            ChatSession::Local(session) => {
                session.user_turn(text).await.map_err(|_| TurnRefused::Closed)
            }
            ChatSession::Remote { session, .. } => match session.user_turn(text).await {
                Ok(()) => Ok(()),
                Err(e) if is_gone(&e) => Err(TurnRefused::Closed),
                Err(e @ ClusterError::NodeLost { .. }) => Err(TurnRefused::Lost(e.to_string())),
                Err(e) => Err(TurnRefused::Failed(e.to_string())),
            },
        }
    }

    /// The reply to the turn just taken, as a future of its own. A remote session that can no
    /// longer be reached (its node lost, no answer within the bound) says why on `terminal`
    /// and counts as closed.
    pub(crate) fn reply(&self, terminal: &Terminal) -> Reply {
        match self.clone() {
            ChatSession::Local(session) => {
                Box::pin(async move { session.wait_for_idle().await.is_ok() })
            }
            ChatSession::Remote { session, shown, .. } => {
                let terminal = terminal.clone();
                Box::pin(async move {
                    match session.wait_for_idle().await {
                        Ok(()) => {
                            let caught_up = events_paused(shown);
                            let _ = tokio::time::timeout(EVENTS_CATCH_UP, caught_up).await;
                            true
                        }
                        Err(e) if is_gone(&e) => false,
                        Err(e) => {
                            terminal.line(Style::Error, &format!("error ! {e}"));
                            false
                        }
                    }
                })
            }
        }
    }

    /// Stops the current speech.
    pub(crate) async fn interrupt(&self) {
        match self {
            ChatSession::Local(session) => drop(session.interrupt().await),
            ChatSession::Remote { session, .. } => drop(session.interrupt().await),
        }
    }

    pub(crate) async fn cancel_tool_call(&self, id: String) -> Result<(), String> {
        match self {
            ChatSession::Local(s) => s.cancel_tool_call(id).await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.cancel_tool_call(id).await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn approve(&self, id: String) -> Result<(), String> {
        match self {
            ChatSession::Local(s) => s.approve(id).await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.approve(id).await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn reject(&self, id: String, reason: String) -> Result<(), String> {
        match self {
            ChatSession::Local(s) => s.reject(id, reason).await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.reject(id, reason).await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn running_tool_calls(&self) -> Result<Vec<RunningToolCall>, String> {
        match self {
            ChatSession::Local(s) => s.running_tool_calls().await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.running_tool_calls().await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn inspect(&self) -> Result<SessionSnapshot, String> {
        match self {
            ChatSession::Local(s) => s.inspect().await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.inspect().await.map_err(|e| e.to_string())
            }
        }
    }

    pub(crate) async fn history(&self) -> Result<Vec<ChatItem>, String> {
        match self {
            ChatSession::Local(s) => s.history().await.map_err(|e| e.to_string()),
            ChatSession::Remote { session, .. } => {
                session.history().await.map_err(|e| e.to_string())
            }
        }
    }

    /// Closes the session; closing one that is gone is a no-op.
    pub(crate) async fn close(&self) {
        match self {
            ChatSession::Local(s) => drop(s.close().await),
            ChatSession::Remote { session, .. } => drop(session.close().await),
        }
    }
}

/// Returns once no event has been shown for [`EVENTS_PAUSE`] (or the printer is gone).
async fn events_paused(mut shown: watch::Receiver<u64>) {
    loop {
        match tokio::time::timeout(EVENTS_PAUSE, shown.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

/// The session has closed, or its node has forgotten it.
fn is_gone(e: &ClusterError) -> bool {
    match e {
        ClusterError::NotFound(_) => true,
        ClusterError::Session(e) => e.kind == ErrorKind::Closed,
        _ => false,
    }
}
