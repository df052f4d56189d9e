//! `colloquy chat --nats URL`: the chat against a session placed on a node of a cluster. The
//! session is a [`RemoteSession`]; its events come from the cluster's event stream, shown as
//! the local chat shows them, the agent's text a message at a time (the stream carries the
//! committed messages, not the text as it streams).

use std::sync::{Arc, Mutex};

use colloquy::chat::{ChatItem, Role};
use colloquy::cluster::{Cluster, ClusterError, RemoteEvents, StartOptions};
use colloquy::events::{EventKind, SessionEvent};
use tokio::sync::watch;

use super::session::ChatSession;
use super::terminal::{EventLines, Style, Terminal};
use super::{Opened, clean, show_event};
use crate::ChatArgs;
use crate::cluster::{DEFAULT_AGENT, Nats};

/// Where to place the session, from the chat's options.
pub(super) struct Placement {
    nats: Nats,
    node: Option<String>,
    agent: String,
}

impl Placement {
    /// The placement `--nats` and its options ask for, or why they cannot be used together
    /// (a usage error).
    pub(super) fn from_args(args: &ChatArgs, url: &str) -> Result<Self, String> {
        let local = &args.agent;
        if local.model.is_some()
            || local.base_url.is_some()
            || local.temperature.is_some()
            || local.instructions.is_some()
            || !local.mcp.is_empty()
            || !local.require_approval.is_empty()
        {
            return Err("with --nats the node's options choose the model, the instructions and \
                        the tools: pass them to `colloquy node`"
                .into());
        }
        Ok(Self {
            nats: Nats::from_args(url, args.token_env.as_deref())?,
            node: args.node.clone(),
            agent: args.agent_name.clone().unwrap_or_else(|| DEFAULT_AGENT.to_owned()),
        })
    }

    /// Connects, places the session (on the least loaded node, or the one asked for), says
    /// where it runs and starts showing its events.
    pub(super) async fn open(
        self,
        terminal: &Terminal,
        seen: &Arc<Mutex<Vec<SessionEvent>>>,
    ) -> Result<Opened, ClusterError> {
        let mut builder = Cluster::builder(self.nats.url.as_str());
        if let Some(token) = self.nats.token {
            builder = builder.token(token);
        }
        let cluster = builder.connect().await?;
        let session = match &self.node {
            Some(node) => cluster.start_session_on(node, &self.agent, StartOptions::new()).await?,
            None => cluster.start_session(&self.agent, StartOptions::new()).await?,
        };
        let (agent, node) = (clean::line(&self.agent), clean::line(session.node()));
        terminal.line(
            Style::Dim,
            &format!(
                "colloquy chat with agent {agent} on node {node} ({}): /help for commands, \
                 /quit to leave",
                self.nats.url
            ),
        );
        let events = session.subscribe().await?;
        let (closing, closed) = watch::channel(false);
        let (count, shown) = watch::channel(0);
        let printer = tokio::spawn(print_remote_events(
            events,
            Printed { terminal: terminal.clone(), seen: Arc::clone(seen), closed: closing, count },
        ));
        Ok(Opened {
            session: ChatSession::Remote { session, closed, shown },
            agent: None,
            servers: Vec::new(),
            printer,
        })
    }
}

/// Where a remote session's events go.
struct Printed {
    terminal: Terminal,
    /// Every event, for `/timeline`.
    seen: Arc<Mutex<Vec<SessionEvent>>>,
    /// Set once the session has closed.
    closed: watch::Sender<bool>,
    /// Counts the events shown.
    count: watch::Sender<u64>,
}

/// Shows a remote session's events until it closes (or its stream ends), then marks it closed.
async fn print_remote_events(mut events: RemoteEvents, printed: Printed) {
    let Printed { terminal, seen, closed, count } = printed;
    let mut lines = EventLines::default();
    while let Some(event) = events.recv().await {
        match event {
            Ok(event) => {
                let event = event.event;
                if let Some((text, interrupted)) = agent_message(&event.kind) {
                    terminal.agent_message(&text, interrupted);
                }
                let closing = matches!(event.kind, EventKind::SessionClosed { .. });
                show_event(event, &mut lines, &terminal, &seen);
                if closing {
                    closed.send_replace(true);
                }
                count.send_modify(|n| *n += 1);
            }
            Err(e) => {
                terminal.line(Style::Error, &format!("error ! {}", clean::line(&e.to_string())));
            }
        }
    }
    closed.send_replace(true);
}

/// The agent's text an event commits, and whether it was cut short.
fn agent_message(event: &EventKind) -> Option<(String, bool)> {
    let EventKind::ConversationItemAdded { item } = event else { return None };
    match &**item {
        ChatItem::Message(m) if m.role == Role::Assistant && !m.text.is_empty() => {
            Some((m.text.clone(), m.interrupted))
        }
        _ => None,
    }
}
