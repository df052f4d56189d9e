//! A host with many sessions against a real nats-server's default limits: a stream takes
//! 1,000 consumers unless it says otherwise, and every reader is one.

mod common;

use colloquy_cluster::{Cluster, StartOptions};
use common::{NatsServer, node_builder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_holds_more_than_a_thousand_readers_and_lists_nodes_as_often() {
    let server = NatsServer::start();
    let node = node_builder(&server.url(), "n1").start().await.expect("a node");
    let cluster = Cluster::connect(server.url()).await.expect("a host");
    let session = cluster.start_session("support", StartOptions::default()).await.expect("placed");
    let mut readers = Vec::new();
    for i in 0..1_100 {
        // Listing the nodes (each placement does) leaves no consumer behind.
        assert_eq!(cluster.nodes().await.expect("the nodes").len(), 1);
        match session.subscribe().await {
            Ok(reader) => readers.push(reader),
            Err(e) => panic!("reader {i}: {e}"),
        }
    }
    drop(readers);
    session.close().await.expect("close");
    node.drain().await;
}
