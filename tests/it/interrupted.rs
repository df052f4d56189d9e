//! What a resumed session does with a call that was running when its process ended, by its
//! tool's `on_interrupted` policy (docs/durability.md#on-interrupted): `rerun` runs it again
//! with the same idempotency key, `ask` asks the host first.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::common::*;
use crate::durable::{crashed, drain, resumed_calls, stored};
use colloquy::prelude::*;
use colloquy::session::{SessionBuilder, SessionOptions};
use colloquy::store::{MemoryStore, Record, SessionStore as _};
use colloquy::tools::OnInterrupted;

/// A payment service that deduplicates by idempotency key, as payment APIs do: the keys of
/// the requests it got, and those it charged (each once).
#[derive(Default)]
struct Payments {
    requests: Mutex<Vec<String>>,
    charged: Mutex<BTreeSet<String>>,
}

/// `pay`, which asks `service` to charge under the call's idempotency key, taking `millis`.
fn pay(service: &Arc<Payments>, millis: u64) -> FunctionTool {
    let service = Arc::clone(service);
    FunctionTool::new("pay", "Pay the bill.", move |ctx: RunContext, _a: NoArgs| {
        let service = Arc::clone(&service);
        async move {
            let key = ctx.idempotency_key();
            service.requests.lock().unwrap().push(key.clone());
            tokio::time::sleep(ms(millis)).await;
            service.charged.lock().unwrap().insert(key);
            Ok::<_, ToolError>("paid")
        }
    })
}

/// A session whose `pay` call (`c1`) is running when its process dies: its id, and the store
/// as the crash left it.
async fn crash_while_paying(
    tool: FunctionTool,
    options: SessionOptions,
) -> (String, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone()).options(options);
    let script = vec![call("c1", "pay", "{}"), text("Paying now.")];
    let first = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    first.session.user_turn("pay my bill").await.unwrap();
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallStarted { .. })).await;
    tokio::time::sleep(ms(10)).await; // the body has started
    (id.clone(), crashed(&*store, &id))
}

/// Waits until the session's history holds an output of `call_id`.
pub(crate) async fn answered(session: &SessionHandle, call_id: &str) -> Vec<ChatItem> {
    for _ in 0..1_000 {
        let history = session.history().await.unwrap();
        let has = |i: &ChatItem| i.as_function_call_output().is_some_and(|o| o.call_id == call_id);
        if history.iter().any(has) {
            return history;
        }
        tokio::time::sleep(ms(10)).await;
    }
    panic!("`{call_id}` never came")
}

#[tokio::test(start_paused = true)]
async fn a_rerun_tool_runs_again_with_its_key_and_its_result_reaches_the_model() {
    let service = Arc::new(Payments::default());
    let slow = pay(&service, 60_000).on_interrupted(OnInterrupted::Rerun);
    let (id, store) = crash_while_paying(slow, SessionOptions::default()).await;
    assert_eq!(service.requests.lock().unwrap().len(), 1, "the first body ran");

    let fast = pay(&service, 100).on_interrupted(OnInterrupted::Rerun);
    let agents =
        move |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(fast.clone()));
    let llm = ScriptedLlm::new([text("Your bill is paid.")]).recording();
    let mut builder = Session::builder().llm(llm.clone()).store(store.clone());
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.expect("it resumes");
    let history = answered(&session, "c1_final").await;
    session.wait_for_idle().await.unwrap();

    let seen = drain(&mut events);
    assert_eq!(resumed_calls(&seen), [vec![("c1".to_owned(), "pay:Rerun".to_owned())]]);
    let key = format!("{id}:c1");
    assert_eq!(*service.requests.lock().unwrap(), [key.clone(), key.clone()], "one key, twice");
    assert_eq!(*service.charged.lock().unwrap(), BTreeSet::from([key]), "charged once");

    let shown = show(&history);
    let calls: Vec<&String> = shown.iter().filter(|s| s.contains("#c1")).collect();
    assert_eq!(
        calls,
        [
            "call(pay#c1 {})",
            "out(#c1,\"`pay` was interrupted by a restart: it is running again, and its result \
             will follow.\",ok,rr=F)",
            "call(pay#c1_final {})",
            "out(#c1_final,\"paid\",ok,rr=T)",
        ],
        "{shown:?}"
    );
    // The result is a deferred reply: the model reads it and answers.
    let request = llm.requests().pop().expect("the deferred reply's request");
    let read = request.items.iter().filter_map(ChatItem::as_function_call_output);
    assert!(read.clone().any(|o| o.call_id == "c1_final" && o.output == "paid"), "{request:?}");
    assert!(message_texts(&session).await.contains(&"Your bill is paid.".to_owned()));

    // The call ends once, in the journal too: a second crash finds nothing in doubt.
    stored(&*store, &id, |r| matches!(r, Record::CallEnded { call_id } if call_id == "c1")).await;
    let mut builder = Session::builder().llm(ScriptedLlm::new([])).store(crashed(&*store, &id));
    let mut events = builder.subscribe();
    let agents = |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(pay(&service, 1)));
    builder.resume(&id, agents).await.unwrap().wait_for_idle().await.unwrap();
    assert_eq!(resumed_calls(&drain(&mut events)), [Vec::<(String, String)>::new()]);
}

