//! Connecting to NATS and opening what the cluster keeps there (the nodes and sessions buckets,
//! the events stream), created on first use with the same settings by whichever side comes
//! first.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event};
use tokio::sync::watch;

use crate::error::ClusterError;
use crate::names;

/// How long connecting may take before it fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the client pings the server: a silent link is noticed within two of these.
const PING_INTERVAL: Duration = Duration::from_secs(2);
/// The bound on each JetStream call (a key-value write, a publish's acknowledgement).
const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach NATS: a server URL and, if the server asks for one, a token.
#[derive(Clone, Debug)]
pub(crate) struct Server {
    pub(crate) url: String,
    pub(crate) token: Option<String>,
}

impl Server {
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), token: None }
    }

    /// The URL without any credentials in it, for messages.
    pub(crate) fn shown(&self) -> String {
        match self.url.split_once("://") {
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://***@{host}"),
                None => self.url.clone(),
            },
            None => self.url.clone(),
        }
    }

    /// Connects as `name` (shown in the server's connection list). The client reconnects by
    /// itself for as long as the process lives; `reconnects` counts its connections.
    pub(crate) async fn connect(
        &self,
        name: &str,
        reconnects: watch::Sender<u64>,
    ) -> Result<Client, ClusterError> {
        let client_name = name.to_owned();
        let mut options = ConnectOptions::new()
            .name(name)
            .connection_timeout(CONNECT_TIMEOUT)
            .ping_interval(PING_INTERVAL)
            .event_callback(move |event| {
                match &event {
                    Event::Connected => {
                        reconnects.send_modify(|n| *n += 1);
                        tracing::debug!(client = %client_name, "connected to NATS");
                    }
                    Event::Disconnected => {
                        tracing::warn!(client = %client_name, "disconnected from NATS; reconnecting");
                    }
                    Event::SlowConsumer(_) | Event::ServerError(_) | Event::LameDuckMode => {
                        tracing::warn!(client = %client_name, %event, "NATS");
                    }
                    _ => {}
                }
                std::future::ready(())
            });
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        options.connect(self.url.as_str()).await.map_err(|e| match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                ClusterError::Auth { url: self.shown(), reason: e.to_string() }
            }
            _ => ClusterError::Connect { url: self.shown(), reason: e.to_string() },
        })
    }
}

/// What the cluster keeps on NATS, opened.
#[derive(Clone)]
pub(crate) struct Backend {
    pub(crate) client: Client,
    /// Counts the client's connections: a change is a reconnect, after which a reader remakes
    /// its consumers rather than wait for the library to notice they are gone.
    pub(crate) connections: watch::Receiver<u64>,
    pub(crate) js: jetstream::Context,
    pub(crate) nodes: kv::Store,
    pub(crate) sessions: kv::Store,
    pub(crate) events: stream::Stream,
    /// The nodes bucket's `max_age`: how long a silent node stays in it, whatever this side
    /// asked for (docs/cluster.md#failure).
    pub(crate) lost_after: Duration,
}

impl Backend {
    /// Connects and opens (or creates) the buckets and the stream; a nodes bucket created here
    /// keeps a silent node `lost_after`.
    pub(crate) async fn open(
        server: &Server,
        name: &str,
        lost_after: Duration,
    ) -> Result<Self, ClusterError> {
        if lost_after < names::MIN_LOST_AFTER {
            return Err(ClusterError::Config(format!(
                "lost_after is {lost_after:?}: it must be at least {:?}",
                names::MIN_LOST_AFTER
            )));
        }
        let (reconnects, connections) = watch::channel(0);
        let client = server.connect(name, reconnects).await?;
        let js = jetstream::ContextBuilder::new().timeout(JETSTREAM_TIMEOUT).build(client.clone());
        let nodes = bucket(
            &js,
            kv::Config {
                bucket: names::NODES_BUCKET.into(),
                description: "colloquy nodes: one entry per live node, refreshed every second"
                    .into(),
                history: 1,
                max_age: lost_after,
                limit_markers: Some(names::NODE_MARKER_TTL),
                ..Default::default()
            },
        )
        .await?;
        let sessions = bucket(
            &js,
            kv::Config {
                bucket: names::SESSIONS_BUCKET.into(),
                description: "colloquy sessions: which node holds each live session".into(),
                history: 1,
                ..Default::default()
            },
        )
        .await?;
        let bucket_age = nodes.status().await.map_err(ClusterError::nats)?.max_age();
        if bucket_age.is_zero() {
            return Err(ClusterError::Setup {
                what: format!("key-value bucket {}", names::NODES_BUCKET),
                reason: "it has no max_age, so a node that dies would never leave it: \
                         recreate it with one (docs/cluster.md#failure)"
                    .into(),
            });
        }
        if bucket_age != lost_after {
            tracing::warn!(
                client = name,
                asked = ?lost_after,
                bucket = ?bucket_age,
                "the nodes bucket keeps silent nodes for its own max_age, not lost_after"
            );
        }
        let events = events_stream(&js).await?;
        Ok(Self { client, connections, js, nodes, sessions, events, lost_after: bucket_age })
    }
}

/// The bucket, created if it does not exist yet.
async fn bucket(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store, ClusterError> {
    let name = config.bucket.clone();
    if let Ok(store) = js.get_key_value(&name).await {
        return Ok(store);
    }
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another process created it in between.
        Err(create) => js.get_key_value(&name).await.map_err(|_| ClusterError::Setup {
            what: format!("key-value bucket {name}"),
            reason: create.to_string(),
        }),
    }
}

/// The events stream, created if it does not exist yet.
async fn events_stream(js: &jetstream::Context) -> Result<stream::Stream, ClusterError> {
    js.get_or_create_stream(stream::Config {
        name: names::EVENTS_STREAM.into(),
        description: Some("colloquy session events, one subject per session".into()),
        subjects: vec![names::EVENTS_SUBJECTS.into()],
        max_age: names::EVENTS_MAX_AGE,
        max_messages_per_subject: names::EVENTS_PER_SESSION,
        max_bytes: names::EVENTS_MAX_BYTES,
        discard: stream::DiscardPolicy::Old,
        storage: stream::StorageType::File,
        duplicate_window: names::EVENTS_DUPLICATE_WINDOW,
        ..Default::default()
    })
    .await
    .map_err(|e| {
        let mut reason = e.to_string();
        if reason.contains("insufficient storage") {
            // The server reserves the stream's byte limit against its own.
            reason.push_str(
                "; the stream reserves 1 GiB: give JetStream more (max_file_store) or create \
                 the stream beforehand with smaller limits (docs/cluster.md#subjects)",
            );
        }
        ClusterError::Setup { what: format!("stream {}", names::EVENTS_STREAM), reason }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_hides_its_credentials() {
        assert_eq!(Server::new("nats://s3cret@10.0.0.5:4222").shown(), "nats://***@10.0.0.5:4222");
        assert_eq!(Server::new("nats://u:p@h:1").shown(), "nats://***@h:1");
        assert_eq!(Server::new("nats://127.0.0.1:4222").shown(), "nats://127.0.0.1:4222");
        assert_eq!(Server::new("127.0.0.1:4222").shown(), "127.0.0.1:4222");
    }
}
