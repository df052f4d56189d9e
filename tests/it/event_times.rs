//! Event times never go backwards within a session (docs/decisions.md#event-times),
//! even on the real clock where the actors that stamp events run on other threads than the
//! Session that orders them.

use std::time::Duration;

use crate::common::*;
use colloquy::events::SessionEvent;
use colloquy::prelude::*;

/// Reports once, then returns: a call that stamps events from its Toolset while the Session is
/// busy with other sessions' work on the other thread.
fn quick(name: &'static str) -> FunctionTool {
    FunctionTool::new(name, "Quick.", |ctx: RunContext, _a: NoArgs| async move {
        ctx.update("on it").await?;
        tokio::task::yield_now().await;
        Ok::<_, ToolError>("done")
    })
}

async fn one_session(turns: usize) -> Vec<SessionEvent> {
    let llm =
        ScriptedLlm::new(Vec::<ScriptedResponse>::new()).with_fallback(|i, request| match request
            .kind
        {
            colloquy::llm::RequestKind::UserTurn => ScriptedResponse::calls(
                (0..4).map(|n| ScriptedCall::new(format!("c{i}_{n}"), ["a", "b"][n % 2], "{}")),
            ),
            _ => ScriptedResponse::text("ok"),
        });
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(agent().tool(quick("a")).tool(quick("b"))).await.unwrap();
    for turn in 0..turns {
        session.user_turn(format!("turn {turn}")).await.unwrap();
        session.wait_for_idle().await.unwrap();
    }
    session.close().await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = events.recv().await {
        seen.push(event);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_times_never_go_backwards_on_the_real_clock() {
    let sessions = (0..40).map(|_| tokio::spawn(one_session(15)));
    let all =
        tokio::time::timeout(Duration::from_secs(60), futures_util::future::join_all(sessions))
            .await
            .expect("the sessions finish");
    for (i, events) in all.into_iter().enumerate() {
        let events = events.expect("the session ran");
        assert!(events.len() > 100, "session {i} ran its turns");
        for pair in events.windows(2) {
            assert!(
                pair[1].at_ms >= pair[0].at_ms,
                "session {i}: {:?} at {} ms came after {:?} at {} ms",
                pair[1].kind,
                pair[1].at_ms,
                pair[0].kind,
                pair[0].at_ms
            );
        }
    }
}