/// The session's messages, in order.
async fn message_texts(session: &SessionHandle) -> Vec<String> {
    let history = session.history().await.unwrap();
    history.iter().filter_map(|i| i.as_message().map(|m| m.text.clone())).collect()
}

#[tokio::test(start_paused = true)]
async fn an_ask_call_runs_again_only_once_the_host_approves() {
    // The session's default, inherited by a tool that sets none.
    let options = SessionOptions { on_interrupted: OnInterrupted::Ask, ..Default::default() };
    let service = Arc::new(Payments::default());
    let (id, store) = crash_while_paying(pay(&service, 60_000), options.clone()).await;

    let agents =
        |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(pay(&service, 100)));
    let llm = ScriptedLlm::new([text("Paid.")]);
    let mut builder = Session::builder().llm(llm).store(store).options(options);
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.expect("it resumes");
    tokio::time::sleep(ms(1_000)).await;
    let seen = drain(&mut events);
    assert_eq!(resumed_calls(&seen), [vec![("c1".to_owned(), "pay:Asked".to_owned())]]);
    let asked = seen.iter().any(
        |e| matches!(&e.kind, EventKind::ToolApprovalRequested { call_id, .. } if call_id == "c1"),
    );
    assert!(asked, "{seen:?}");
    assert_eq!(service.requests.lock().unwrap().len(), 1, "nothing ran before the answer");

    session.approve("c1").await.expect("the call waits for approval");
    let history = answered(&session, "c1_final").await;
    assert_eq!(service.requests.lock().unwrap().len(), 2, "approved, it ran again");
    assert!(show(&history).contains(&"out(#c1_final,\"paid\",ok,rr=T)".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_rejected_ask_call_ends_rejected_and_never_runs_again() {
    let service = Arc::new(Payments::default());
    let tool = pay(&service, 60_000).on_interrupted(OnInterrupted::Ask);
    let (id, store) = crash_while_paying(tool, SessionOptions::default()).await;

    let again = pay(&service, 100).on_interrupted(OnInterrupted::Ask);
    let agents =
        move |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(again.clone()));
    let mut builder = Session::builder().llm(ScriptedLlm::new([text("Not paid.")])).store(store);
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.unwrap();
    tokio::time::sleep(ms(100)).await;
    session.reject("c1", "the user paid by phone").await.expect("it waits for approval");
    let history = answered(&session, "c1_final").await;
    session.wait_for_idle().await.unwrap();
    assert_eq!(service.requests.lock().unwrap().len(), 1, "rejected, it never ran again");
    let last = history.iter().filter_map(ChatItem::as_function_call_output).next_back().unwrap();
    assert_eq!(last.call_id, "c1_final");
    assert!(last.output.contains("the user paid by phone"), "{last:?}");
    let ended = tool_events(&drain(&mut events));
    assert!(ended.iter().any(|e| e.starts_with("E(c1_final,rejected")), "{ended:?}");
}

#[tokio::test(start_paused = true)]
async fn a_rerun_call_answered_before_the_crash_numbers_its_updates_after_the_old_ones() {
    let first_run = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let track = {
        let first_run = Arc::clone(&first_run);
        FunctionTool::new("track", "Track a parcel.", move |ctx: RunContext, _a: NoArgs| {
            let first = first_run.swap(false, std::sync::atomic::Ordering::SeqCst);
            async move {
                ctx.update("looking it up").await?;
                if first {
                    ctx.update("still looking").await?;
                    tokio::time::sleep(ms(60_000)).await;
                }
                tokio::time::sleep(ms(100)).await;
                Ok::<_, ToolError>("delivered")
            }
        })
        .on_interrupted(OnInterrupted::Rerun)
    };
    let store = Arc::new(MemoryStore::new());
    let script = vec![call("c1", "track", "{}"), text("Looking."), text("Still."), text("ok")];
    let builder = Session::builder().store(store.clone());
    let first =
        Harness::start_with(builder, Agent::new("A", "inst").tool(track.clone()), script).await;
    first.turn("where is my parcel?").await;
    let id = first.session.id().to_owned();
    answered(&first.session, "c1_update_1").await;
    stored(&*store, &id, |r| match r {
        Record::ItemsCommitted { items, .. } => items
            .iter()
            .any(|i| i.as_function_call_output().is_some_and(|o| o.call_id == "c1_update_1")),
        _ => false,
    })
    .await;

    let agents =
        move |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(track.clone()));
    let llm = ScriptedLlm::new([text("It is on its way."), text("Delivered!")]);
    let builder = Session::builder().llm(llm).store(crashed(&*store, &id));
    let session = builder.resume(&id, agents).await.unwrap();
    let history = answered(&session, "c1_final").await;
    let ids: Vec<&str> = history
        .iter()
        .filter_map(ChatItem::as_function_call_output)
        .map(|o| o.call_id.as_str())
        .collect();
    // Its first answer and update from before the crash, then the run's, numbered on.
    assert_eq!(ids, ["c1", "c1_update_1", "c1_update_2", "c1_final"], "{:?}", show(&history));
}

