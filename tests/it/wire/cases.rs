//! Failures every provider must survive the same way, played on its own recordings (each
//! provider's folder has `text`, `cut_mid_text` and `garbage` streams saying the same words).

use std::time::Duration;

use colloquy::llm::LlmErrorKind;
use colloquy::llm::http::HttpOptions;
use colloquy::prelude::*;
use colloquy_replay::Reply;

use super::{Chat, KEY, Provider, errors, options};

fn hello() -> (String, bool) {
    ("Hello there!".to_string(), false)
}

async fn chat(p: &'static Provider, replies: Vec<Reply>, options: HttpOptions) -> Chat {
    Chat::start(p, Agent::new("a", "inst"), replies, options).await
}

fn recorded(p: &Provider, name: &str) -> Reply {
    Reply::sse(&super::recording(p.name, name))
}

/// A 429 is retried after the wait the server asks; the turn then succeeds.
pub(crate) async fn a_429_then_success(p: &'static Provider) {
    let limited = Reply::status(429, r#"{"error":{"message":"Rate limit reached"}}"#)
        .header("retry-after-ms", "50");
    let mut chat = chat(p, vec![limited, recorded(p, "text")], options()).await;
    let started = std::time::Instant::now();
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(chat.requests().len(), 2);
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// 5xx answers before any token are retried.
pub(crate) async fn a_5xx_is_retried_before_any_token(p: &'static Provider) {
    let replies = vec![Reply::status(503, "busy"), Reply::status(502, ""), recorded(p, "text")];
    let mut chat = chat(p, replies, options()).await;
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert_eq!(chat.requests().len(), 3);
}

/// Without retries a 500 is an `http` error event; the next turn works.
pub(crate) async fn a_500_is_an_http_error_and_the_next_turn_works(p: &'static Provider) {
    let no_retries = HttpOptions { max_retries: 0, ..options() };
    let replies = vec![Reply::status(500, "upstream exploded"), recorded(p, "text")];
    let mut chat = chat(p, replies, no_retries).await;
    let message = "the LLM server answered HTTP 500: upstream exploded".to_string();
    assert_eq!(errors(&chat.turn("hi").await), [(Some(LlmErrorKind::Http), message)]);
    assert_eq!(chat.assistant_messages().await, []);
    chat.turn("hello?").await;
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// A 401 is an `auth` error, not retried, and the key the server echoes is redacted.
pub(crate) async fn a_refused_key_never_shows(p: &'static Provider) {
    let echo = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}."}}}}"#);
    let mut chat = chat(p, vec![Reply::status(401, &echo)], options()).await;
    let events = chat.turn("hi").await;
    let errors = errors(&events);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, Some(LlmErrorKind::Auth));
    assert!(errors[0].1.contains("[redacted]"), "{}", errors[0].1);
    assert!(!format!("{events:?}").contains(KEY));
    assert_eq!(chat.server.received().len(), 1, "an auth error is not retried");
}

/// A stream cut after text keeps the text, interrupted; nothing is retried; the next turn
/// works and sends the cut text back as it was heard.
pub(crate) async fn a_stream_cut_mid_text_keeps_the_text(p: &'static Provider) {
    let replies = vec![recorded(p, "cut_mid_text"), recorded(p, "text")];
    let mut chat = chat(p, replies, options()).await;
    let events = chat.turn("when?").await;
    let errors = errors(&events);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, Some(LlmErrorKind::StreamCut));
    // The message is cut; the speech was not interrupted by anyone.
    let done = events.iter().find(|e| matches!(e, EventKind::SpeechDone { .. }));
    assert!(matches!(done, Some(EventKind::SpeechDone { interrupted: false, .. })), "{done:?}");
    let cut = ("The flight leaves at nine".to_string(), true);
    assert_eq!(chat.assistant_messages().await, std::slice::from_ref(&cut));
    assert_eq!(chat.server.received().len(), 1, "nothing is retried once text flowed");
    chat.turn("hello?").await;
    assert_eq!(chat.assistant_messages().await, [cut, hello()]);
    let second = chat.requests()[1].body.to_string();
    assert!(second.contains("The flight leaves at nine"), "{second}");
}

