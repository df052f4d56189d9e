//! Micro-benchmarks of the hot path (docs/benchmarks.md): argument parsing and validation,
//! duplicate-key canonicalisation, history insertion, template rendering, and one whole
//! tool-call round trip through the actors (user turn → Activity → Toolset → ToolCall → output →
//! reply); and tool search (BM25 and keyword) over catalogues of 100, 1,000 and 10,000 tools.
//!
//! ```sh
//! cargo bench --bench micro
//! ```

// `criterion_group!` writes public functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use colloquy::chat::{ChatContext, FunctionCallOutput, Message, Timestamp};
use colloquy::prelude::*;
use colloquy::tools::{DuplicateScope, OnDuplicate};
use colloquy_model::args::{parse_arguments, validate_arguments};
use colloquy_model::templates::{Template, update_placeholders};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Flight {
    /// Departure airport.
    origin: String,
    /// Arrival airport.
    destination: String,
    /// Number of passengers.
    passengers: u32,
    /// Cabin class.
    #[serde(default)]
    cabin: Option<String>,
}

const FLIGHT_ARGS: &str =
    r#"{"destination":"Tokyo","origin":"Paris","passengers":"2","cabin":"economy","extra":1}"#;

fn flight_tool() -> FunctionTool {
    FunctionTool::new("book_flight", "Books a flight.", |_ctx: RunContext, f: Flight| async move {
        Ok::<_, ToolError>(format!("{} to {}", f.origin, f.destination))
    })
}

fn arguments(c: &mut Criterion) {
    let tool = flight_tool();
    c.bench_function("args/parse", |b| {
        b.iter(|| parse_arguments("book_flight", black_box(FLIGHT_ARGS)).unwrap());
    });
    let parsed = parse_arguments("book_flight", FLIGHT_ARGS).unwrap();
    c.bench_function("args/validate", |b| {
        b.iter_batched(
            || parsed.value.clone(),
            |args| validate_arguments("book_flight", tool.parameters(), args).unwrap(),
            BatchSize::SmallInput,
        );
    });
}

fn duplicate_keys(c: &mut Criterion) {
    let tool = flight_tool().on_duplicate(OnDuplicate::Reject, DuplicateScope::NameAndArgs);
    let args: Map<String, Value> = parse_arguments("book_flight", FLIGHT_ARGS).unwrap().value;
    c.bench_function("duplicate/name_and_args_key", |b| {
        b.iter(|| tool.duplicate_key(black_box(&args)).unwrap());
    });
}

fn output(i: u64) -> ChatItem {
    ChatItem::FunctionCallOutput(FunctionCallOutput {
        id: format!("item_{i}"),
        call_id: format!("c{i}"),
        name: "book_flight".into(),
        output: "{\"ok\": true}".into(),
        is_error: false,
        reply_required: true,
        created_at: Timestamp::new(i * 1000, i),
    })
}

fn history(c: &mut Criterion) {
    // A conversation of 200 items, then one more at the end (the usual case) or one that a
    // late tool output places 20 items back (the background case).
    let base: ChatContext = {
        let mut ctx = ChatContext::default();
        for i in 0..200 {
            ctx.insert(if i % 2 == 0 {
                output(i)
            } else {
                ChatItem::Message(Message {
                    id: format!("item_{i}"),
                    role: Role::Assistant,
                    text: "Sure, one moment.".into(),
                    interrupted: false,
                    created_at: Timestamp::new(i * 1000, i),
                })
            });
        }
        ctx
    };
    c.bench_function("history/insert_append", |b| {
        b.iter_batched(
            || (base.clone(), output(1000)),
            |(mut ctx, item)| {
                ctx.insert(item);
                ctx
            },
            BatchSize::SmallInput,
        );
    });
    c.bench_function("history/insert_back_20", |b| {
        b.iter_batched(
            || {
                let mut item = output(180);
                if let ChatItem::FunctionCallOutput(o) = &mut item {
                    o.created_at = Timestamp::new(180 * 1000 + 1, 1000);
                }
                (base.clone(), item)
            },
            |(mut ctx, item)| {
                ctx.insert(item);
                ctx
            },
            BatchSize::SmallInput,
        );
    });
}

fn templates(c: &mut Criterion) {
    let template = Template::text(
        "Update from {function_name} (call {call_id}): {message}. Mention it briefly.",
    );
    c.bench_function("templates/render_update", |b| {
        b.iter(|| {
            let values = update_placeholders("book_flight", "call_123", "step 1 of 2");
            template.render(black_box(&values)).unwrap()
        });
    });
}

