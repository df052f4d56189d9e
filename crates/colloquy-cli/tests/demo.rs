//! The demo plays its whole conversation on the paused clock and prints a readable transcript.

use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn the_demo_prints_the_whole_conversation() {
    let mut out = Vec::new();
    colloquy_cli::demo::run(&mut out, false, Duration::from_millis(100)).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "colloquy demo: a travel agent on the scripted LLM (no network, no keys)",
            "  ── agent: travel ──",
            "user  › What's the weather in Paris this weekend?",
            "agent › Let me check the forecast for Paris.",
            r#"  tool ▸ get_weather {"city": "Paris", "days": 2}"#,
            "  tool ◂ get_weather Paris: day 1: sunny, 24°C; day 2: light rain, 19°C",
            "agent › Saturday looks sunny at 24°C; Sunday brings light rain and 19°C. Pack a light jacket!",
            "user  › Lovely. Book me a flight from London to Paris on Saturday.",
            "agent › Booking that for you now.",
            r#"  tool ▸ book_flight {"origin": "London", "destination": "Paris", "date": "Saturday"}"#,
            "  tool … book_flight Searching Saturday flights from London to Paris…",
            "agent › I'm searching flights now; I'll keep you posted.",
            "  tool … book_flight Found 3 flights; holding a window seat on the 08:15…",
            "agent › Good news: I found three flights and I'm holding a window seat.",
            r#"  tool ◂ book_flight {"confirmation":"CQ-4884","departs":"08:15","seat":"14A"}"#,
            "agent › You're booked on Saturday's 08:15 from London to Paris, seat 14A. Your confirmation is CQ-4884.",
            "user  › Perfect, thanks. Bye!",
            "  tool ▸ end_call {}",
            "  tool ◂ end_call (the call ends after this reply)",
            "agent › Have a wonderful trip to Paris. Goodbye!",
            "  ── session closed: end_call ──",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_coloured_transcript_uses_ansi_styles() {
    let mut out = Vec::new();
    colloquy_cli::demo::run(&mut out, true, Duration::ZERO).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\x1b[1;36muser  ›\x1b[0m What's the weather"));
    assert!(text.contains("\x1b[33m  tool ▸ book_flight\x1b[0m"));
}

/// The demo's booking does what docs/tools.md preaches: the same trip asked twice at once runs
/// once (the second call is refused while the first runs), and asked again after it ended the
/// remembered confirmation answers without a second booking.
#[tokio::test(start_paused = true)]
async fn the_booking_refuses_a_running_trip_and_remembers_a_booked_one() {
    use colloquy::llm::ScriptedCall;
    use colloquy::prelude::*;
    let trip = r#"{"origin":"London","destination":"Paris","date":"Saturday"}"#;
    let llm = ScriptedLlm::new([
        ScriptedResponse::calls([
            ScriptedCall::new("c1", "book_flight", trip),
            ScriptedCall::new("c2", "book_flight", trip),
        ]),
        ScriptedResponse::text("Booking."),
        ScriptedResponse::text("Booked."),
        ScriptedResponse::calls([ScriptedCall::new("c3", "book_flight", trip)]),
        ScriptedResponse::text("Already booked."),
    ])
    .with_fallback(|_, _| ScriptedResponse::text("ok"));
    let mut builder = Session::builder().llm(llm);
    let mut events = builder.subscribe();
    let session = builder.start(colloquy_cli::demo::travel_agent(Duration::from_secs(1))).await;
    let session = session.unwrap();
    session.user_turn("Book London to Paris on Saturday, twice to be sure.").await.unwrap();
    session.wait_for_quiet().await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.user_turn("Book it again.").await.unwrap();
    session.wait_for_quiet().await.unwrap();
    session.wait_for_idle().await.unwrap();
    session.close().await.unwrap();
    let mut started = Vec::new();
    let mut ended = Vec::new();
    while let Some(event) = events.recv().await {
        match event.kind {
            EventKind::ToolCallStarted { call_id, .. } => started.push(call_id),
            EventKind::ToolCallEnded { call_id, status, cached, .. } => {
                ended.push(format!("{call_id} {status:?} cached={cached}"));
            }
            _ => {}
        }
    }
    assert!(!started.iter().any(|id| id == "c2"), "c2 is refused while c1 runs: {started:?}");
    assert_eq!(ended, ["c1 Done cached=false", "c3 Done cached=true"], "c3 is remembered");
}
