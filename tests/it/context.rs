//! A context that fits (docs/providers.md#a-context-that-fits): with `max_context_tokens`
//! every request stays within the window, the history keeps everything, and a request a model
//! refuses as too long is retried once trimmed; a host's policy replaces the trimming.

use std::sync::{Arc, Mutex};

use colloquy::chat::{ChatContext, ChatItem};
use colloquy::llm::context::{ContextPolicy, Fitted, estimate_text};
use colloquy::llm::{Llm, LlmChunk, LlmError, LlmRequest, LlmStream};
use colloquy::prelude::*;
use futures_util::stream;

/// Tokens of the items alone, as the default policy counts them.
fn item_tokens(items: &[ChatItem]) -> usize {
    items
        .iter()
        .map(|item| {
            4 + match item {
                ChatItem::Message(m) => estimate_text(&m.text),
                _ => 0,
            }
        })
        .sum()
}

fn texts(items: &[ChatItem]) -> Vec<String> {
    items.iter().filter_map(|i| i.as_message()).map(|m| m.text.clone()).collect()
}

fn question(n: usize) -> String {
    format!("question {n}: {}", "tell me more about it ".repeat(10))
}

#[tokio::test(start_paused = true)]
async fn with_max_context_tokens_every_request_fits_and_the_history_keeps_all() {
    let llm = ScriptedLlm::new(Vec::<ScriptedResponse>::new())
        .with_fallback(|_, _| ScriptedResponse::text("Here is more about it. ".repeat(8)))
        .recording();
    let session = Session::builder()
        .llm(llm.clone())
        .max_context_tokens(800) // 600 for the request
        .start(Agent::new("a", "Answer."))
        .await
        .unwrap();
    for n in 0..20 {
        session.user_turn(question(n)).await.unwrap();
        session.wait_for_idle().await.unwrap();
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), 20);
    for r in &requests {
        assert!(
            item_tokens(&r.items) <= 600,
            "request {} is over: {}",
            r.index,
            item_tokens(&r.items)
        );
    }
    let last = texts(&requests[19].items);
    assert_eq!(last.last(), Some(&question(19)), "the newest user message is sent");
    assert!(!last.contains(&question(0)), "the oldest turn was left out");
    let history = session.history().await.unwrap();
    assert_eq!(history.iter().filter(|i| i.as_message().is_some()).count(), 40, "nothing lost");
}

/// A model whose context holds `max_items` items: it refuses longer requests the way a
/// provider does, and answers the others.
struct SmallModel {
    max_items: usize,
    sent: Mutex<Vec<usize>>,
}

impl Llm for SmallModel {
    fn chat(&self, request: LlmRequest) -> LlmStream {
        let items = request.items.len();
        self.sent.lock().unwrap().push(items);
        let chunks = match items > self.max_items {
            true => vec![LlmChunk::Error(LlmError::ContextLength {
                status: 400,
                body: "the request exceeds the available context size".into(),
                limit: None,
                prompt: None,
            })],
            false => vec![LlmChunk::Text("fine".into()), LlmChunk::End],
        };
        Box::pin(stream::iter(chunks))
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_the_model_refuses_as_too_long_is_retried_once_trimmed() {
    let model = Arc::new(SmallModel { max_items: 6, sent: Mutex::default() });
    let mut builder = Session::builder().llm(Arc::clone(&model));
    let mut events = builder.subscribe();
    let session = builder.start(Agent::new("a", "Answer.")).await.unwrap();
    for n in 0..6 {
        session.user_turn(question(n)).await.unwrap();
        session.wait_for_idle().await.unwrap();
    }
    session.close().await.unwrap();
    let mut errors = Vec::new();
    while let Some(event) = events.recv().await {
        if let EventKind::Error { message, .. } = event.kind {
            errors.push(message);
        }
    }
    assert_eq!(errors, Vec::<String>::new());
    let sent = model.sent.lock().unwrap().clone();
    // Turns 1–3 fit; each later one is refused once, then sent trimmed to half or less.
    assert_eq!(sent[..3], [1, 3, 5]);
    for pair in sent[3..].chunks(2) {
        assert!(pair[0] > 6 && pair[1] <= 6, "{sent:?}");
    }
}

/// A host's policy in place of trimming: everything but the newest user message becomes one
/// system note (a summary, in a real host).
struct Summarise;

impl ContextPolicy for Summarise {
    fn fit(&self, request: LlmRequest, _budget: usize) -> Fitted<'_> {
        Box::pin(async move {
            let items = request.items.items();
            let Some((newest, older)) = items.split_last() else { return request };
            let note = ChatItem::Message(Message {
                id: "summary".into(),
                role: Role::System,
                text: format!("(Summary of {} earlier items.)", older.len()),
                interrupted: false,
                created_at: newest.created_at(),
            });
            let items = vec![Arc::new(note), Arc::clone(newest)];
            LlmRequest { items: Arc::new(ChatContext::from_shared(items)), ..request }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_hosts_policy_replaces_the_trimming() {
    let llm = ScriptedLlm::new(Vec::<ScriptedResponse>::new())
        .with_fallback(|_, _| ScriptedResponse::text("ok"))
        .recording();
    let session = Session::builder()
        .llm(llm.clone())
        .max_context_tokens(200)
        .context_policy(Summarise)
        .start(Agent::new("a", "Answer."))
        .await
        .unwrap();
    for n in 0..3 {
        session.user_turn(question(n)).await.unwrap();
        session.wait_for_idle().await.unwrap();
    }
    let requests = llm.requests();
    assert_eq!(texts(&requests[0].items), [question(0)], "the first request fits as it is");
    assert_eq!(
        texts(&requests[2].items),
        ["(Summary of 4 earlier items.)".to_string(), question(2)]
    );
}
