//! What the cluster's tests share: a real nats-server (`server.rs`), an agent, a scripted
//! model, bounded waits, the raw events of a session.
#![allow(dead_code)] // each test binary uses its own part

mod server;
pub(crate) use server::NatsServer;

use std::time::{Duration, Instant};

/// The bound on anything a test waits for.
pub(crate) const BOUND: Duration = Duration::from_secs(15);
/// When the loss tests' nodes are lost: at 1 s a loaded machine misses enough heartbeats for
/// a healthy node to fence itself.
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(2);
/// What a loaded machine may add to `lost_after` before a loss is seen.
pub(crate) const MARGIN: Duration = Duration::from_secs(2);
/// A call that fails without a request: far under a command's 5 s bound.
pub(crate) const AT_ONCE: Duration = Duration::from_millis(500);
/// What the scripted model answers.
pub(crate) const REPLY: &str = "Your order ships tomorrow.";

pub(crate) fn support() -> colloquy_model::Agent {
    colloquy_model::Agent::new("support", "You help with orders.")
}

pub(crate) fn llm() -> colloquy_llm::ScriptedLlm {
    colloquy_llm::ScriptedLlm::new([])
        .with_fallback(|_, _| colloquy_llm::ScriptedResponse::text(REPLY))
}

/// A node named `name` on the server at `url` with the `support` agent and the scripted model,
/// keeping no journals unless the test asks (`.durable(true)`, the builder's default): moves
/// are `failover.rs`'s subject, and a durable node dropped at a test's end waits out its last
/// journal writes against the stopped server (5 s).
pub(crate) fn node_builder(url: &str, name: &str) -> colloquy_cluster::NodeBuilder {
    colloquy_cluster::Node::builder()
        .nats(url)
        .name(name)
        .agent("support", support)
        .llm(llm())
        .durable(false)
}

/// Every frame and marker stored on session `id`'s events subject, as JSON, read past any
/// reader's end (a reader stops at `session_closed` or `x_node_lost`).
pub(crate) async fn raw_events(url: &str, id: &str) -> Vec<serde_json::Value> {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    use futures_util::StreamExt;
    let client = async_nats::connect(url).await.expect("a raw connection");
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream(colloquy_cluster::EVENTS_STREAM).await.expect("the events stream");
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: format!("colloquy.events.{id}"),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut all = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
        let Ok(Some(Ok(message))) = next else { break };
        // A message is an array of the frames a node sent together, or a marker.
        match serde_json::from_slice(&message.payload).expect("JSON") {
            serde_json::Value::Array(frames) => all.extend(frames),
            other => all.push(other),
        }
        if message.info().expect("info").pending == 0 {
            break;
        }
    }
    all
}

/// The type of a raw event message: an event's (`session_closed`…) or a marker's
/// (`x_node_lost`).
pub(crate) fn raw_type(message: &serde_json::Value) -> &str {
    message["event"]["type"].as_str().or_else(|| message["type"].as_str()).unwrap_or("?")
}

/// Runs `check` until it returns `Some`, every 20 ms, for at most `bound`.
pub(crate) async fn eventually<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
