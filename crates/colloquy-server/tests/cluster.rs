//! The server with its sessions on cluster nodes: a real nats-server on 127.0.0.1 (the
//! cluster's harness, which installs the pinned binary on first use and fails the test if it
//! cannot), two nodes in this process, and the server placing sessions through a `Cluster`.

mod common;
#[path = "../../colloquy-cluster/tests/common/server.rs"]
mod nats;

use colloquy_cluster::{Cluster, Node};
use colloquy_model::EventFilter;
use colloquy_protocol::{ClosingReason, Reply, ServerMessage};
use colloquy_server::{ClusterBackend, Server};
use common::{Client, is_event, post, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_placed_on_nodes_stream_their_events_over_the_websocket() {
    let nats = nats::NatsServer::start();
    let mut nodes = Vec::new();
    for name in ["n1", "n2"] {
        let node = Node::builder()
            .nats(nats.url())
            .name(name)
            .llm(common::llm())
            .events(EventFilter::ALL)
            .agent("demo", common::agent)
            .start()
            .await
            .expect("the node starts");
        nodes.push(node);
    }
    let cluster = Cluster::connect(nats.url()).await.expect("the host connects");
    let server = serve(Server::builder().backend(ClusterBackend::new(cluster, None))).await;
    let (status, body) = common::get(&server, "/v1/agents", &[]).await;
    assert_eq!((status, body.as_str()), (200, r#"{"agents":["demo"],"default":"demo"}"#));
    let (status, started) = post(&server, r#"{"v":1}"#, None).await;
    assert_eq!(status, 201, "{started}");
    let node = started["node"].as_str().expect("placed on a node").to_owned();
    assert!(node == "n1" || node == "n2", "{node}");
    let (status, body) = post(&server, r#"{"v":1,"agent":"ghost"}"#, None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_agent")));
    let id = started["session_id"].as_str().unwrap();
    let mut client = Client::connect(&server, id, 0).await;
    let Some(ServerMessage::Hello { node: Some(hello_node), .. }) = client.next().await else {
        panic!("hello names the node")
    };
    assert_eq!(hello_node, node);
    client.send(r#"{"v":1,"id":1,"type":"user_turn","text":"go"}"#).await;
    let frames = client.until(|f| is_event(f, "tool_call_updated")).await;
    assert!(
        frames.iter().any(|f| matches!(f, ServerMessage::Reply { id: Some(1), reply: Reply::Ok }))
    );
    assert_eq!(common::seqs(&frames).first(), Some(&1), "from the session's first event");
    // Queued input runs on the node as it would in process.
    client.send(r#"{"v":1,"id":3,"type":"user_input","text":"and then?"}"#).await;
    let answered = |f: &ServerMessage| matches!(f, ServerMessage::Reply { id: Some(3), .. });
    let frames = client.until(answered).await;
    assert!(matches!(frames.last(), Some(ServerMessage::Reply { reply: Reply::Ok, .. })));
    client.send(r#"{"v":1,"id":2,"type":"close","reason":"done"}"#).await;
    let frames = client.until(|f| matches!(f, ServerMessage::Closing { .. })).await;
    assert!(
        frames.iter().any(|f| matches!(
            f,
            ServerMessage::Reply { id: Some(2), reply: Reply::Closed { .. } }
        ))
    );
    assert_eq!(
        frames.last(),
        Some(&ServerMessage::Closing { reason: ClosingReason::SessionClosed })
    );
    server.shutdown().await;
    for node in nodes {
        node.drain().await;
    }
}
