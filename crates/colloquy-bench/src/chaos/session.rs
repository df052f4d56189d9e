//! One session of a chaos run: its turns with their faults (a crash resumes it from the
//! store), one more turn without, then the checks of its events, history and journal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy::events::{EventFilter, EventStream, EventType, InDoubtOutcome, ToolCallStatus};
use colloquy::prelude::*;
use colloquy::session::Host;
use colloquy::store::{Record, SessionStore};
use serde::Serialize;

use super::Chaos;
use super::faults::{Fault, Plan, agent, fault, llm};
use crate::workload;

/// The longest a turn (or the final turn's answer) may take before the session is reported
/// stuck: far above any fault's own delay, it only keeps a broken run finite.
const STUCK: Duration = Duration::from_secs(60);

/// One broken invariant, with what replays it: the session's number and its faults (the run's
/// seed and options are in the report's `replay`).
#[derive(Clone, Debug, Serialize)]
pub(super) struct Failure {
    pub(super) invariant: &'static str,
    pub(super) session: usize,
    pub(super) call: Option<String>,
    pub(super) what: String,
    /// The session's faults, by turn.
    pub(super) faults: Vec<(u32, Fault)>,
}

/// What one session showed.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) faults: BTreeMap<Fault, u32>,
    pub(super) started: u32,
    pub(super) ended: u32,
    pub(super) failures: Vec<Failure>,
}

impl Outcome {
    /// Adds another session's outcome to this sum.
    pub(super) fn add(&mut self, other: Outcome) {
        for (fault, n) in other.faults {
            *self.faults.entry(fault).or_default() += n;
        }
        self.started += other.started;
        self.ended += other.ended;
        self.failures.extend(other.failures);
    }

    /// A session whose task itself failed.
    pub(super) fn broken(index: usize, what: String) -> Self {
        let failure = Failure {
            invariant: "sessions_answer",
            session: index,
            call: None,
            what,
            faults: Vec::new(),
        };
        Self { failures: vec![failure], ..Self::default() }
    }
}

/// The session as it runs now: its handle and event stream (new ones after a crash).
struct Life {
    session: SessionHandle,
    events: EventStream,
}

/// What the host listens to: the calls, their replies, errors and resumes.
fn filter() -> EventFilter {
    EventFilter::tool_execution()
        .with(EventType::Error)
        .with(EventType::ToolReplyUpdated)
        .with(EventType::SessionResumed)
}

/// Starts the session (`resume`: resumes it from the store instead).
async fn live(
    host: &Host,
    store: Option<&Arc<dyn SessionStore>>,
    plan: &Arc<Plan>,
    tool_ms: u64,
    resume: Option<&str>,
) -> Result<Life, SessionError> {
    let mut builder =
        Session::builder().host(host).llm(llm(Arc::clone(plan))).user_away_timeout(None);
    if let Some(store) = store {
        builder = builder.store(Arc::clone(store)).take_over(resume.is_some());
    }
    let events = builder.subscribe_to(filter());
    let session = match resume {
        None => builder.start(agent(tool_ms, Arc::clone(plan))).await?,
        Some(id) => {
            let agents =
                |name: &str| (name == workload::AGENT).then(|| agent(tool_ms, Arc::clone(plan)));
            builder.resume(id, agents).await?
        }
    };
    Ok(Life { session, events })
}

