//! `SessionHandle::inspect`: snapshots of the actor tree, the running calls, the speeches and the
//! coalescer, built from the actors' own answers and checked against ractor's supervision tree.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use colloquy::prelude::*;
use colloquy::session::{
    ActorKind, ActorNode, NodeStatus, SessionSnapshot, SpeechStatus, ToolsetScope,
};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Trip {
    city: String,
}

/// Posts an update, then works for `ms` before answering.
fn book(ms: u64) -> FunctionTool {
    FunctionTool::new("book", "Books a trip.", move |ctx: RunContext, a: Trip| async move {
        ctx.update(format!("booking {}", a.city)).await?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ctx.update("almost there").await?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, ToolError>("booked")
    })
    .cancellable()
}

fn lookup() -> FunctionTool {
    FunctionTool::new("lookup", "Looks up.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("looking").await?;
        tokio::time::sleep(Duration::from_millis(5_000)).await;
        Ok::<_, ToolError>("found")
    })
}

/// `(actor id, parent actor id)` for every actor under `cell`, walking ractor's own tree.
fn ractor_edges(cell: &colloquy::ractor::ActorCell) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for child in cell.get_children() {
        out.insert((child.get_id().to_string(), cell.get_id().to_string()));
        out.extend(ractor_edges(&child));
    }
    out
}

/// The same edges, from the snapshot.
fn snapshot_edges(node: &ActorNode) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for child in &node.children {
        out.insert((child.actor_id.to_string(), node.actor_id.to_string()));
        out.extend(snapshot_edges(child));
    }
    out
}

fn ids(node: &ActorNode) -> Vec<String> {
    node.walk().into_iter().map(|n| n.id.clone()).collect()
}