fn round_trip(c: &mut Criterion) {
    // One tool call through every actor, on a multi-threaded runtime: the model calls
    // `echo`, the Toolset spawns its ToolCall actor, the output returns through the Activity
    // and the model's text reply completes the turn.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let echo = FunctionTool::new("echo", "Echoes.", |_ctx: RunContext, f: Flight| async move {
        Ok::<_, ToolError>(f.destination)
    });
    let llm = ScriptedLlm::new([]).with_fallback(|_, request| {
        let last_is_user = request
            .items
            .items()
            .last()
            .and_then(|i| i.as_message())
            .is_some_and(|m| m.role == Role::User);
        if last_is_user {
            let call = ScriptedCall::new(format!("c{}", request.items.len()), "echo", FLIGHT_ARGS);
            ScriptedResponse::calls([call]).with_latency(Duration::ZERO)
        } else {
            ScriptedResponse::text("done").with_latency(Duration::ZERO)
        }
    });
    // Each session runs at most TURNS_PER_SESSION turns so the history (and every request
    // built from it) stays conversation-sized; starting and closing sessions is not timed.
    const TURNS_PER_SESSION: u64 = 50;
    c.bench_function("round_trip/tool_call_through_actors", |b| {
        b.iter_custom(|iters| {
            let (echo, llm) = (echo.clone(), llm.clone());
            runtime.block_on(async move {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let session = Session::builder()
                        .llm(llm.clone())
                        .user_away_timeout(None)
                        .start(Agent::new("bench", "Echo.").tool(echo.clone()))
                        .await
                        .unwrap();
                    let n = left.min(TURNS_PER_SESSION);
                    let began = std::time::Instant::now();
                    let mut last = None;
                    for _ in 0..n {
                        last = Some(black_box(session.run("book it").await.unwrap()));
                    }
                    timed += began.elapsed();
                    // What was timed really ran the tool (outside the timed span).
                    if let Some(run) = last {
                        run.contains_function_call_output("Tokyo", false);
                    }
                    session.close().await.unwrap();
                    left -= n;
                }
                timed
            })
        });
    });
}

/// `n` tools in the shape of a real catalogue: a `<verb>_<noun>` name, a one-line description,
/// two described parameters; nouns repeat across verbs so queries match many items.
fn catalogue(n: usize) -> Vec<colloquy::toolsets::SearchItem> {
    const VERBS: [&str; 10] = [
        "search", "get", "create", "update", "cancel", "list", "price", "status", "share", "remind",
    ];
    (0..n)
        .map(|i| {
            let (verb, noun) = (VERBS[i % VERBS.len()], format!("thing{}", i / VERBS.len()));
            colloquy::toolsets::SearchItem {
                name: format!("{verb}_{noun}"),
                description: format!("{verb} a {noun} for the customer account {}", i % 37),
                parameters: vec![
                    ("id".into(), format!("The {noun} identifier")),
                    ("note".into(), "An optional note for the record".into()),
                ],
                source: i / VERBS.len(),
            }
        })
        .collect()
}

fn tool_search(c: &mut Criterion) {
    use colloquy::toolsets::{Bm25Strategy, KeywordStrategy, SyncSearchStrategy};
    let mut group = c.benchmark_group("tool_search");
    for n in [100, 1_000, 10_000] {
        let items = catalogue(n);
        let query = "cancel thing7 customer account";
        let mut bm25 = Bm25Strategy::default();
        bm25.build_index(&items);
        group.bench_function(format!("bm25_search/{n}"), |b| {
            b.iter(|| black_box(bm25.search(black_box(query), &items, 5)));
        });
        group.bench_function(format!("bm25_build_index/{n}"), |b| {
            b.iter(|| {
                let mut fresh = Bm25Strategy::default();
                fresh.build_index(black_box(&items));
                fresh
            });
        });
        let mut keyword = KeywordStrategy::default();
        keyword.build_index(&items);
        group.bench_function(format!("keyword_search/{n}"), |b| {
            b.iter(|| black_box(keyword.search(black_box(query), &items, 5)));
        });
    }
    group.finish();
}

criterion_group! {
    name = micro;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = arguments, duplicate_keys, history, templates, round_trip, tool_search
}
criterion_main!(micro);
