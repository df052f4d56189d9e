//! Commands sent with an id (`SessionHandle::with_command_id`, docs/durability.md#commands):
//! a resend runs nothing twice, in one process and after a crash at any append.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use crate::durable::{Tapped, journal_of};
use colloquy::prelude::*;
use colloquy::store::{Entry, Record};

/// How many messages of `history` say `text`.
fn said(history: &[ChatItem], text: &str) -> usize {
    history.iter().filter(|i| i.as_message().is_some_and(|m| m.text == text)).count()
}

#[tokio::test(start_paused = true)]
async fn a_command_sent_again_with_its_id_runs_once_and_a_new_id_runs() {
    let script = vec![text("One."), text("Two.")];
    let h = Harness::start(agent(), script).await;
    let first = h.session.with_command_id("t1");
    first.user_turn("hello").await.unwrap();
    first.user_turn("hello").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    first.say("A notice.").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let history = h.session.history().await.unwrap();
    assert_eq!(said(&history, "hello"), 1, "{:?}", show(&history));
    assert_eq!(said(&history, "A notice."), 0, "an id is for one command: {:?}", show(&history));

    h.session.with_command_id("t2").user_turn("hello").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let history = h.session.history().await.unwrap();
    assert_eq!(said(&history, "hello"), 2, "{:?}", show(&history));
    assert_eq!(said(&history, "Two."), 1, "{:?}", show(&history));
}

#[tokio::test(start_paused = true)]
async fn an_approval_sent_again_is_answered_as_the_first_and_a_refused_command_is_not_taken() {
    let runs = Arc::new(AtomicU32::new(0));
    let counting = Arc::clone(&runs);
    let refund = FunctionTool::new("refund", "Refund.", move |_c: RunContext, _a: NoArgs| {
        counting.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ToolError>("refunded") }
    })
    .requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Asked."), text("Refunded.")];
    let h = Harness::start(Agent::new("A", "inst").tool(refund), script).await;
    h.turn("refund it").await;
    // Refused (no such call): nothing was done, so the id is not taken.
    let approve = h.session.with_command_id("a1");
    assert!(approve.approve("c9").await.is_err());
    approve.approve("c1").await.unwrap();
    approve.approve("c1").await.expect("the same answer as the first");
    assert!(h.session.approve("c1").await.is_err(), "without its id, a second approval fails");
    h.session.wait_for_quiet().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The conversation every crash point below cuts: each command with its id.
const COMMANDS: [(&str, &str); 4] = [
    ("t1", "first question"),
    ("s1", "A fixed notice."),
    ("i1", "second question"),
    ("g1", "Wrap up."),
];

async fn send(session: &SessionHandle, id: &str, text: &str) {
    let once = session.with_command_id(id);
    match id.as_bytes()[0] {
        b't' => once.user_turn(text).await,
        b's' => once.say(text).await,
        b'i' => once.user_input(text).await,
        _ => once.generate_reply(text).await,
    }
    .unwrap();
    session.wait_for_idle().await.unwrap();
}

/// A crash after any append, resumed, and every command sent again with its id: each ran
/// once — before the crash, if what it did was on disk, else after — and a command's record is
/// never on disk without what it did.
#[tokio::test(start_paused = true)]
async fn after_a_crash_at_any_append_every_command_sent_again_runs_once() {
    let points = Arc::new(Mutex::new(Vec::<Vec<Entry>>::new()));
    let kept = Arc::clone(&points);
    let store = Arc::new(Tapped::new(move |on_disk| kept.lock().unwrap().push(on_disk)));
    let script = vec![text("Answer one."), text("Answer two."), text("Bye.")];
    let h = Harness::start_with(Session::builder().store(store.clone()), agent(), script).await;
    for (id, text) in COMMANDS {
        send(&h.session, id, text).await;
    }
    let id = h.session.id().to_owned();
    h.session.suspend().await.unwrap();
    drop(h);
    let points = points.lock().unwrap().clone();
    // Six or more alone; fewer under load, where the journal's group commits (on blocking
    // threads, real time) gather more records each.
    assert!(points.len() >= 2, "{} crash points", points.len());

    let (mut ran_again, mut answered) = (0, 0);
    for (point, on_disk) in points.iter().enumerate() {
        let taken: Vec<&str> = on_disk
            .iter()
            .filter_map(|e| match &e.record {
                Record::CommandTaken { id } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let replies: Vec<_> = (0..4).map(|_| text("Again.")).collect();
        let builder =
            Session::builder().llm(ScriptedLlm::new(replies)).store(journal_of(&id, on_disk));
        let resumed = builder.resume(&id, |name| (name == "A").then(agent)).await.unwrap();
        let before = resumed.history().await.unwrap();
        for (command, text) in COMMANDS {
            if command != "g1" {
                let durable = said(&before, text) == 1;
                assert_eq!(durable, taken.contains(&command), "at {point}: {command}: {taken:?}");
            }
            send(&resumed, command, text).await;
        }
        let history = resumed.history().await.unwrap();
        for (command, text) in &COMMANDS[..3] {
            assert_eq!(said(&history, text), 1, "at {point}: {command}: {:?}", show(&history));
        }
        let replies = history
            .iter()
            .filter(|i| i.as_message().is_some_and(|m| m.role == Role::Assistant))
            .count();
        assert!(replies <= 4, "at {point}: no reply twice: {:?}", show(&history));
        ran_again += COMMANDS.len() - taken.len();
        answered += taken.len();
        resumed.close().await.unwrap();
    }
    assert!(ran_again > 0 && answered > 0, "{ran_again} run again, {answered} answered");
}