/// A body that breaks before its first event delivered nothing: it is retried.
pub(crate) async fn a_body_cut_before_any_event_is_retried(p: &'static Provider) {
    let empty = Reply::sse(": cut\n").pause_first(Duration::from_millis(20));
    let mut chat = chat(p, vec![empty, recorded(p, "text")], options()).await;
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert_eq!(chat.requests().len(), 2);
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// Data that is not JSON is an `invalid_chunk` error; the text before it stays, interrupted.
pub(crate) async fn garbage_is_an_invalid_chunk(p: &'static Provider) {
    let mut chat = chat(p, vec![recorded(p, "garbage")], options()).await;
    let errors = errors(&chat.turn("hi").await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, Some(LlmErrorKind::InvalidChunk));
    assert_eq!(chat.assistant_messages().await, [("Sure".to_string(), true)]);
}

/// A server slower than the first-token timeout is a `timeout`; the next turn works.
pub(crate) async fn a_slow_first_token_is_a_timeout(p: &'static Provider) {
    let quick = HttpOptions {
        first_token_timeout: Duration::from_millis(200),
        max_retries: 0,
        ..options()
    };
    let slow = recorded(p, "text").pause_first(Duration::from_secs(3));
    let mut chat = chat(p, vec![slow, recorded(p, "text")], quick).await;
    let message = "LLM request timed out: nothing received for 200 ms".to_string();
    assert_eq!(errors(&chat.turn("hi").await), [(Some(LlmErrorKind::Timeout), message)]);
    chat.turn("again").await;
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// A base URL's query string stays at the end of the URL requested.
pub(crate) async fn a_base_url_keeps_its_query_string(p: &'static Provider) {
    let replies = vec![recorded(p, "text")];
    let with_query = |base: &str| format!("{base}/?api-version=2024-10-21");
    let mut chat = Chat::start_at(p, Agent::new("a", "inst"), replies, options(), with_query).await;
    assert_eq!(errors(&chat.turn("hi").await), []);
    let received = chat.server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, format!("{}?api-version=2024-10-21", p.path));
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// The `user:password@` part of a base URL shows in no error and no log line: not when a
/// server echoes the password, not when the server cannot be reached (and is retried).
pub(crate) async fn credentials_in_the_base_url_never_show(p: &'static Provider) {
    const PASSWORD: &str = "pr0xy-pa55";
    let logs = super::Logs::capture();
    let with_credentials =
        |base: &str| base.replacen("http://", &format!("http://me:{PASSWORD}@"), 1);
    let echo = Reply::status(500, &format!("no proxy user me:{PASSWORD}"));
    let no_retries = HttpOptions { max_retries: 0, ..options() };
    let agent = || Agent::new("a", "inst");
    let mut chat = Chat::start_at(p, agent(), vec![echo], no_retries, with_credentials).await;
    let events = chat.turn("hi").await;
    let errors_seen = errors(&events);
    assert_eq!(errors_seen.len(), 1, "{errors_seen:?}");
    assert!(errors_seen[0].1.contains("no proxy user me:[redacted]"), "{}", errors_seen[0].1);
    assert!(!format!("{events:?}").contains(PASSWORD));

    // A port nobody listens on: the connection fails, is retried once, then reported.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1");
    let unreachable = |_: &str| format!("http://me:{PASSWORD}@{closed}{}", p.base_path);
    let one_retry = HttpOptions { max_retries: 1, ..options() };
    let mut chat = Chat::start_at(p, agent(), vec![], one_retry, unreachable).await;
    let events = chat.turn("hi").await;
    let errors_seen = errors(&events);
    assert_eq!(errors_seen.len(), 1, "{errors_seen:?}");
    assert_eq!(errors_seen[0].0, Some(LlmErrorKind::Connect), "{errors_seen:?}");
    assert!(!format!("{events:?}").contains(PASSWORD));
    let logged = logs.text();
    assert!(logged.contains("retrying"), "the retry is logged: {logged}");
    assert!(!logged.contains(PASSWORD), "{logged}");
}

/// A 200 answer that is a page or plain JSON is a `provider` error naming its content type
/// and the start of its body (an excerpt, the key redacted): not retried, not reported as a
/// stream that ended early, and the next turn works.
pub(crate) async fn a_200_that_is_not_an_event_stream_is_a_provider_error(p: &'static Provider) {
    let page = format!(
        "<html><head><title>Sign in to the proxy</title></head>\n<body><p>token {KEY}</p>{}</body></html>",
        "<div>filler</div>".repeat(5000)
    );
    let html = Reply::body(200, "text/html; charset=utf-8", &page);
    let completion = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}]}"#;
    let json = Reply::body(200, "application/json", completion);
    let mut chat = chat(p, vec![html, json, recorded(p, "text")], options()).await;

    let events = chat.turn("hi").await;
    let seen = errors(&events);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, Some(LlmErrorKind::Provider));
    let expected = "the LLM server answered HTTP 200 with `text/html; charset=utf-8` instead of an \
                    event stream (text/event-stream): <html><head><title>Sign in to the proxy\
                    </title></head> <body><p>token [redacted]</p><div>filler</div>";
    assert!(seen[0].1.starts_with(expected), "{}", seen[0].1);
    assert!(seen[0].1.ends_with('…') && seen[0].1.len() < 600, "an excerpt: {}", seen[0].1);
    assert!(!format!("{events:?}").contains(KEY));
    assert_eq!(chat.server.received().len(), 1, "not retried");

    let seen = errors(&chat.turn("hello?").await);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, Some(LlmErrorKind::Provider));
    let expected = format!(
        "with `application/json` instead of an event stream (text/event-stream): {completion}"
    );
    assert!(seen[0].1.ends_with(&expected), "{}", seen[0].1);
    assert_eq!(chat.server.received().len(), 2, "not retried");

    assert_eq!(errors(&chat.turn("again").await), []);
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// An event stream is one with parameters (`; charset=utf-8`) too, and one without a content
/// type is read as a stream.
pub(crate) async fn an_event_stream_with_a_charset_or_no_content_type_is_read(
    p: &'static Provider,
) {
    let with_charset = recorded(p, "text").content_type(Some("text/event-stream; charset=utf-8"));
    let without = recorded(p, "text").content_type(None);
    let mut chat = chat(p, vec![with_charset, without], options()).await;
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert_eq!(errors(&chat.turn("hello?").await), []);
    assert_eq!(chat.assistant_messages().await, [hello(), hello()]);
    assert_eq!(chat.server.received().len(), 2);
}

