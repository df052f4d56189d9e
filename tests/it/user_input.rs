//! Queued user input (`SessionHandle::user_input`, docs/decisions.md#queued-user-input): a user
//! message that waits for the current speech instead of interrupting it, then gets its own
//! reply; what becomes of it when it is interrupted, handed off or closed while it waits. On
//! the paused clock.

use crate::background::{c52_session, rc};
use crate::common::*;
use colloquy::events::SpeechSource;
use colloquy::llm::RequestKind;
use colloquy::prelude::*;

/// `created(id)` for the replies to user input, `done(id,interrupted)` for every speech, in
/// order.
fn speeches(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SpeechCreated { speech_id, source: SpeechSource::UserTurn } => {
                Some(format!("created({speech_id})"))
            }
            EventKind::SpeechDone { speech_id, interrupted } => {
                Some(format!("done({speech_id},{interrupted})"))
            }
            _ => None,
        })
        .collect()
}

/// The agent `A` answering `first` slowly (500 ms), then `rest` at once.
async fn slow_first(first: &str, rest: &[&str]) -> Harness {
    let mut script = vec![text(first).with_latency(ms(500))];
    script.extend(rest.iter().map(|t| text(t)));
    Harness::start(agent(), script).await
}

#[tokio::test(start_paused = true)]
async fn c52_a_queued_input_waits_for_the_slow_tool_reply_which_plays_out() {
    let mut h = c52_session().await;
    h.session.user_input("go").await.unwrap();
    tokio::time::sleep(ms(300)).await;
    h.session.user_input("status?").await.unwrap();
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        speeches(h.events())[..4],
        ["created(s1)", "created(s2)", "done(s1,false)", "done(s2,false)"]
    );
    let ctx = h.ctx("A").await;
    let tail: Vec<&str> = ctx[5..].iter().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "asst(tool-reply)",
            "call(slow_a#a_final {})",
            "out(#a_final,\"A done\",ok,rr=T)",
            "call(slow_b#b_final {})",
            "out(#b_final,\"B done\",ok,rr=T)",
            "user(status?)",
            "asst(user-reply)",
            "asst(deferred)",
        ]
    );
    let reqs = h.requests();
    let deferred = reqs.iter().find(|r| r.kind == RequestKind::DeferredReply).unwrap();
    assert_eq!(deferred.instructions.as_deref(), Some(rc(&["a_final", "b_final"]).as_str()));
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn queued_inputs_are_committed_when_their_reply_begins_and_answered_in_order() {
    let mut h = slow_first("first", &["second", "third"]).await;
    h.session.user_input("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("three").await.unwrap();
    // Accepted, not yet committed: the reply before them still plays.
    assert_eq!(h.ctx("A").await, ["user(one)"]);
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(
        h.ctx("A").await,
        ["user(one)", "asst(first)", "user(two)", "asst(second)", "user(three)", "asst(third)"]
    );
    let reqs = h.requests();
    assert_eq!(show(&reqs[1].items), ["user(one)", "asst(first)", "user(two)"]);
    assert_eq!(reqs[1].kind, RequestKind::UserTurn);
    assert_eq!(show(&reqs[2].items).last().unwrap(), "user(three)");
    let all = speeches(h.events());
    assert_eq!(
        all,
        [
            "created(s1)",
            "created(s2)",
            "created(s3)",
            "done(s1,false)",
            "done(s2,false)",
            "done(s3,false)"
        ]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_drops_a_queued_reply_but_keeps_its_message() {
    let mut h = slow_first("never", &["after"]).await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    h.session.interrupt().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["user(one)", "user(two)"]);
    assert_eq!(
        speeches(h.events()),
        ["created(s1)", "created(s2)", "done(s2,true)", "done(s1,true)"]
    );
    // The next reply sees what the user said meanwhile.
    h.turn("three").await;
    assert_eq!(show(&h.requests()[1].items), ["user(one)", "user(two)", "user(three)"]);
    h.close().await;
}

/// `one` is answered slowly (`never` comes); `two` and `three` wait behind it.
async fn two_inputs_behind_a_turn() -> Harness {
    let h = slow_first("never", &["answer"]).await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    h.session.user_input("three").await.unwrap();
    h
}

#[tokio::test(start_paused = true)]
async fn the_user_speaking_drops_queued_replies_and_keeps_their_messages() {
    let h = two_inputs_behind_a_turn().await;
    h.session.set_user_speaking(true).unwrap();
    h.session.set_user_speaking(false).unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["user(one)", "user(two)", "user(three)"]);
    h.turn("four").await;
    assert_eq!(
        h.ctx("A").await,
        ["user(one)", "user(two)", "user(three)", "user(four)", "asst(answer)"]
    );
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_user_turn_commits_the_inputs_it_drops_before_its_own_message() {
    let h = two_inputs_behind_a_turn().await;
    h.turn("four").await;
    let expected = ["user(one)", "user(two)", "user(three)", "user(four)", "asst(answer)"];
    assert_eq!(h.ctx("A").await, expected);
    assert_eq!(show(&h.requests()[1].items), expected[..4]);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_input_during_a_handoff_is_answered_by_the_new_agent() {
    let h =
        Harness::start(agent(), vec![text("from A").with_latency(ms(500)), text("from B")]).await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.update_agent(Agent::new("B", "inst b")).await.unwrap();
    h.session.user_input("two").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    assert_eq!(h.ctx("A").await, ["user(one)", "asst(from A)"]);
    assert_eq!(h.ctx("B").await, ["user(two)", "asst(from B)"]);
    let reqs = h.requests();
    assert_eq!(reqs[1].agent, "B");
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_input_queued_before_a_handoff_is_answered_by_the_old_agent() {
    let h = Harness::start(agent(), vec![text("from A").with_latency(ms(500)), text("two?")]).await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    h.session.update_agent(Agent::new("B", "inst b")).await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    // The drain lets the old agent's queue run out: A answers before B enters.
    assert_eq!(h.ctx("A").await, ["user(one)", "asst(from A)", "user(two)", "asst(two?)"]);
    assert_eq!(h.ctx("B").await, Vec::<String>::new());
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_close_keeps_a_queued_message_and_refuses_later_inputs() {
    let mut h = slow_first("never", &[]).await;
    h.session.user_turn("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    let session = h.session.clone();
    session.close().await.unwrap();
    let closed = session.closed_session().expect("closed");
    assert_eq!(show(&closed.history.to_items()[1..]), ["user(one)", "user(two)"]);
    assert_eq!(session.user_input("three").await, Err(SessionError::Closed));
    assert!(speeches(h.events()).contains(&"done(s2,true)".to_string()));
}

#[tokio::test(start_paused = true)]
async fn a_queued_input_starts_its_turns_tool_budget_when_its_reply_begins() {
    let builder = Session::builder().max_tool_calls_per_turn(1);
    let script = vec![
        call("c1", "t", "{}"),
        text("r1").with_latency(ms(300)),
        call("c2", "t", "{}"),
        text("r2"),
    ];
    let mut h = Harness::start_with(builder, agent().tool(sleeper("t", 0, "ok")), script).await;
    h.session.user_input("one").await.unwrap();
    tokio::time::sleep(ms(100)).await;
    h.session.user_input("two").await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let reqs = h.requests();
    assert_eq!(choice(&reqs[1]), "none", "the first turn's budget is spent");
    assert_eq!(choice(&reqs[2]), "unset", "the second turn starts afresh");
    assert_eq!(h.tool_events().iter().filter(|e| e.starts_with("E(")).count(), 2);
    h.close().await;
}