async fn start() -> Harness {
    let builder = Session::builder().toolset(Toolset::new_async("shared").tool(lookup()));
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("b1", "book", r#"{"city":"Oslo"}"#),
            ScriptedCall::new("l1", "lookup", "{}"),
        ]),
        text("Working on both."),
        text("Almost there."),
        text("All booked."),
    ];
    Harness::start_with(builder, Agent::new("A", "travel").tool(book(300)), script).await
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_shows_the_tree_the_running_calls_and_their_progress() {
    let h = start().await;
    h.turn("book Oslo").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let snap = h.session.inspect().await.unwrap();
    assert_eq!(snap.agent, "A");
    assert_eq!(snap.agent_state, AgentState::Listening);
    assert!(snap.speeches.is_empty(), "{:?}", snap.speeches);
    // Children sorted by kind name, then id; the coalescer does not run yet.
    assert_eq!(
        ids(&snap.tree),
        [
            "session",
            "activity:A",
            "toolset:agent:A",
            "tool_call:b1",
            "toolset:shared",
            "tool_call:l1",
        ]
    );
    assert!(snap.replies.is_none());
    let agent_set = snap.tree.find("toolset:agent:A").unwrap();
    assert_eq!(agent_set.scope, Some(ToolsetScope::Agent));
    // A cancellable tool brings the companion tools, which run in the agent's toolset.
    let tools = ["book", "lk_agents_cancel_task", "lk_agents_get_running_tasks"];
    assert_eq!(agent_set.tools.clone().unwrap(), tools);
    let shared = snap.tree.find("toolset:shared").unwrap();
    assert_eq!(shared.scope, Some(ToolsetScope::Session));
    assert_eq!(shared.tools.as_deref(), Some(&["lookup".to_string()][..]));
    let b1 = snap.tree.find("tool_call:b1").unwrap();
    assert_eq!(b1.kind, ActorKind::ToolCall);
    assert_eq!(b1.status, NodeStatus::Running);
    assert_eq!(b1.name.as_deref(), Some("book"));
    assert_eq!(b1.arguments.as_deref(), Some(r#"{"city": "Oslo"}"#), "canonical text");
    assert_eq!(b1.updates, Some(1));
    assert_eq!(b1.cancellable, Some(true));
    // Started when the first LLM response arrived; the text reply took its 10 ms latency.
    assert_eq!(b1.elapsed_ms, Some(110));
    assert_eq!(snap.tree.find("tool_call:l1").unwrap().cancellable, Some(false));
    // Built from the actors' answers, it is exactly ractor's tree under the session.
    assert_eq!(snapshot_edges(&snap.tree), ractor_edges(&h.session.actor_cell()));

    // After the second update the coalescer runs and holds or has delivered the pair.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let snap = h.session.inspect().await.unwrap();
    let b1 = snap.tree.find("tool_call:b1").unwrap();
    assert_eq!((b1.updates, b1.elapsed_ms), (Some(2), Some(360)));
    assert!(snap.tree.find("coalescer").is_some());
    let replies = snap.replies.expect("the coalescer runs");
    assert!(replies.pending.is_empty() && !replies.offered, "{replies:?}");
    assert_eq!(snapshot_edges(&snap.tree), ractor_edges(&h.session.actor_cell()));

    // A cancelled call leaves the tree once its actor has stopped.
    h.session.cancel_tool_call("b1").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let snap = h.session.inspect().await.unwrap();
    assert!(snap.tree.find("tool_call:b1").is_none(), "{:?}", ids(&snap.tree));
    assert!(snap.tree.find("tool_call:l1").is_some());
    assert_eq!(snapshot_edges(&snap.tree), ractor_edges(&h.session.actor_cell()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn queued_and_speaking_speeches_and_pending_replies_show() {
    let h = start().await;
    // Inspect while the first reply is being generated: the speech holds the floor.
    h.session.user_turn("book Oslo").await.unwrap();
    let snap = h.session.inspect().await.unwrap();
    assert_eq!(snap.speeches.len(), 1, "{:?}", snap.speeches);
    assert_eq!(snap.speeches[0].speech_id, "s1");
    assert!(
        matches!(snap.speeches[0].status, SpeechStatus::Speaking | SpeechStatus::Queued),
        "{:?}",
        snap.speeches
    );
    h.session.wait_for_idle().await.unwrap();
    let snap = h.session.inspect().await.unwrap();
    assert!(snap.speeches.is_empty());
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let snap: SessionSnapshot = h.session.inspect().await.unwrap();
    // Quiet: only the standing actors are left, and they match ractor's tree.
    assert_eq!(
        ids(&snap.tree),
        ["session", "activity:A", "toolset:agent:A", "coalescer", "toolset:shared"]
    );
    assert_eq!(snapshot_edges(&snap.tree), ractor_edges(&h.session.actor_cell()));
    // The snapshot serializes with stable ids and kind names.
    let json = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["tree"]["kind"], "session");
    assert_eq!(json["tree"]["children"][0]["kind"], "activity");
    assert_eq!(json["tree"]["children"][0]["agent"], "A");
    assert!(json["tree"].get("actor_id").is_none());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_closed_session_cannot_be_inspected() {
    let h = Harness::start(Agent::new("A", "inst"), vec![]).await;
    h.session.close().await.unwrap();
    assert!(matches!(h.session.inspect().await, Err(SessionError::Closed)));
}

/// Each speech's status, by speech id.
async fn speech_statuses(session: &SessionHandle) -> Vec<(String, SpeechStatus)> {
    let snap = session.inspect().await.unwrap();
    let mut statuses: Vec<_> =
        snap.speeches.iter().map(|s| (s.speech_id.clone(), s.status)).collect();
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    statuses
}

/// The floor a speech lends while its blocking tool runs: nothing else wants it, so the speech
/// takes it back by itself; a reply asked for meanwhile takes it, speaks, and the waiting
/// speech gets it back for its tool reply.
#[tokio::test(start_paused = true)]
async fn a_speech_waiting_for_its_tool_lends_the_floor() {
    let ms = Duration::from_millis;
    let call = |id: &str| ScriptedCall::new(id, "book_flight", "{}");
    let h = Harness::start(
        Agent::new("A", "Test agent.").tool(sleeper("book_flight", 400, "booked")),
        vec![
            text("One moment.").with_call(call("bf1")),
            text("Booked.").with_latency(ms(10)),
            text("Again.").with_call(call("bf2")),
            text("Meanwhile.").with_latency(ms(100)),
            text("Booked again.").with_latency(ms(10)),
        ],
    )
    .await;

    // Alone: the speech waits, lent floor and all, then speaks its tool reply.
    h.session.user_turn("book").await.unwrap();
    tokio::time::sleep(ms(150)).await;
    let statuses = speech_statuses(&h.session).await;
    assert_eq!(statuses, [("s1".to_string(), SpeechStatus::WaitingForTools)]);
    h.session.wait_for_idle().await.unwrap();
    assert!(h.session.inspect().await.unwrap().speeches.is_empty());

    // A reply asked for meanwhile takes the lent floor and speaks while the tool runs.
    h.session.user_turn("again").await.unwrap();
    tokio::time::sleep(ms(150)).await;
    h.session.generate_reply("say something while waiting").await.unwrap();
    tokio::time::sleep(ms(20)).await;
    assert_eq!(
        speech_statuses(&h.session).await,
        [("s2".to_string(), SpeechStatus::WaitingForTools), ("s3".into(), SpeechStatus::Speaking)]
    );
    h.session.wait_for_idle().await.unwrap();
    let ctx = h.ctx("A").await;
    assert_eq!(
        ctx[ctx.len() - 6..],
        [
            "user(again)".to_string(),
            "asst(Again.)".into(),
            "call(book_flight#bf2 {})".into(),
            "asst(Meanwhile.)".into(),
            r#"out(#bf2,"booked",ok,rr=T)"#.into(),
            "asst(Booked again.)".into(),
        ]
    );
    h.close().await;
}

/// A reply queued while the speech still holds the floor (its LLM answer is on the way) starts
/// as soon as the speech lends the floor to wait for its tool: the speech tells the Activity,
/// which waits for the floor.
#[tokio::test(start_paused = true)]
async fn a_reply_queued_before_the_wait_starts_when_the_floor_is_lent() {
    let ms = Duration::from_millis;
    let h = Harness::start(
        Agent::new("A", "Test agent.").tool(sleeper("book_flight", 400, "booked")),
        vec![
            text("One moment.")
                .with_call(ScriptedCall::new("bf1", "book_flight", "{}"))
                .with_latency(ms(100)),
            text("Meanwhile.").with_latency(ms(10)),
            text("Booked.").with_latency(ms(10)),
        ],
    )
    .await;
    h.session.user_turn("book").await.unwrap();
    tokio::time::sleep(ms(50)).await;
    h.session.generate_reply("say something while waiting").await.unwrap();
    tokio::time::sleep(ms(20)).await;
    assert_eq!(
        speech_statuses(&h.session).await,
        [("s1".to_string(), SpeechStatus::Speaking), ("s2".into(), SpeechStatus::Queued)]
    );
    // The answer arrives at 100 ms and the call starts: s2 speaks while s1 waits.
    tokio::time::sleep(ms(35)).await;
    assert_eq!(
        speech_statuses(&h.session).await,
        [("s1".to_string(), SpeechStatus::WaitingForTools), ("s2".into(), SpeechStatus::Speaking)]
    );
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        h.ctx("A").await,
        [
            "user(book)",
            "asst(One moment.)",
            "call(book_flight#bf1 {})",
            "asst(Meanwhile.)",
            r#"out(#bf1,"booked",ok,rr=T)"#,
            "asst(Booked.)",
        ]
    );
    h.close().await;
}

/// Find an actor under `cell` by its ractor id.
fn find_cell(
    cell: &colloquy::ractor::ActorCell,
    id: colloquy::ractor::ActorId,
) -> Option<colloquy::ractor::ActorCell> {
    if cell.get_id() == id {
        return Some(cell.clone());
    }
    cell.get_children().iter().find_map(|child| find_cell(child, id))
}

/// A running call's ToolCall actor is its Toolset's child (linked once started): killed, its
/// call still ends once, with an error, and the session goes on.
#[tokio::test(start_paused = true)]
async fn a_killed_tool_call_actor_still_ends_its_call() {
    let mut h = Harness::start(
        Agent::new("A", "Test agent.").tool(sleeper("book_flight", 400, "booked")),
        vec![
            text("One moment.").with_call(ScriptedCall::new("bf1", "book_flight", "{}")),
            text("Sorry."),
        ],
    )
    .await;
    h.session.user_turn("book").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let snap = h.session.inspect().await.unwrap();
    let node = snap.tree.find("tool_call:bf1").expect("the call runs");
    let cell = find_cell(&h.session.actor_cell(), node.actor_id).expect("in ractor's tree");
    assert_eq!(
        cell.try_get_supervisor().map(|s| s.get_id()),
        snap.tree.find("toolset:agent:A").map(|t| t.actor_id),
        "linked to its toolset"
    );
    cell.kill();
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let events: Vec<String> = h
        .tool_events()
        .into_iter()
        .filter(|e| e.starts_with("S(") || e.starts_with("E("))
        .collect();
    assert_eq!(
        events,
        ["S(bf1)", r#"E(bf1,error,"tool call actor ended before its call: killed")"#]
    );
    assert_eq!(
        h.ctx("A").await[3..],
        [r#"out(#bf1,"An internal error occurred.",ERR,rr=T)"#, "asst(Sorry.)"]
    );
    assert!(snap.tree.find("tool_call:bf1").is_some());
    let after = h.session.inspect().await.unwrap();
    assert!(after.tree.find("tool_call:bf1").is_none(), "gone from the tree");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_prints_as_an_indented_tree() {
    let h = start().await;
    h.turn("book Oslo").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let snap = h.session.inspect().await.unwrap();
    let text = snap.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("session ")
            && lines[0].ends_with(" · agent A (listening) · user listening"),
        "{text}"
    );
    assert_eq!(
        lines[1..],
        [
            "  session · session · running",
            "    activity:A · activity · running · agent A",
            "      toolset:agent:A · toolset · running · agent scope · tools: book, \
             lk_agents_cancel_task, lk_agents_get_running_tasks",
            "        tool_call:b1 · tool_call · running · book · 0.1 s · 1 update · cancellable",
            "    toolset:shared · toolset · running · session scope · tools: lookup",
            "      tool_call:l1 · tool_call · running · lookup · 0.1 s · 1 update",
        ],
        "{text}"
    );
    // A node prints its own subtree, from no indent.
    let call = snap.tree.find("tool_call:l1").unwrap().to_string();
    assert_eq!(call, "tool_call:l1 · tool_call · running · lookup · 0.1 s · 1 update\n");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn every_stopped_record_says_why() {
    let mut builder = Session::builder().toolset(Toolset::new_async("shared").tool(lookup()));
    let mut lifecycle = builder.lifecycle_events();
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("b1", "book", r#"{"city":"Oslo"}"#),
            ScriptedCall::new("l1", "lookup", "{}"),
        ]),
        text("Working on both."),
    ];
    let h = Harness::start_with(builder, Agent::new("A", "travel").tool(book(300)), script).await;
    h.turn("book Oslo").await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    h.session.update_agent(Agent::new("B", "billing").tool(book(300))).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    h.close().await;
    let mut stopped = Vec::new();
    while let Ok(record) = lifecycle.try_recv() {
        if matches!(record.what, colloquy::session::Lifecycle::Stopped) {
            stopped.push((record.id, record.reason));
        }
    }
    assert!(stopped.len() >= 6, "{stopped:?}");
    let silent: Vec<_> = stopped.iter().filter(|(_, reason)| reason.is_none()).collect();
    assert!(silent.is_empty(), "stopped without a reason: {silent:?}");
}
