//! A suspend leaves to the resume the calls whose bodies had not begun
//! (docs/durability.md#suspend): a call waiting for the host's approval is asked again after
//! the resume, and runs once.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use crate::common::*;
use crate::durable::stored;
use crate::interrupted::{asked_again_then_run_once, refund};
use colloquy::prelude::*;
use colloquy::store::{MemoryStore, Record, SessionStore as _};

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_approval_at_a_suspend_is_asked_again_after_the_resume() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = Arc::new(MemoryStore::new());
    let agent = || Agent::new("A", "inst").tool(refund(&runs, 100).requires_approval());
    let builder = Session::builder().store(store.clone());
    let script = vec![call("c1", "refund", "{}"), text("Waiting for approval.")];
    let mut first = Harness::start_with(builder, agent(), script).await;
    first.turn("refund my order").await;
    let id = first.session.id().to_owned();
    stored(&*store, &id, |r| matches!(r, Record::CallWaiting { .. })).await;

    // Suspended here (a server's idle sessions, a deploy): the drain ends the call in this
    // process, and the journal leaves it waiting.
    first.session.suspend().await.unwrap();
    let ended_here = first
        .events()
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ToolCallEnded { call_id, .. } if call_id == "c1"));
    assert!(ended_here, "{:?}", first.events());
    let entries = store.load(&id).unwrap();
    let ends = entries.iter().filter(|e| matches!(&e.record, Record::CallEnded { .. })).count();
    assert_eq!(ends, 0, "no end of `c1` in the journal: {entries:?}");

    let agents = |name: &str| (name == "A").then(agent);
    let llm = ScriptedLlm::new([text("Refunded.")]);
    let mut builder = Session::builder().llm(llm).store(store.clone());
    let mut events = builder.subscribe();
    let session = builder.resume(&id, agents).await.unwrap();
    let shown = asked_again_then_run_once(&session, &mut events, &runs).await;
    let rejected = shown.iter().any(|s| s.contains("#c1,") && s.contains("ERR"));
    assert!(!rejected, "the model never reads the suspend's rejection: {shown:?}");
}
