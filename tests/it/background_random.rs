//! A seeded random test (seed printed; set COLLOQUY_SEED to replay): 50 background tools post
//! updates at random times across 5 user turns while the user talks now and then. No update or
//! result is lost, every pair gets exactly one deferred reply, and no deferred reply is
//! admitted while the user is speaking.

use std::collections::BTreeMap;
use std::time::Duration;

use colloquy::events::{ReplyStatus, SpeechSource};
use colloquy::llm::RequestKind;
use colloquy::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;

/// xorshift64*: small, seedable, good enough to shuffle timings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Deserialize, JsonSchema)]
struct Plan {
    /// Sleeps in ms before each update after the first, then before the result.
    sleeps: Vec<u64>,
}

fn worker() -> FunctionTool {
    FunctionTool::new(
        "worker",
        "Works in the background.",
        |ctx: RunContext, plan: Plan| async move {
            ctx.update("started").await?;
            let (last, updates) =
                plan.sleeps.split_last().ok_or_else(|| ToolError::new("empty plan"))?;
            for (i, ms) in updates.iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                ctx.update(format!("step {}", i + 1)).await?;
            }
            tokio::time::sleep(Duration::from_millis(*last)).await;
            Ok::<_, ToolError>(format!("{} done", ctx.call_id()))
        },
    )
}

#[tokio::test(start_paused = true)]
async fn random_updates_across_turns_lose_nothing_and_never_talk_over_the_user() {
    let seed: u64 = std::env::var("COLLOQUY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_C011_0901);
    println!("COLLOQUY_SEED={seed}");
    let mut rng = Rng(seed | 1);
    // Ten calls per user turn, each with 0-2 later updates at random times.
    let mut plans: Vec<Vec<String>> = Vec::new();
    for turn in 0..5 {
        let mut calls = Vec::new();
        for i in 0..10 {
            let n = 1 + rng.below(3) as usize;
            let sleeps: Vec<u64> = (0..n).map(|_| 20 + rng.below(700)).collect();
            calls.push(
                format!(r#"{{"sleeps":{sleeps:?}}}"#).replace(' ', "") + &format!("#t{turn}c{i}"),
            );
        }
        plans.push(calls);
    }
    let turns = plans.clone();
    let llm = ScriptedLlm::new([]).with_fallback(move |_, request| {
        let last_user =
            request.items.items().last().and_then(|i| i.as_message()).map(|m| m.text.clone());
        match (request.kind, last_user) {
            (RequestKind::UserTurn, Some(text)) => {
                let turn: usize = text.trim_start_matches("turn ").parse().unwrap_or(0);
                let calls = turns[turn].iter().map(|spec| {
                    let (args, id) = spec.split_once('#').unwrap();
                    ScriptedCall::new(id, "worker", args)
                });
                ScriptedResponse::calls(calls)
            }
            _ => ScriptedResponse::text("noted"),
        }
    });
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("A", "inst").tool(worker())).await.unwrap();
    for turn in 0..5 {
        session.user_turn(format!("turn {turn}")).await.unwrap();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
            session.set_user_speaking(true).unwrap();
            tokio::time::sleep(Duration::from_millis(10 + rng.below(200))).await;
            session.set_user_speaking(false).unwrap();
        }
    }
    session.wait_for_quiet().await.unwrap();
    session.wait_for_idle().await.unwrap();
    let history = session.history().await.unwrap();
    session.close().await.unwrap();

    let mut seen = Vec::new();
    while let Some(e) = events.recv().await {
        seen.push(e);
    }
    // Every later update and every result of every started call became a pair in history.
    // (A reply interrupted while its response streamed never runs its calls.)
    let started: Vec<&str> = seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert!(started.len() >= 20, "most calls ran ({} of 50)", started.len());
    let pairs: Vec<&str> = history
        .iter()
        .filter_map(|i| i.as_function_call_output())
        .map(|o| o.call_id.as_str())
        .filter(|id| id.contains("_update_") || id.ends_with("_final"))
        .collect();
    let mut expected_pairs = 0;
    for spec in plans.iter().flatten() {
        let (args, id) = spec.split_once('#').unwrap();
        if !started.contains(&id) {
            continue;
        }
        let n = args.matches(',').count() + 1; // sleeps: n-1 later updates, then the result
        expected_pairs += n;
        assert!(pairs.contains(&format!("{id}_final").as_str()), "{id}_final missing");
        for k in 1..n {
            assert!(
                pairs.contains(&format!("{id}_update_{k}").as_str()),
                "{id}_update_{k} missing"
            );
        }
    }
    assert_eq!(pairs.len(), expected_pairs);
    // Every pair was scheduled exactly once, and every scheduled reply ended.
    let mut scheduled: BTreeMap<String, usize> = BTreeMap::new();
    let mut ended = 0;
    let mut schedules = 0;
    let mut user_speaking = false;
    for e in &seen {
        match &e.kind {
            EventKind::UserState { state } => user_speaking = *state == UserState::Speaking,
            EventKind::SpeechCreated { source: SpeechSource::DeferredReply, .. } => {
                assert!(
                    !user_speaking,
                    "a deferred reply started while the user spoke (at {} ms)",
                    e.at_ms
                );
            }
            EventKind::ToolReplyUpdated { update_ids, status, .. } => match status {
                ReplyStatus::Scheduled => {
                    schedules += 1;
                    for id in update_ids {
                        *scheduled.entry(id.clone()).or_default() += 1;
                    }
                }
                _ => ended += 1,
            },
            _ => {}
        }
    }
    assert_eq!(scheduled.len(), expected_pairs, "every pair got a reply");
    assert!(scheduled.values().all(|n| *n == 1), "no pair was delivered twice");
    assert_eq!(schedules, ended, "every scheduled reply reached a terminal status");
    assert!(schedules < expected_pairs, "some replies coalesced several pairs");
}
