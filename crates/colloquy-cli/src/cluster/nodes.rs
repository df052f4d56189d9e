//! `colloquy nodes`: the live nodes of a cluster as they last announced themselves, as a
//! table or as JSON; every wait bounded by [`NODES_WAIT`].

use std::io::Write;
use std::time::Duration;

use colloquy::cluster::{Cluster, NodeInfo, Timeouts};

use crate::NodesArgs;
use crate::command::{CommandError, nats_config};
use crate::console::{clean, table};

/// The longest `colloquy nodes` waits for NATS and the nodes' announcements.
pub const NODES_WAIT: Duration = Duration::from_secs(10);

/// Lists the nodes on `out`.
pub async fn run(args: &NodesArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let nats = nats_config(&args.nats, &args.nats_auth).map_err(CommandError::Usage)?;
    let mut timeouts = Timeouts::default();
    timeouts.place = NODES_WAIT / 2;
    let mut builder = Cluster::builder(nats).timeouts(timeouts);
    if let Some(lost_after) = args.lost_after {
        builder = builder.lost_after(lost_after);
    }
    let read = async { builder.connect().await?.nodes().await };
    let nodes = match tokio::time::timeout(NODES_WAIT, read).await {
        Ok(nodes) => nodes.map_err(CommandError::Cluster)?,
        Err(_) => {
            let wait = NODES_WAIT.as_secs();
            return Err(CommandError::Failed(format!(
                "NATS at {} did not answer within {wait} s",
                args.nats
            )));
        }
    };
    let text = match args.json {
        true => serde_json::to_string_pretty(&nodes)
            .map_err(|e| CommandError::Failed(format!("cannot write the nodes as JSON: {e}")))?,
        false => table(&nodes),
    };
    writeln!(out, "{text}").map_err(|e| CommandError::Failed(e.to_string()))
}

/// The nodes as an aligned table, a row each, names made safe to print.
pub fn table(nodes: &[NodeInfo]) -> String {
    let header = ["NODE", "AGENTS", "SESSIONS", "LOAD", "DRAINING", "VERSION"].map(String::from);
    let mut rows = vec![header.to_vec()];
    for node in nodes {
        rows.push(vec![
            clean::line(&node.name),
            clean::line(&node.agents.join(",")),
            format!("{}/{}", node.sessions, node.max_sessions),
            format!("{:.2}", node.load),
            if node.draining { "yes" } else { "no" }.to_owned(),
            clean::line(&node.version),
        ]);
    }
    let mut lines = table::aligned(&rows);
    if nodes.is_empty() {
        lines.push("(no live node)".into());
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_node_aligned_under_the_header() {
        let node: NodeInfo = serde_json::from_value(serde_json::json!({
            "name": "worker-1", "boot_id": "b", "agents": ["demo", "sales"], "sessions": 3,
            "max_sessions": 100, "load": 0.03, "load_threshold": 0.7, "version": "0.1.0",
            "protocol": 1, "draining": true
        }))
        .unwrap();
        assert_eq!(
            table(&[node]),
            "NODE      AGENTS      SESSIONS  LOAD  DRAINING  VERSION\n\
             worker-1  demo,sales  3/100     0.03  yes       0.1.0"
        );
        assert_eq!(table(&[]), "NODE  AGENTS  SESSIONS  LOAD  DRAINING  VERSION\n(no live node)");
    }
}