/// A byte that is not UTF-8 costs a character (U+FFFD), not the turn; a warning says so.
pub(crate) async fn invalid_utf8_is_replaced_and_the_turn_goes_on(p: &'static Provider) {
    let logs = super::Logs::capture();
    let mut chat = chat(p, vec![recorded(p, "invalid_utf8")], options()).await;
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert_eq!(chat.assistant_messages().await, [("Hello th\u{FFFD}ere!".to_string(), false)]);
    let logged = logs.text();
    assert!(logged.contains("WARN") && logged.contains("not valid UTF-8"), "{logged}");
}

/// A stream that goes on with empty deltas, keep-alives and usage but no text ends the step
/// with a `timeout` error once `stall_timeout` passes without text; the text before stays,
/// interrupted; nothing is retried; the next turn works.
pub(crate) async fn empty_deltas_do_not_hold_a_step(p: &'static Provider) {
    let stall = HttpOptions { stall_timeout: Duration::from_millis(300), ..options() };
    let replies = vec![recorded(p, "trickle_empty"), recorded(p, "text")];
    let mut chat = chat(p, replies, stall).await;
    let started = std::time::Instant::now();
    let message = "LLM request timed out: the stream sent no text or tool call for 300 ms (empty \
                   deltas and keep-alive events do not count)";
    assert_eq!(errors(&chat.turn("hi").await), [(Some(LlmErrorKind::Timeout), message.into())]);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(chat.assistant_messages().await, [("Hello".to_string(), true)]);
    assert_eq!(chat.server.received().len(), 1, "nothing is retried once the stream flowed");
    assert_eq!(errors(&chat.turn("hello?").await), []);
}