/// `refund`, counting its bodies, taking `millis`.
pub(crate) fn refund(runs: &Arc<std::sync::atomic::AtomicU32>, millis: u64) -> FunctionTool {
    let runs = Arc::clone(runs);
    FunctionTool::new("refund", "Refund an order.", move |_ctx: RunContext, _a: NoArgs| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(ms(millis)).await;
            Ok::<_, ToolError>("refunded")
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_approval_at_the_crash_is_asked_again_and_runs_once() {
    use std::sync::atomic::AtomicU32;
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let tool = refund(&runs, 100).requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Waiting for approval.")];
    let mut first = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    first.turn("refund my order").await;
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallWaiting { .. })).await;
    assert!(
        first.events().iter().any(|e| matches!(e.kind, EventKind::ToolApprovalRequested { .. }))
    );

    let agents = |name: &str| {
        (name == "A").then(|| Agent::new("A", "inst").tool(refund(&runs, 100).requires_approval()))
    };
    let mut builder =
        Session::builder().llm(ScriptedLlm::new([text("Refunded.")])).store(crashed(&*store, &id));
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.unwrap();
    asked_again_then_run_once(&session, &mut events, &runs).await;
}

/// After a resume that found `c1` of `refund` waiting for approval: it is `not_started`,
/// asked again, and runs once approved; the history it ends with.
pub(crate) async fn asked_again_then_run_once(
    session: &SessionHandle,
    events: &mut EventStream,
    runs: &std::sync::atomic::AtomicU32,
) -> Vec<String> {
    use std::sync::atomic::Ordering;
    tokio::time::sleep(ms(10)).await;
    let seen = drain(events);
    assert_eq!(resumed_calls(&seen), [vec![("c1".to_owned(), "refund:NotStarted".to_owned())]]);
    let asked = seen.iter().any(
        |e| matches!(&e.kind, EventKind::ToolApprovalRequested { call_id, .. } if call_id == "c1"),
    );
    assert!(asked, "asked again: {seen:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    session.approve("c1").await.expect("it waits for approval again");
    let history = answered(session, "c1_final").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "it ran once, after the approval");
    let shown = show(&history);
    assert!(shown.contains(&"out(#c1_final,\"refunded\",ok,rr=T)".to_owned()), "{shown:?}");
    shown
}

