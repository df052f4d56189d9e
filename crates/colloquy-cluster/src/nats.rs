//! Connecting to NATS and opening what the cluster keeps there (the nodes and sessions buckets,
//! the events stream), created on first use with the same settings by whichever side comes
//! first.

use std::fmt;
use std::path::PathBuf;
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
/// The pause between attempts to reconnect while a server is away, for about the first five
/// seconds of an outage: a restarted server is found again within this of its return, well
/// inside a node's fence (the client's own back-off waits 1 s and more after one second).
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// The attempts made [`RECONNECT_PAUSE`] apart before the pause grows to [`RECONNECT_PAUSE_LONG`].
const QUICK_RECONNECTS: usize = 50;
/// The pause between attempts to reconnect once an outage has lasted seconds.
const RECONNECT_PAUSE_LONG: Duration = Duration::from_secs(1);

/// The pause before reconnect attempt `attempts` (1 for the first after a disconnection):
/// none, then [`RECONNECT_PAUSE`], then [`RECONNECT_PAUSE_LONG`] (docs/cluster.md#failure).
fn reconnect_delay(attempts: usize) -> Duration {
    match attempts {
        0 | 1 => Duration::ZERO,
        n if n <= QUICK_RECONNECTS => RECONNECT_PAUSE,
        _ => RECONNECT_PAUSE_LONG,
    }
}

/// Room left under the server's `max_payload` for a message's headers (an event's id, a reply
/// subject).
pub(crate) const HEADROOM: usize = 1024;

/// The most bytes a message body may have on this connection: anything bigger is refused by
/// the server, so it is never sent (docs/cluster.md#limits).
pub(crate) fn payload_limit(client: &Client) -> usize {
    client.server_info().max_payload.saturating_sub(HEADROOM)
}

/// Publishes `message` to the stream that takes `subject` and waits for its acknowledgement:
/// `Ok` once the stream has stored it (the context's timeout bounds the wait).
pub(crate) async fn store(
    js: &jetstream::Context,
    subject: String,
    message: jetstream::message::PublishMessage,
) -> Result<(), jetstream::context::PublishError> {
    store_at(js, subject, message).await.map(drop)
}

/// As [`store`], with the stream's sequence the message got.
pub(crate) async fn store_at(
    js: &jetstream::Context,
    subject: String,
    message: jetstream::message::PublishMessage,
) -> Result<u64, jetstream::context::PublishError> {
    Ok(js.send_publish(subject, message).await?.await?.sequence)
}

/// How to reach NATS: the server's URL, the credentials it asks for, and TLS. A `&str` or a
/// `String` converts into one (no credentials, TLS as the URL's scheme says). Secrets never
/// show: not in `Debug`, not in errors (the URL is shown without its credentials).
///
/// ```
/// use colloquy_cluster::NatsConfig;
///
/// let nats = NatsConfig::new("tls://nats.internal:4222")
///     .user_password("node", std::env::var("NATS_PASSWORD").unwrap_or_default())
///     .tls_root_certificates("/etc/colloquy/nats-ca.pem");
/// assert!(!format!("{nats:?}").contains("NATS_PASSWORD"));
/// ```
#[derive(Clone)]
pub struct NatsConfig {
    pub(crate) url: String,
    auth: Auth,
    tls: Tls,
}

#[derive(Clone, Default)]
enum Auth {
    #[default]
    None,
    Token(String),
    UserPassword(String, String),
    /// A NATS credentials file (a user JWT and its nkey seed), read at each connect.
    CredsFile(PathBuf),
}

#[derive(Clone, Default)]
struct Tls {
    required: bool,
    roots: Vec<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
}

impl NatsConfig {
    /// The server at `url` (`nats://host:4222`, or `tls://…` to require TLS).
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), auth: Auth::None, tls: Tls::default() }
    }

    /// The token the server asks for (`nats-server --auth`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.auth = Auth::Token(token.into());
        self
    }

    /// The user and password the server asks for (`nats-server --user --pass`, or an
    /// `authorization { users … }` block).
    pub fn user_password(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Auth::UserPassword(user.into(), password.into());
        self
    }

    /// The credentials file the server's operator issued (`nsc generate creds`: a user JWT and
    /// the nkey seed that signs the server's challenge), for a server in operator mode. The file
    /// is read when connecting; its contents never show, not even in errors.
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.auth = Auth::CredsFile(path.into());
        self
    }

    /// Requires TLS, trusting the certificate authorities in this PEM file besides the
    /// system's (a server with a private CA). May be called for several files.
    pub fn tls_root_certificates(mut self, pem: impl Into<PathBuf>) -> Self {
        self.tls.roots.push(pem.into());
        self.tls.required = true;
        self
    }

    /// Requires TLS and presents this client certificate and key (PEM files), for a server
    /// that verifies its clients (`tls { verify: true }`).
    pub fn tls_client_certificate(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self.tls.required = true;
        self
    }

    /// Requires TLS (without it a `nats://` URL uses TLS only if the server asks for it).
    pub fn require_tls(mut self, required: bool) -> Self {
        self.tls.required = required;
        self
    }

    /// `next`, keeping this one's credentials if `next` has none (a builder's `token` and
    /// `nats` calls work in either order).
    pub(crate) fn replaced_by(self, mut next: Self) -> Self {
        if matches!(next.auth, Auth::None) {
            next.auth = self.auth;
        }
        next
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

    async fn apply(&self, mut options: ConnectOptions) -> Result<ConnectOptions, ClusterError> {
        options = match &self.auth {
            Auth::None => options,
            Auth::Token(token) => options.token(token.clone()),
            Auth::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            // The library's messages name the file and what is missing, never its contents.
            Auth::CredsFile(path) => options.credentials_file(path).await.map_err(|e| {
                ClusterError::Config(format!("the NATS credentials file {}: {e}", path.display()))
            })?,
        };
        for root in &self.tls.roots {
            options = options.add_root_certificates(root.clone());
        }
        if let Some((cert, key)) = &self.tls.client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options.require_tls(self.tls.required))
    }
}