/// Reasoning and text that keep coming hold a step past `stall_timeout` in all: the deadline
/// moves with each piece of output.
pub(crate) async fn steady_output_outlasts_the_stall_timeout(p: &'static Provider) {
    let stall = HttpOptions { stall_timeout: Duration::from_millis(600), ..options() };
    let mut chat = chat(p, vec![recorded(p, "slow_steady")], stall).await;
    let started = std::time::Instant::now();
    assert_eq!(errors(&chat.turn("hi").await), []);
    assert!(started.elapsed() >= Duration::from_millis(1200));
    assert_eq!(chat.assistant_messages().await, [hello()]);
}

/// A response cut by `length` in the middle of a call's arguments: the call does not run and
/// the model reads that it was cut; every later request carries the arguments in a form the
/// provider accepts (the history keeps them as sent), so the session goes on.
pub(crate) async fn a_call_cut_by_length_never_poisons_the_session(p: &'static Provider) {
    let agent = Agent::new("a", "inst").tool(super::book_flight());
    let replies = vec![recorded(p, "call_cut_by_length"), recorded(p, "text"), recorded(p, "text")];
    let mut chat = Chat::start(p, agent, replies, options()).await;
    let events = chat.turn("book Paris").await;
    assert_eq!(errors(&events), []);
    assert_eq!(super::started(&events), Vec::<&str>::new(), "a cut call never runs");
    let history = chat.session.history().await.unwrap();
    let call = history.iter().find_map(|i| i.as_function_call()).expect("the call is kept");
    assert_eq!(call.arguments, r#"{"ci"#);
    let output = history.iter().find_map(|i| i.as_function_call_output()).expect("answered");
    assert!(output.is_error && output.output.contains("cut off"), "{}", output.output);
    chat.turn("hello?").await;
    assert_eq!(chat.assistant_messages().await.last(), Some(&hello()));
    // `requests` checks each against the provider's rules: arguments are objects.
    let requests = chat.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        assert!(request.body.to_string().contains("_invalid_arguments"), "{:#}", request.body);
    }
}

/// A request over the model's context, refused in the words of each server speaking the
/// provider's API, is retried once with its oldest items left out (the instructions and the
/// newest user message kept); refused again, the turn ends with a `context_length` error, and
/// the next turn works.
pub(crate) async fn a_context_overflow_is_retried_trimmed(p: &'static Provider) {
    for body in p.overflows {
        let refused = || Reply::status(400, body);
        let text = || recorded(p, "text");
        let replies = vec![text(), refused(), text(), refused(), refused(), text()];
        let mut chat = chat(p, replies, options()).await;
        chat.turn("first question").await;
        assert_eq!(errors(&chat.turn("second question").await), [], "{body}");
        let requests = chat.requests();
        assert_eq!(requests.len(), 3, "{body}");
        let (sent, retried) = (requests[1].body.to_string(), requests[2].body.to_string());
        assert!(sent.contains("first question") && !retried.contains("first question"), "{body}");
        assert!(retried.contains("second question") && retried.contains("inst"), "{body}");
        let events = chat.turn("third question").await;
        let errors = errors(&events);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].0, Some(LlmErrorKind::ContextLength), "{body}");
        assert!(errors[0].1.contains("over the model's context"), "{}", errors[0].1);
        chat.turn("fourth question").await;
        assert_eq!(chat.requests().len(), 6, "{body}");
        assert_eq!(chat.assistant_messages().await.last(), Some(&hello()), "{body}");
    }
}