#[tokio::test(start_paused = true)]
async fn a_queued_call_at_the_crash_runs_after_the_resume_and_the_running_one_fails() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let one_at_a_time = |millis| refund(&runs, millis).max_concurrent(1);
    let script = vec![
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "refund", "{}"),
            ScriptedCall::new("c2", "refund", "{}"),
        ]),
        text("Refunding both."),
    ];
    let first =
        Harness::start_with(builder, Agent::new("A", "inst").tool(one_at_a_time(60_000)), script)
            .await;
    first.session.user_turn("refund both orders").await.unwrap();
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallWaiting { call_id } if call_id == "c2")).await;
    tokio::time::sleep(ms(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "c1 runs, c2 waits for its place");

    let agents =
        |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(one_at_a_time(100)));
    let llm = ScriptedLlm::new([text("One refund may not have gone through."), text("ok")]);
    let mut builder = Session::builder().llm(llm).store(crashed(&*store, &id));
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.unwrap();
    let history = answered(&session, "c2_final").await;
    let seen = drain(&mut events);
    assert_eq!(
        resumed_calls(&seen),
        [vec![
            ("c1".to_owned(), "refund:Failed".to_owned()),
            ("c2".to_owned(), "refund:NotStarted".to_owned())
        ]]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2, "c2's body ran once, after the resume");
    let shown = show(&history);
    assert!(shown.contains(&"out(#c2_final,\"refunded\",ok,rr=T)".to_owned()), "{shown:?}");
}

// The real clock: tokio's paused clock stands still while a blocking write runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_only_once_its_let_through_is_on_disk() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let store =
        Arc::new(crate::durable::Disk::slow(|r| matches!(r, Record::CallLetThrough { .. })));
    let runs = Arc::new(AtomicU32::new(0));
    let builder = Session::builder().store(store.clone());
    let tool = refund(&runs, 1).requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Waiting."), text("Done.")];
    let h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.turn("refund it").await;
    h.session.approve("c1").await.expect("it waits for approval");
    store.tap.wait_until_holding().await;
    // An ungated body would have run within microseconds.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(runs.load(SeqCst), 0, "approved, the body waits for its let-through on disk");
    store.tap.released.store(true, SeqCst);
    answered(&h.session, "c1_final").await;
    assert_eq!(runs.load(SeqCst), 1, "then it runs");
}

/// `pay` (rerun, keyed: it reports, then charges, then answers) and `track` (fail, background).
fn paying_agent(service: &Arc<Payments>) -> Agent {
    let service = Arc::clone(service);
    let pay = FunctionTool::new("pay", "Pay.", move |ctx: RunContext, _a: NoArgs| {
        let service = Arc::clone(&service);
        async move {
            let key = ctx.idempotency_key();
            service.requests.lock().unwrap().push(key.clone());
            ctx.update("paying").await?;
            tokio::time::sleep(ms(200)).await;
            service.charged.lock().unwrap().insert(key);
            tokio::time::sleep(ms(50)).await;
            Ok::<_, ToolError>("paid")
        }
    })
    .on_interrupted(OnInterrupted::Rerun);
    Agent::new("A", "inst").tool(pay).tool(sleeper("track", 300, "on its way"))
}

