//! `colloquy chat --nats URL`: the chat against a session placed on a node of a cluster. The
//! session is a [`RemoteSession`]; its events come from the cluster's event stream, shown as
//! the local chat shows them: the agent's text as it streams when the node publishes it
//! (`x_agent_text`, as `colloquy node` does unless `--no-agent-text`), else a message at a
//! time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy::chat::{ChatItem, Role};
use colloquy::cluster::{Cluster, ClusterError, NatsConfig, RemoteEvents, StartOptions};
use colloquy::events::{EventKind, SessionEvent};
use tokio::sync::watch;

use super::event_lines::{Calls, EventLines};
use super::session::{ChatSession, Speeches};
use super::terminal::{Style, Terminal};
use super::{Opened, clean, show_event};
use crate::ChatArgs;
use crate::command::nats_config;
use crate::served::DEFAULT_AGENT;

/// Where to place the session, from the chat's options.
pub(super) struct Placement {
    nats: NatsConfig,
    url: String,
    lost_after: Option<Duration>,
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
            nats: nats_config(url, &args.nats_auth)?,
            url: url.to_owned(),
            lost_after: args.lost_after,
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
        let mut builder = Cluster::builder(self.nats);
        if let Some(lost_after) = self.lost_after {
            builder = builder.lost_after(lost_after);
        }
        let cluster = builder.connect().await?;
        let session = match &self.node {
            Some(node) => cluster.start_session_on(node, &self.agent, StartOptions::new()).await?,
            None => cluster.start_session(&self.agent, StartOptions::new()).await?,
        };
        let (agent, node) = (clean::line(&self.agent), clean::line(&session.node()));
        terminal.line(
            Style::Dim,
            &format!(
                "colloquy chat with agent {agent} on node {node} ({}): /help for commands, \
                 /quit to leave",
                self.url
            ),
        );
        let events = session.subscribe().await?;
        let (speeches, watched) = watch::channel(Speeches::default());
        let calls = Calls::default();
        let printed = Printed {
            terminal: terminal.clone(),
            seen: Arc::clone(seen),
            lines: EventLines::new(calls.clone()),
            speeches,
        };
        let printer = tokio::spawn(print_remote_events(events, printed));
        Ok(Opened {
            session: ChatSession::remote(session, watched),
            agent: None,
            servers: Vec::new(),
            printer,
            calls,
        })
    }
}

/// Where a remote session's events go.
struct Printed {
    terminal: Terminal,
    /// Every event, for `/timeline`.
    seen: Arc<Mutex<Vec<SessionEvent>>>,
    lines: EventLines,
    /// What the events say of the speeches (and of the session's end).
    speeches: watch::Sender<Speeches>,
}

/// Shows a remote session's events until its stream ends, then marks the session closed.
async fn print_remote_events(mut events: RemoteEvents, printed: Printed) {
    let Printed { terminal, seen, mut lines, speeches } = printed;
    let mut text = AgentText::default();
    while let Some(event) = events.recv().await {
        match event {
            Ok(event) => {
                let event = event.event;
                text.show(&event.kind, &terminal);
                show_event(event, &mut lines, &terminal, &seen, &speeches);
            }
            Err(e) => {
                terminal.line(Style::Error, &format!("error ! {}", clean::line(&e.to_string())));
            }
        }
    }
    speeches.send_modify(Speeches::end);
}

/// The agent's text on the terminal: as it streams once the node has sent a delta, else each
/// message once committed.
#[derive(Default)]
struct AgentText {
    /// The node publishes the text as it streams: committed messages are not shown again.
    streams: bool,
    /// The speech and step whose line is open.
    open: Option<(String, u32)>,
}

impl AgentText {
    fn show(&mut self, event: &EventKind, terminal: &Terminal) {
        match event {
            EventKind::AgentText { speech_id, step, delta } => {
                self.streams = true;
                let first = self.open.as_ref().is_none_or(|(s, n)| s != speech_id || n != step);
                if first && self.open.is_some() {
                    terminal.finish();
                }
                terminal.agent_text(first, delta);
                self.open = Some((speech_id.clone(), *step));
            }
            EventKind::SpeechDone { speech_id, interrupted } => {
                if self.open.as_ref().is_some_and(|(s, _)| s == speech_id) {
                    self.open = None;
                    terminal.end_agent_text(interrupted.then_some("[interrupted]"));
                }
            }
            _ if self.streams => {}
            _ => {
                if let Some((text, interrupted)) = agent_message(event) {
                    terminal.agent_message(&text, interrupted);
                }
            }
        }
    }
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