/// Every case above, one test each in the provider's test file.
#[macro_export]
macro_rules! failure_cases {
    ($provider:expr) => {
        #[tokio::test]
        async fn a_call_cut_by_length_never_poisons_the_session() {
            wire::bounded(wire::cases::a_call_cut_by_length_never_poisons_the_session($provider))
                .await
        }
        #[tokio::test]
        async fn a_context_overflow_is_retried_trimmed() {
            wire::bounded(wire::cases::a_context_overflow_is_retried_trimmed($provider)).await
        }
        #[tokio::test]
        async fn a_429_then_success() {
            wire::bounded(wire::cases::a_429_then_success($provider)).await
        }
        #[tokio::test]
        async fn a_5xx_is_retried_before_any_token() {
            wire::bounded(wire::cases::a_5xx_is_retried_before_any_token($provider)).await
        }
        #[tokio::test]
        async fn a_500_is_an_http_error_and_the_next_turn_works() {
            wire::bounded(wire::cases::a_500_is_an_http_error_and_the_next_turn_works($provider))
                .await
        }
        #[tokio::test]
        async fn a_refused_key_never_shows() {
            wire::bounded(wire::cases::a_refused_key_never_shows($provider)).await
        }
        #[tokio::test]
        async fn a_stream_cut_mid_text_keeps_the_text() {
            wire::bounded(wire::cases::a_stream_cut_mid_text_keeps_the_text($provider)).await
        }
        #[tokio::test]
        async fn a_body_cut_before_any_event_is_retried() {
            wire::bounded(wire::cases::a_body_cut_before_any_event_is_retried($provider)).await
        }
        #[tokio::test]
        async fn garbage_is_an_invalid_chunk() {
            wire::bounded(wire::cases::garbage_is_an_invalid_chunk($provider)).await
        }
        #[tokio::test]
        async fn a_base_url_keeps_its_query_string() {
            wire::bounded(wire::cases::a_base_url_keeps_its_query_string($provider)).await
        }
        #[tokio::test]
        async fn credentials_in_the_base_url_never_show() {
            wire::bounded(wire::cases::credentials_in_the_base_url_never_show($provider)).await
        }
        #[tokio::test]
        async fn a_200_that_is_not_an_event_stream_is_a_provider_error() {
            wire::bounded(wire::cases::a_200_that_is_not_an_event_stream_is_a_provider_error(
                $provider,
            ))
            .await
        }
        #[tokio::test]
        async fn an_event_stream_with_a_charset_or_no_content_type_is_read() {
            wire::bounded(wire::cases::an_event_stream_with_a_charset_or_no_content_type_is_read(
                $provider,
            ))
            .await
        }
        #[tokio::test]
        async fn invalid_utf8_is_replaced_and_the_turn_goes_on() {
            wire::bounded(wire::cases::invalid_utf8_is_replaced_and_the_turn_goes_on($provider))
                .await
        }
        #[tokio::test]
        async fn empty_deltas_do_not_hold_a_step() {
            wire::bounded(wire::cases::empty_deltas_do_not_hold_a_step($provider)).await
        }
        #[tokio::test]
        async fn steady_output_outlasts_the_stall_timeout() {
            wire::bounded(wire::cases::steady_output_outlasts_the_stall_timeout($provider)).await
        }
        #[tokio::test]
        async fn a_slow_first_token_is_a_timeout() {
            wire::bounded(wire::cases::a_slow_first_token_is_a_timeout($provider)).await
        }
    };
}