/// A crash after any append, resumed: every call ends exactly once, and every payment the
/// conversation shows was charged exactly once, however often its body ran.
#[tokio::test(start_paused = true)]
async fn after_a_crash_at_any_point_each_payment_is_charged_once() {
    let service = Arc::new(Payments::default());
    // What was on disk, and what the payment service had done, after every append: each a
    // point a crash could have left.
    let points = Arc::new(Mutex::new(Vec::new()));
    let (kept, charging) = (Arc::clone(&points), Arc::clone(&service));
    let store = Arc::new(crate::durable::Tapped::new(move |on_disk| {
        let charged = charging.charged.lock().unwrap().clone();
        kept.lock().unwrap().push((on_disk, charged));
    }));
    let script = vec![
        call("c1", "pay", "{}"),
        text("Paying."),
        text("Paid."),
        call("c2", "track", "{}"),
        text("Tracked."),
    ];
    let builder = Session::builder().store(store.clone());
    let h = Harness::start_with(builder, paying_agent(&service), script).await;
    h.turn("pay my bill").await;
    tokio::time::sleep(ms(1_000)).await;
    h.turn("and track my parcel").await;
    let id = h.session.id().to_owned();
    h.session.suspend().await.unwrap();
    drop(h);
    let points = points.lock().unwrap().clone();
    assert!(points.len() >= 10, "{} crash points", points.len());

    let mut reruns = 0;
    for (point, (on_disk, charged)) in points.iter().enumerate().skip(1) {
        let after = Arc::new(Payments::default());
        *after.charged.lock().unwrap() = charged.clone();
        let crashed = crate::durable::journal_of(&id, on_disk);
        let replies: Vec<_> = (0..6).map(|_| text("Resumed.")).collect();
        let builder = Session::builder().llm(ScriptedLlm::new(replies)).store(crashed);
        let agents = |name: &str| (name == "A").then(|| paying_agent(&after));
        let resumed = builder.resume(&id, agents).await.unwrap();
        tokio::time::sleep(ms(1_000)).await;
        resumed.wait_for_idle().await.unwrap();
        let history = resumed.history().await.unwrap();
        let outputs = |call_id: &str| crate::durable::outputs_of(&history, call_id);
        for call in history.iter().filter_map(ChatItem::as_function_call) {
            if call.call_id.contains('_') {
                continue; // a pair of an update or a final result
            }
            let (answered, finals) =
                (outputs(&call.call_id), outputs(&format!("{}_final", call.call_id)));
            assert_eq!(
                answered,
                1,
                "at {point}: {} answered once: {:?}",
                call.call_id,
                show(&history)
            );
            assert!(finals <= 1, "at {point}: {} ends once: {:?}", call.call_id, show(&history));
            if call.name == "pay" {
                let key = format!("{id}:{}", call.call_id);
                assert!(
                    after.charged.lock().unwrap().contains(&key),
                    "at {point}: the payment the conversation shows was charged: {:?}",
                    show(&history)
                );
                assert_eq!(finals, 1, "at {point}: its result reached the model");
                reruns += usize::from(!after.requests.lock().unwrap().is_empty());
            }
        }
        resumed.close().await.unwrap();
    }
    assert!(reruns > 0, "some crash point left the payment running");
}

/// A background lookup on a session-scoped toolset (it survives the handoff) and a transfer
/// from A to B.
fn transferring() -> (SessionBuilder, Agent) {
    let lookup =
        FunctionTool::new("long_lookup", "Look up.", |ctx: RunContext, _a: NoArgs| async move {
            ctx.update("lookup started").await?;
            tokio::time::sleep(ms(500)).await;
            Ok::<_, ToolError>("lookup done")
        })
        .on_interrupted(OnInterrupted::Rerun);
    let transfer =
        FunctionTool::new("transfer", "Transfer.", |_ctx: RunContext, _a: NoArgs| async move {
            Ok::<_, ToolError>(colloquy::agent::Handoff::to(Agent::new("B", "billing")))
        });
    let builder = Session::builder().toolset(Toolset::new_async("shared").tool(lookup));
    (builder, Agent::new("A", "inst").tool(transfer))
}

