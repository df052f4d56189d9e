//! `--chaos`: the workload across three node processes while the cluster fails under it
//! (docs/benchmarks.md#chaos). The nodes journal their sessions on the server (their
//! default); the host places K sessions on them in turn, and each runs T turns of the
//! workload's background tool, one after another. Meanwhile node-1 is killed with SIGKILL and
//! started again, the NATS server is killed and started again on its port and store, and
//! node-2 is killed and started again.
//!
//! Then the failover's invariants, for every session: every turn answered — its result
//! delivered by a reply, or, cut off by a kill, its call settled in doubt or its reply not
//! said again where the session moved (decision 73) — and, once every node is back, one more
//! turn delivered; its events read 1, 2, 3… with no gap and no duplicate; every call started
//! ended once (its end, or in doubt in `x_session_moved`) — a start a kill took back would
//! never end, and a node publishes a start only once it is on disk (decision 80), so one is
//! counted (`calls_started_then_taken_back`) and breaks the run; none closed before the host
//! closed it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bench_support::{Load, round, workload};
use colloquy::events::{EventKind, SessionEvent};
use colloquy_cluster::{Cluster, RemoteEvents, RemoteSession, StartOptions};
use serde_json::{Value, json};

use crate::failover::{BOUND, NODES, NodeProcess, live_nodes};
use crate::server::NatsServer;

/// The pause before each failure, so that turns are under way at every one.
const BETWEEN_FAILURES: Duration = Duration::from_secs(1);

/// One session's run: its events, in order, how its turns ended, and what went wrong.
#[derive(Default)]
struct Driven {
    events: Vec<(u64, SessionEvent)>,
    delivered: u32,
    in_doubt: u32,
    cut_off: u32,
    problems: Vec<String>,
}

