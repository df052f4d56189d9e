//! `/inspect`: a session snapshot as an indented tree, one actor a line (pure).

use colloquy::{ActorNode, SessionSnapshot};

use super::clean;

/// The snapshot as lines: a heading with the agent and the states, then each actor indented
/// under its parent: its id, its kind, its status, and what its kind adds (an Activity's
/// agent, a Toolset's scope and tools, a ToolCall's tool, time, updates and whether it can be
/// cancelled).
pub fn tree(snapshot: &SessionSnapshot) -> String {
    let mut lines = vec![format!(
        "session {} · agent {} ({}) · user {}",
        clean::line(&snapshot.session_id),
        clean::line(&snapshot.agent),
        word(&snapshot.agent_state),
        word(&snapshot.user_state),
    )];
    node(&snapshot.tree, 1, &mut lines);
    lines.join("\n")
}

fn node(node: &ActorNode, depth: usize, lines: &mut Vec<String>) {
    let mut line = format!(
        "{}{} · {} · {}",
        "  ".repeat(depth),
        clean::line(&node.id),
        node.kind.name(),
        word(&node.status)
    );
    if let Some(agent) = &node.agent {
        line.push_str(&format!(" · agent {}", clean::line(agent)));
    }
    if let Some(scope) = &node.scope {
        line.push_str(&format!(" · {} scope", word(scope)));
    }
    if let Some(tools) = &node.tools {
        line.push_str(&format!(" · tools: {}", clean::line(&tools.join(", "))));
    }
    if let Some(name) = &node.name {
        line.push_str(&format!(" · {}", clean::line(name)));
    }
    if let Some(ms) = node.elapsed_ms {
        line.push_str(&format!(" · {:.1} s", ms as f64 / 1000.0));
    }
    if let Some(updates) = node.updates {
        line.push_str(&format!(" · {updates} updates"));
    }
    if node.cancellable == Some(true) {
        line.push_str(" · cancellable");
    }
    lines.push(line);
    for child in &node.children {
        self::node(child, depth + 1, lines);
    }
}

/// A unit enum's serialized name (`running`, `speaking`…).
fn word(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(word)) => word,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}