/// Runs the session numbered `index`: its turns, faults and all, then one more without, then
/// the checks.
pub(super) async fn session(
    chaos: Chaos,
    index: usize,
    host: Host,
    store: Option<Arc<dyn SessionStore>>,
) -> Outcome {
    let turns = chaos.load.turns;
    let with_store = store.is_some();
    let faults: Vec<Option<Fault>> = (0..=turns)
        .map(|turn| (turn < turns).then(|| fault(chaos.seed, chaos.rate, index, turn, with_store)))
        .map(Option::flatten)
        .collect();
    let plan = Plan::new(faults.clone());
    let mut outcome = Outcome::default();
    for fault in faults.iter().flatten() {
        *outcome.faults.entry(*fault).or_default() += 1;
    }
    let by_turn: Vec<(u32, Fault)> =
        (0..).zip(&faults).filter_map(|(turn, fault)| Some((turn, (*fault)?))).collect();
    let fail = |invariant, call: Option<&str>, what: String| Failure {
        invariant,
        session: index,
        call: call.map(str::to_owned),
        what,
        faults: by_turn.clone(),
    };
    let tool_ms = chaos.load.tool_ms;
    let mut life = match live(&host, store.as_ref(), &plan, tool_ms, None).await {
        Ok(life) => life,
        Err(e) => {
            outcome.failures.push(fail("sessions_answer", None, format!("start: {e}")));
            return outcome;
        }
    };
    let id = life.session.id().to_owned();
    // Every event of every life, in order.
    let mut seen = Vec::new();
    for turn in 0..turns {
        if let Err(e) = life.session.user_turn(workload::user_text(turn)).await {
            outcome.failures.push(fail("sessions_answer", None, format!("turn {turn}: {e}")));
            continue;
        }
        if plan.of(turn) == Some(Fault::Crash) {
            // Its call running, the session dies; its stream ends with it.
            let crashed = async {
                plan.begun(turn).await;
                life.session.inject_failure("session");
                while let Some(event) = life.events.recv().await {
                    seen.push(event);
                }
            };
            if tokio::time::timeout(STUCK, crashed).await.is_err() {
                let what = format!("turn {turn}: the crash never came");
                outcome.failures.push(fail("sessions_answer", None, what));
            }
            match live(&host, store.as_ref(), &plan, tool_ms, Some(&id)).await {
                Ok(resumed) => life = resumed,
                Err(e) => {
                    let what = format!("turn {turn}: the resume failed: {e}");
                    outcome.failures.push(fail("sessions_answer", None, what));
                    return outcome;
                }
            }
        }
        let settled = async {
            life.session.wait_for_quiet().await?;
            life.session.wait_for_idle().await
        };
        let what = match tokio::time::timeout(STUCK, settled).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => format!("turn {turn}: {e}"),
            Err(_) => format!("turn {turn} stuck"),
        };
        outcome.failures.push(fail("sessions_answer", None, what));
    }
    // A new turn, no fault: answered, its result delivered by a reply.
    let final_id = workload::final_id(turns);
    let answered = async {
        life.session.user_turn(workload::user_text(turns)).await.ok()?;
        while let Some(event) = life.events.recv().await {
            let done = workload::delivers(&event, &final_id);
            seen.push(event);
            if done {
                return Some(());
            }
        }
        None
    };
    if tokio::time::timeout(STUCK, answered).await.ok().flatten().is_none() {
        let what = format!("the turn after the faults was not answered ({final_id})");
        outcome.failures.push(fail("sessions_answer", None, what));
    }
    let history = match life.session.close_with_reason("close").await {
        Ok(closed) => closed.history.items().iter().map(|i| (**i).clone()).collect(),
        Err(e) => {
            outcome.failures.push(fail("sessions_answer", None, format!("close: {e}")));
            Vec::new()
        }
    };
    while let Some(event) = life.events.recv().await {
        seen.push(event);
    }
    let journal = store.as_ref().map(|store| store.load(&id));
    let checks = Checks { seen: &seen, history: &history };
    for (invariant, call, what) in checks.run(journal) {
        outcome.failures.push(fail(invariant, Some(&call), what));
    }
    outcome.started = checks.count(|k| matches!(k, EventKind::ToolCallStarted { .. }));
    outcome.ended = checks.count(|k| matches!(k, EventKind::ToolCallEnded { .. }));
    outcome
}

/// A closed session's checks: what its host saw, its final history, its journal.
struct Checks<'a> {
    seen: &'a [SessionEvent],
    history: &'a [ChatItem],
}

/// One call as the events showed it.
#[derive(Default)]
struct Call {
    started: u32,
    /// Its ends, each in the life (0, 1…: a crash begins the next) it came in.
    ended_in: Vec<usize>,
    /// The lives in which it ended `done`.
    done_in: Vec<usize>,
    /// Settled in doubt by a resume (it ends so in the journal).
    in_doubt: bool,
}