/// A crash after any append of a conversation that hands off while a session-scoped call
/// runs: each resumes on the agent the journal names, and every call ends exactly once.
#[tokio::test(start_paused = true)]
async fn after_a_crash_at_any_point_of_a_handoff_every_call_ends_once() {
    let points = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&points);
    let store =
        Arc::new(crate::durable::Tapped::new(move |on_disk| kept.lock().unwrap().push(on_disk)));
    let (builder, a) = transferring();
    let script = vec![
        call("l", "long_lookup", "{}"),
        text("looking"),
        call("t", "transfer", "{}"),
        text("B reports"),
    ];
    let h = Harness::start_with(builder.store(store.clone()), a, script).await;
    h.turn("look it up").await;
    tokio::time::sleep(ms(30)).await;
    h.turn("transfer").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let id = h.session.id().to_owned();
    h.session.suspend().await.unwrap();
    drop(h);
    let points = points.lock().unwrap().clone();
    assert!(points.len() >= 8, "{} crash points", points.len());

    let mut on_b = 0;
    for (point, on_disk) in points.iter().enumerate().skip(1) {
        let journal = colloquy::store::Journal::fold(on_disk);
        let (builder, _) = transferring();
        let replies: Vec<_> = (0..6).map(|_| text("Resumed.")).collect();
        let builder =
            builder.llm(ScriptedLlm::new(replies)).store(crate::durable::journal_of(&id, on_disk));
        let agents = |name: &str| match name {
            "A" => Some(transferring().1),
            "B" => Some(Agent::new("B", "billing")),
            _ => None,
        };
        let resumed = builder.resume(&id, agents).await.unwrap();
        tokio::time::sleep(ms(1_000)).await;
        resumed.wait_for_quiet().await.unwrap();
        resumed.wait_for_idle().await.unwrap();
        let snapshot = resumed.inspect().await.unwrap();
        assert_eq!(
            Some(snapshot.agent.clone()),
            journal.agent,
            "at {point}: on the agent it was on"
        );
        on_b += usize::from(snapshot.agent == "B");
        let history = resumed.history().await.unwrap();
        for call in history.iter().filter_map(ChatItem::as_function_call) {
            if call.call_id.contains('_') {
                continue;
            }
            let outputs = |id: &str| crate::durable::outputs_of(&history, id);
            assert_eq!(
                outputs(&call.call_id),
                1,
                "at {point}: {} answered once: {:?}",
                call.call_id,
                show(&history)
            );
            assert!(
                outputs(&format!("{}_final", call.call_id)) <= 1,
                "at {point}: {} ends once",
                call.call_id
            );
        }
        resumed.close().await.unwrap();
    }
    assert!(on_b > 0, "some crash point came after the handoff");
}

/// Holds the append with a call's start until `start` opens, and the one with its
/// let-through until `let_through` does.
struct TwoGates {
    start: std::sync::atomic::AtomicBool,
    let_through: std::sync::atomic::AtomicBool,
}