impl From<&str> for NatsConfig {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl From<String> for NatsConfig {
    fn from(url: String) -> Self {
        Self::new(url)
    }
}

impl fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match self.auth {
            Auth::None => "none",
            Auth::Token(_) => "token",
            Auth::UserPassword(..) => "user and password",
            Auth::CredsFile(_) => "credentials file",
        };
        f.debug_struct("NatsConfig")
            .field("url", &self.shown())
            .field("auth", &auth)
            .field("tls_required", &self.tls.required)
            .field("tls_roots", &self.tls.roots)
            .field("tls_client_certificate", &self.tls.client.as_ref().map(|(cert, _)| cert))
            .finish()
    }
}

impl NatsConfig {
    /// Connects as `name` (shown in the server's connection list). The client reconnects by
    /// itself for as long as the process lives; `reconnects` counts its connections.
    pub(crate) async fn connect(
        &self,
        name: &str,
        reconnects: watch::Sender<u64>,
    ) -> Result<Client, ClusterError> {
        let client_name = name.to_owned();
        let options = ConnectOptions::new()
            .name(name)
            .connection_timeout(CONNECT_TIMEOUT)
            .ping_interval(PING_INTERVAL)
            .reconnect_delay_callback(reconnect_delay)
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
        let options = self.apply(options).await?;
        options.connect(self.url.as_str()).await.map_err(|e| match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                ClusterError::Auth { url: self.shown(), reason: e.to_string() }
            }
            ConnectErrorKind::Tls => ClusterError::Tls { url: self.shown(), reason: e.to_string() },
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
    /// Session `id`'s record and its revision in the sessions bucket; `None` if it has none
    /// (it ended, or never was). Every reader of a record goes through here.
    pub(crate) async fn session_record(
        &self,
        id: &str,
    ) -> Result<Option<(crate::wire::SessionRecord, u64)>, ClusterError> {
        let entry =
            self.sessions.entry(names::session_key(id)).await.map_err(ClusterError::nats)?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let record = serde_json::from_slice(&entry.value).map_err(ClusterError::nats)?;
        Ok(Some((record, entry.revision)))
    }

    /// Connects and opens (or creates) the buckets and the stream; a nodes bucket created here
    /// keeps a silent node `lost_after`.
    pub(crate) async fn open(
        server: &NatsConfig,
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
                // Lets a lost session's record expire (docs/cluster.md#failure).
                limit_markers: Some(names::NODE_MARKER_TTL),
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
        max_consumers: names::EVENTS_MAX_READERS,
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
    fn reconnects_come_quickly_for_the_first_seconds_then_each_second() {
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), RECONNECT_PAUSE);
        assert_eq!(reconnect_delay(QUICK_RECONNECTS), RECONNECT_PAUSE);
        assert_eq!(reconnect_delay(QUICK_RECONNECTS + 1), RECONNECT_PAUSE_LONG);
        assert_eq!(reconnect_delay(usize::MAX), RECONNECT_PAUSE_LONG);
        let quick: Duration = (1..=QUICK_RECONNECTS).map(reconnect_delay).sum();
        assert!(quick >= Duration::from_secs(4), "{quick:?}");
    }

    #[test]
    fn a_shown_url_hides_its_credentials() {
        assert_eq!(
            NatsConfig::new("nats://s3cret@10.0.0.5:4222").shown(),
            "nats://***@10.0.0.5:4222"
        );
        assert_eq!(NatsConfig::new("nats://u:p@h:1").shown(), "nats://***@h:1");
        assert_eq!(NatsConfig::new("nats://127.0.0.1:4222").shown(), "nats://127.0.0.1:4222");
        assert_eq!(NatsConfig::new("127.0.0.1:4222").shown(), "127.0.0.1:4222");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let shown = format!(
            "{:?}",
            NatsConfig::new("nats://u:pw1@h:1").user_password("node", "pw2").token("tok3")
        );
        for secret in ["pw1", "pw2", "tok3"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("nats://***@h:1") && shown.contains("token"), "{shown}");
    }

    #[test]
    fn a_url_after_a_token_keeps_the_token() {
        let config = NatsConfig::new("nats://a:1").token("t").replaced_by("nats://b:2".into());
        assert_eq!(config.url, "nats://b:2");
        assert!(matches!(config.auth, Auth::Token(ref t) if t == "t"));
        let tls = NatsConfig::new("nats://a:1").tls_root_certificates("ca.pem");
        assert!(tls.tls.required && tls.tls.roots.len() == 1);
    }
}