impl Checks<'_> {
    fn count(&self, wanted: impl Fn(&EventKind) -> bool) -> u32 {
        self.seen.iter().filter(|e| wanted(&e.kind)).count() as u32
    }

    /// The broken invariants: each with the call and what happened to it.
    fn run(
        &self,
        journal: Option<Result<Vec<colloquy::store::Entry>, colloquy::store::StoreError>>,
    ) -> Vec<(&'static str, String, String)> {
        let mut calls: BTreeMap<String, Call> = BTreeMap::new();
        let mut lives = 0;
        for event in self.seen {
            match &event.kind {
                EventKind::ToolCallStarted { call_id, .. } => {
                    calls.entry(call_id.clone()).or_default().started += 1;
                }
                EventKind::ToolCallEnded { call_id, status, .. } => {
                    let call = calls.entry(call_id.clone()).or_default();
                    call.ended_in.push(lives);
                    if *status == ToolCallStatus::Done {
                        call.done_in.push(lives);
                    }
                }
                EventKind::SessionResumed { in_doubt } => {
                    lives += 1;
                    for settled in in_doubt.iter().filter(|d| d.outcome == InDoubtOutcome::Failed) {
                        calls.entry(settled.call_id.clone()).or_default().in_doubt = true;
                    }
                }
                _ => {}
            }
        }
        let mut broken = Vec::new();
        for (call_id, call) in &calls {
            // One end, or — settled in doubt by a resume, which the journal's check holds to
            // one end — at most one in each life: a crash may take back an end its journal did
            // not hold yet.
            let once_a_life = call.ended_in.windows(2).all(|w| w[0] != w[1]);
            let once =
                call.started == 1 && once_a_life && (call.in_doubt || call.ended_in.len() == 1);
            // A start a crash took back would never end: a durable session sends it only once
            // it is on disk (decision 80).
            if !once {
                let what = format!(
                    "started {} times, ended {} times{}",
                    call.started,
                    call.ended_in.len(),
                    if call.in_doubt { ", settled in doubt" } else { "" }
                );
                broken.push(("calls_end_once", call_id.clone(), what));
            }
            // Finished in the last life it was in: its result is in the history.
            let last_life = call.ended_in.last().copied();
            let done_last = call.done_in.last().is_some_and(|l| Some(*l) == last_life);
            if done_last && !call.in_doubt && !self.in_history(call_id) {
                let what = "finished, its result not in the history".to_owned();
                broken.push(("results_in_history", call_id.clone(), what));
            }
        }
        if let Some(journal) = journal {
            broken.extend(journal_checks(journal));
        }
        broken
    }

    fn in_history(&self, call_id: &str) -> bool {
        let final_pair = format!("{call_id}_final");
        self.history.iter().any(|item| {
            item.as_function_call_output()
                .is_some_and(|o| !o.is_error && (o.call_id == call_id || o.call_id == final_pair))
        })
    }
}

/// The journal's own account: every call it started ended once in it (by its end, or failed
/// in doubt by a resume).
fn journal_checks(
    journal: Result<Vec<colloquy::store::Entry>, colloquy::store::StoreError>,
) -> Vec<(&'static str, String, String)> {
    let entries = match journal {
        Ok(entries) => entries,
        Err(e) => return vec![("calls_end_once", String::new(), format!("the journal: {e}"))],
    };
    let mut ends: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for entry in &entries {
        match &entry.record {
            Record::CallStarted { call, .. } => {
                ends.entry(call.call_id.clone()).or_default().0 += 1;
            }
            Record::CallEnded { call_id } => ends.entry(call_id.clone()).or_default().1 += 1,
            Record::Resumed { in_doubt } => {
                for settled in in_doubt.iter().filter(|d| d.outcome == "failed") {
                    ends.entry(settled.call_id.clone()).or_default().1 += 1;
                }
            }
            _ => {}
        }
    }
    ends.into_iter()
        .filter(|(_, (started, ended))| *started != 1 || *ended != 1)
        .map(|(call_id, (started, ended))| {
            let what = format!("in the journal: started {started} times, ended {ended} times");
            ("calls_end_once", call_id, what)
        })
        .collect()
}