impl crate::durable::Tap for TwoGates {
    fn append(
        &self,
        inner: &MemoryStore,
        lease: &colloquy::store::Lease,
        entries: &[colloquy::store::Entry],
    ) -> Result<(), colloquy::store::StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        let holds = |gate: &std::sync::atomic::AtomicBool, r: fn(&Record) -> bool| {
            if entries.iter().any(|e| r(&e.record)) {
                while !gate.load(SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        holds(&self.start, |r| matches!(r, Record::CallStarted { .. }));
        holds(&self.let_through, |r| matches!(r, Record::CallLetThrough { .. }));
        inner.append(lease, entries)
    }
}

// The real clock: tokio's paused clock stands still while a blocking write runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_approved_before_its_start_is_on_disk_waits_for_its_let_through() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let gates = TwoGates { start: false.into(), let_through: false.into() };
    let store = Arc::new(crate::durable::Tapped::new(gates));
    let runs = Arc::new(AtomicU32::new(0));
    let builder = Session::builder().store(store.clone());
    let tool = refund(&runs, 1).requires_approval();
    let script = vec![call("c1", "refund", "{}"), text("Waiting."), text("Done.")];
    let mut h = Harness::start_with(builder, Agent::new("A", "inst").tool(tool), script).await;
    h.session.user_turn("refund it").await.unwrap();
    for _ in 0..2_000 {
        if h.events().iter().any(|e| matches!(e.kind, EventKind::ToolApprovalRequested { .. })) {
            break;
        }
        tokio::time::sleep(ms(1)).await;
    }
    // Approved while its start is still on its way to the disk.
    h.session.approve("c1").await.expect("it waits for approval");
    store.tap.start.store(true, SeqCst);
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        runs.load(SeqCst),
        0,
        "the start on disk does not let it through: its let-through does"
    );
    store.tap.let_through.store(true, SeqCst);
    answered(&h.session, "c1_final").await;
    assert_eq!(runs.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_ask_call_still_waiting_at_a_second_crash_is_asked_again() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let runs = Arc::new(AtomicU32::new(0));
    let asking = |millis| refund(&runs, millis).on_interrupted(OnInterrupted::Ask);
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refund", "{}"), text("Refunding.")];
    let first =
        Harness::start_with(builder, Agent::new("A", "inst").tool(asking(60_000)), script).await;
    first.session.user_turn("refund it").await.unwrap();
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallStarted { .. })).await;
    tokio::time::sleep(ms(10)).await;

    let agents = |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(asking(100)));
    let once = crashed(&*store, &id);
    let builder = Session::builder().llm(ScriptedLlm::new([])).store(once.clone());
    let second = builder.resume(&id, agents).await.unwrap();
    stored(&*once, &id, |r| matches!(r, Record::CallWaiting { .. })).await;
    drop(second); // the process dies again, the host not having answered

    let mut builder =
        Session::builder().llm(ScriptedLlm::new([text("Refunded.")])).store(crashed(&*once, &id));
    let mut events = builder.subscribe();
    let third = builder.resume(&id, agents).await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let seen = drain(&mut events);
    let asked = seen.iter().any(
        |e| matches!(&e.kind, EventKind::ToolApprovalRequested { call_id, .. } if call_id == "c1"),
    );
    assert!(asked, "asked again: {seen:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the first body ran, before the first crash");
    third.approve("c1").await.expect("it waits for approval");
    answered(&third, "c1_final").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_result_is_still_remembered_after_a_resume() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let runs = Arc::new(AtomicU32::new(0));
    let remembering = || refund(&runs, 10).idempotent(std::time::Duration::from_secs(600));
    let store = Arc::new(MemoryStore::new());
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refund", "{}"), text("Refunded.")];
    let first =
        Harness::start_with(builder, Agent::new("A", "inst").tool(remembering()), script).await;
    first.turn("refund it").await;
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::ResultRemembered { .. })).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let agents = |name: &str| (name == "A").then(|| Agent::new("A", "inst").tool(remembering()));
    let llm = ScriptedLlm::new([call("c2", "refund", "{}"), text("Refunded already.")]);
    let mut builder = Session::builder().llm(llm).store(crashed(&*store, &id));
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.unwrap();
    session.user_turn("refund it again").await.unwrap();
    session.wait_for_idle().await.unwrap();
    let cached = drain(&mut events).iter().any(|e| {
        matches!(&e.kind, EventKind::ToolCallEnded { call_id, cached: true, .. } if call_id == "c2")
    });
    assert!(cached, "answered from memory");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body did not run again");
}