/// The run, as a JSON part of the report, and whether every invariant held.
pub(crate) async fn run(server: &mut NatsServer, load: Load) -> Result<(Value, bool), String> {
    let mut nodes = Vec::new();
    for name in NODES {
        nodes.push(NodeProcess::spawn(server.url(), name, load.tool_ms)?);
    }
    let cluster = Cluster::connect(server.url()).await.map_err(|e| format!("host: {e}"))?;
    live_nodes(&cluster, NODES.len()).await?;
    let mut drivers = Vec::with_capacity(load.sessions);
    let (calm, _) = tokio::sync::watch::channel(false);
    for i in 0..load.sessions {
        let node = NODES[i % NODES.len()];
        let start = cluster.start_session_on(node, workload::AGENT, StartOptions::new());
        let session = start.await.map_err(|e| format!("placing a session: {e}"))?;
        let events = session.subscribe().await.map_err(|e| format!("subscribing: {e}"))?;
        let driver = drive(session.clone(), events, load.turns, calm.subscribe());
        drivers.push((session, tokio::spawn(driver)));
    }
    let started = Instant::now();
    let failures = fail(server, &mut nodes, &cluster, load.tool_ms).await;
    // Every node back: the last turns may not be cut off.
    live_nodes(&cluster, NODES.len()).await?;
    calm.send_replace(true);
    let failures = failures?;
    let mut broken = Vec::new();
    let (mut moved, mut in_doubt, mut erased) = (0, 0, 0);
    let mut turns = (0, 0, 0);
    for (session, driver) in drivers {
        let driven = driver.await.unwrap_or_else(|e| Driven {
            problems: vec![format!("the driver failed: {e}")],
            ..Driven::default()
        });
        for (_, event) in &driven.events {
            if let EventKind::SessionMoved { calls_in_doubt, .. } = &event.kind {
                moved += 1;
                in_doubt += calls_in_doubt.len();
            }
        }
        turns = (turns.0 + driven.delivered, turns.1 + driven.in_doubt, turns.2 + driven.cut_off);
        let (problems, taken_back) = check(&driven);
        erased += taken_back;
        broken.extend(problems.into_iter().map(|what| format!("{}: {what}", session.id())));
        if let Ok(Err(e)) = tokio::time::timeout(BOUND, session.close()).await {
            broken.push(format!("{}: close: {e}", session.id()));
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let held = broken.is_empty();
    let part = json!({
        "sessions": load.sessions,
        "turns": load.turns,
        "tool_ms": load.tool_ms,
        "failures": failures,
        "moves": moved,
        "calls_in_doubt": in_doubt,
        "calls_started_then_taken_back": erased,
        "turns_delivered": turns.0,
        "turns_in_doubt": turns.1,
        "turns_cut_off": turns.2,
        "run_wall_s": round(wall, 2),
        "invariants_held": held,
        "problems": broken.len(),
        "problems_sample": broken.iter().take(5).collect::<Vec<_>>(),
    });
    Ok((part, held))
}

/// Kills node-1 and starts it again, restarts the server, then does node-2 as node-1: what
/// happened, in order.
async fn fail(
    server: &mut NatsServer,
    nodes: &mut [NodeProcess],
    cluster: &Cluster,
    tool_ms: u64,
) -> Result<Vec<String>, String> {
    tokio::time::sleep(BETWEEN_FAILURES).await;
    kill_and_start(server, nodes, 0, cluster, tool_ms).await?;
    tokio::time::sleep(BETWEEN_FAILURES).await;
    server.restart()?;
    tokio::time::sleep(BETWEEN_FAILURES).await;
    kill_and_start(server, nodes, 1, cluster, tool_ms).await?;
    Ok(["kill node-1", "restart nats-server", "kill node-2"].map(String::from).to_vec())
}

/// Kills node `at` with SIGKILL and, once the cluster no longer lists it, starts it again.
async fn kill_and_start(
    server: &NatsServer,
    nodes: &mut [NodeProcess],
    at: usize,
    cluster: &Cluster,
    tool_ms: u64,
) -> Result<(), String> {
    nodes[at].kill()?;
    let deadline = Instant::now() + BOUND;
    while cluster.nodes().await.is_ok_and(|all| all.iter().any(|n| n.name == NODES[at])) {
        if Instant::now() > deadline {
            return Err(format!("{} was never found lost", NODES[at]));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nodes[at] = NodeProcess::spawn(server.url(), NODES[at], tool_ms)?;
    Ok(())
}

/// How one turn ended.
enum Answered {
    /// Its result was delivered by a reply.
    Delivered,
    /// A kill cut its call off; the session moved and settled the call in doubt.
    InDoubt,
    /// A kill cut its reply off before a call (or while it spoke): the session moved, and a
    /// reply cut off is not said again (docs/decisions.md#decision-73).
    CutOff,
}

/// Runs `turns` turns of `session`, then, once every failure is over (`calm`), one more that
/// must be delivered: each turn ends when its result is delivered, or when a move settled its
/// call in doubt or cut its reply off.
async fn drive(
    session: RemoteSession,
    mut events: RemoteEvents,
    turns: u32,
    mut calm: tokio::sync::watch::Receiver<bool>,
) -> Driven {
    let mut driven = Driven::default();
    for turn in 0..=turns {
        if turn == turns && calm.wait_for(|calm| *calm).await.is_err() {
            driven.problems.push("the failures never ended".into());
            break;
        }
        if let Err(e) = session.user_turn(workload::user_text(turn)).await {
            driven.problems.push(format!("turn {turn}: {e}"));
            continue;
        }
        let from = driven.events.len();
        match answered(&mut events, &mut driven, turn).await {
            Some(Answered::Delivered) => driven.delivered += 1,
            Some(Answered::InDoubt) if turn < turns => driven.in_doubt += 1,
            Some(Answered::CutOff) if turn < turns => driven.cut_off += 1,
            answer => {
                let tail: Vec<String> = driven.events[from..]
                    .iter()
                    .map(|(i, e)| format!("{i} {:?}", e.kind.event_type()))
                    .collect();
                let what =
                    if answer.is_some() { "cut off after the failures" } else { "not answered" };
                driven.problems.push(format!("turn {turn}: {what}: {tail:?}"));
            }
        }
    }
    driven
}

/// Reads `events` until turn `turn` is answered (`None`: not within the bound).
async fn answered(events: &mut RemoteEvents, driven: &mut Driven, turn: u32) -> Option<Answered> {
    let (call_id, final_id, text) =
        (format!("t{turn}"), workload::final_id(turn), workload::user_text(turn));
    // A move counts for the turn once the turn's message is in the session (a move before it
    // is the turn before's).
    let mut taken = false;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let next = tokio::time::timeout_at(deadline, events.recv()).await.ok()??;
        let event = match next {
            Ok(event) => event,
            Err(e) => {
                driven.problems.push(format!("turn {turn}: events: {e}"));
                continue;
            }
        };
        let answer = match &event.event.kind {
            _ if workload::delivers(&event.event, &final_id) => Some(Answered::Delivered),
            EventKind::ConversationItemAdded { item } => {
                taken |= item.as_message().is_some_and(|m| m.text == text);
                None
            }
            EventKind::SessionMoved { calls_in_doubt, .. }
                if calls_in_doubt.iter().any(|c| c.call_id == call_id) =>
            {
                Some(Answered::InDoubt)
            }
            EventKind::SessionMoved { .. } if taken => Some(Answered::CutOff),
            _ => None,
        };
        driven.events.push((event.index, event.event));
        if answer.is_some() {
            return answer;
        }
    }
}

/// The invariants of one session's events: what broke, if anything, and how many calls a kill
/// took back before they began (their start published, not yet journaled).
fn check(driven: &Driven) -> (Vec<String>, u32) {
    let mut broken = driven.problems.clone();
    let indices: Vec<u64> = driven.events.iter().map(|(i, _)| *i).collect();
    if indices.iter().zip(1..).any(|(i, n)| *i != n) {
        broken.push(format!("events not numbered 1, 2, 3…: {indices:?}"));
    }
    // Each call: its starts, the lives it ended in (a move begins the next), whether a move
    // settled it in doubt. A kill may take back an end the journal did not hold yet: the call
    // is then settled in doubt, so at most one end a life, and one in all unless in doubt.
    let mut calls: BTreeMap<&str, Call> = BTreeMap::new();
    let mut life = 0;
    for (_, event) in &driven.events {
        match &event.kind {
            EventKind::ToolCallStarted { call_id, .. } => {
                let call = calls.entry(call_id).or_default();
                call.started += 1;
                call.started_in = life;
            }
            EventKind::ToolCallEnded { call_id, .. } => {
                calls.entry(call_id).or_default().ended_in.push(life);
            }
            EventKind::SessionMoved { calls_in_doubt, .. } => {
                life += 1;
                for call in calls_in_doubt {
                    calls.entry(&call.call_id).or_default().in_doubt = true;
                }
            }
            EventKind::SessionClosed { reason } => broken.push(format!("closed: {reason}")),
            _ => {}
        }
    }
    let mut erased = 0;
    for (call_id, call) in calls {
        let Call { started, started_in, ended_in, in_doubt } = call;
        let once_a_life = ended_in.windows(2).all(|w| w[0] != w[1]);
        let once = started == 1 && once_a_life && (in_doubt || ended_in.len() == 1);
        // Its start was published, and a kill came before the journal held it: the next node
        // never heard of it. Decision 80 says it cannot happen.
        let taken_back = started == 1 && ended_in.is_empty() && !in_doubt && started_in < life;
        if taken_back {
            erased += 1;
            broken.push(format!("{call_id}: started, then taken back by a kill: never ended"));
        } else if !once {
            let ended = ended_in.len();
            broken.push(format!("{call_id}: started {started} times, ended {ended} times"));
        }
    }
    (broken, erased)
}

/// One call as a session's events showed it.
#[derive(Default)]
struct Call {
    started: u32,
    /// The life (a move begins the next) it started in, and those it ended in.
    started_in: u32,
    ended_in: Vec<u32>,
    /// Settled in doubt by a move.
    in_doubt: bool,
}
