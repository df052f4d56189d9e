//! The provider adapters' parse path beside the scripted LLM (docs/benchmarks.md): a 1,000-event
//! response (700 text deltas, then three tool calls whose arguments come in 100 pieces each)
//! from bytes, through server-sent-event framing, to chunks. No network: the bytes are in
//! memory, cut into 4 KiB reads as a socket would deliver them.
//!
//! ```sh
//! cargo bench --bench providers
//! ```

// `criterion_group!` writes public functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use colloquy::llm::http::SseDecoder;
use colloquy::llm::{
    LlmChunk, LlmRequest, RequestKind, ScriptedCall, ScriptedLlm, ScriptedResponse,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;

const TEXT_EVENTS: usize = 700;
const CALLS: usize = 3;
const PIECES: usize = 100;

fn openai_stream() -> String {
    let head = r#""id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m""#;
    let mut body = String::new();
    for i in 0..TEXT_EVENTS {
        let delta = format!(r#"{{"content":"word{i} "}}"#);
        body += &format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
        );
    }
    for call in 0..CALLS {
        for piece in 0..PIECES {
            let id = if piece == 0 {
                format!(r#""id":"call_{call}","type":"function","#)
            } else {
                String::new()
            };
            let name = if piece == 0 { r#""name":"book","#.to_string() } else { String::new() };
            let delta = format!(
                r#"{{"tool_calls":[{{"index":{call},{id}"function":{{{name}"arguments":"x{piece}"}}}}]}}"#
            );
            body += &format!(
                "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
            );
        }
    }
    body + "data: [DONE]\n\n"
}

fn anthropic_stream() -> String {
    let event = |name: &str, data: String| format!("event: {name}\ndata: {data}\n\n");
    let mut body = String::new();
    let block_start =
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
    body += &event("content_block_start", block_start.into());
    for i in 0..TEXT_EVENTS {
        let delta = format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word{i} "}}}}"#
        );
        body += &event("content_block_delta", delta);
    }
    for call in 1..=CALLS {
        let start = format!(
            r#"{{"type":"content_block_start","index":{call},"content_block":{{"type":"tool_use","id":"toolu_{call}","name":"book","input":{{}}}}}}"#
        );
        body += &event("content_block_start", start);
        for piece in 1..PIECES {
            let delta = format!(
                r#"{{"type":"content_block_delta","index":{call},"delta":{{"type":"input_json_delta","partial_json":"x{piece}"}}}}"#
            );
            body += &event("content_block_delta", delta);
        }
    }
    body += &event("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#.into());
    body + &event("message_stop", r#"{"type":"message_stop"}"#.into())
}

/// Bytes → SSE events → chunks, as the transport runs it; returns the chunk count.
async fn decode(bytes: &str, mut decoder: impl SseDecoder) -> usize {
    let reads: Vec<Result<&[u8], std::convert::Infallible>> =
        bytes.as_bytes().chunks(4096).map(Ok).collect();
    let mut events = futures_util::stream::iter(reads).eventsource();
    let mut out = Vec::new();
    let mut count = 0;
    while let Some(Ok(event)) = events.next().await {
        let done = decoder.event(&event.event, &event.data, &mut out).expect("valid stream");
        count += out.drain(..).map(black_box).count();
        if done {
            break;
        }
    }
    count
}

/// The decoder alone, on events already framed: the JSON part of [`decode`].
fn decode_framed(events: &[(String, String)], mut decoder: impl SseDecoder) -> usize {
    let mut out = Vec::new();
    let mut count = 0;
    for (name, data) in events {
        let done = decoder.event(name, data, &mut out).expect("valid stream");
        count += out.drain(..).map(black_box).count();
        if done {
            break;
        }
    }
    count
}

/// The events of a stream, framed once.
fn framed(bytes: &str) -> Vec<(String, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let reads: Vec<Result<&[u8], std::convert::Infallible>> = vec![Ok(bytes.as_bytes())];
    let events: Vec<_> =
        runtime.block_on(futures_util::stream::iter(reads).eventsource().collect());
    events.into_iter().map(|e| e.expect("valid framing")).map(|e| (e.event, e.data)).collect()
}

fn scripted() -> ScriptedLlm {
    // About 1,000 chunks: the scripted LLM splits text into 8-character pieces.
    let text = "abcdefg ".repeat(TEXT_EVENTS + 250);
    let calls = (0..CALLS).map(|c| ScriptedCall::new(format!("c{c}"), "book", "x".repeat(PIECES)));
    let response = ScriptedResponse::text(text).with_latency(Duration::ZERO);
    ScriptedLlm::new([]).with_fallback(move |_, _| {
        calls.clone().fold(response.clone(), ScriptedResponse::with_call)
    })
}

fn request() -> LlmRequest {
    LlmRequest {
        kind: RequestKind::UserTurn,
        agent: "a".into(),
        speech_id: "s1".into(),
        instructions: Arc::from("inst"),
        extra_instructions: None,
        items: Arc::default(),
        tools: Arc::from(Vec::new()),
        tool_choice: None,
    }
}

fn parse(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let (openai, anthropic) = (openai_stream(), anthropic_stream());
    let mut group = c.benchmark_group("llm_parse_1000_events");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("openai", |b| {
        b.iter(|| {
            runtime.block_on(decode(
                &openai,
                colloquy_openai::decode::ChatCompletionsDecoder::default(),
            ))
        });
    });
    group.bench_function("anthropic", |b| {
        b.iter(|| {
            runtime.block_on(decode(
                &anthropic,
                colloquy_anthropic::decode::MessagesDecoder::default(),
            ))
        });
    });
    let (openai_events, anthropic_events) = (framed(&openai), framed(&anthropic));
    group.bench_function("openai_decoder_only", |b| {
        b.iter(|| {
            decode_framed(
                &openai_events,
                colloquy_openai::decode::ChatCompletionsDecoder::default(),
            )
        });
    });
    group.bench_function("anthropic_decoder_only", |b| {
        b.iter(|| {
            decode_framed(&anthropic_events, colloquy_anthropic::decode::MessagesDecoder::default())
        });
    });
    let llm = scripted();
    group.bench_function("scripted", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let chunks: Vec<LlmChunk> =
                    colloquy::llm::Llm::chat(&llm, request()).collect().await;
                black_box(chunks.len())
            })
        });
    });
    group.finish();
}

criterion_group! {
    name = providers;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = parse
}
criterion_main!(providers);
