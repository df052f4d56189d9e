//! The built-in demo: a travel agent with a weather tool and a booking tool, on the scripted
//! LLM. No network, no keys.

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use crate::served::tools::{booking_tool, weather_tool};
use crate::transcript::Transcript;
use colloquy::llm::ScriptedCall;
use colloquy::prelude::*;

/// The travel agent; it ends the call itself once the user says goodbye.
pub fn travel_agent(pause: Duration) -> Agent {
    Agent::new("travel", "You are a friendly travel agent. Use tools to check and book.")
        .tool(weather_tool(pause))
        .tool(booking_tool(pause * 2))
        .toolset(colloquy::toolsets::EndCallTool::new().toolset())
}

/// What the user says, turn by turn.
pub const USER_TURNS: [&str; 3] = [
    "What's the weather in Paris this weekend?",
    "Lovely. Book me a flight from London to Paris on Saturday.",
    "Perfect, thanks. Bye!",
];

/// The scripted model's answers, in request order.
pub fn script(latency: Duration) -> Vec<ScriptedResponse> {
    let at = |r: ScriptedResponse| r.with_latency(latency);
    vec![
        at(ScriptedResponse::text("Let me check the forecast for Paris.").with_call(
            ScriptedCall::new("call_weather", "get_weather", r#"{"city":"Paris","days":2}"#),
        )),
        at(ScriptedResponse::text(
            "Saturday looks sunny at 24°C; Sunday brings light rain and 19°C. Pack a light jacket!",
        )),
        at(ScriptedResponse::text("Booking that for you now.").with_call(ScriptedCall::new(
            "call_booking",
            "book_flight",
            r#"{"origin":"London","destination":"Paris","date":"Saturday"}"#,
        ))),
        at(ScriptedResponse::text("I'm searching flights now; I'll keep you posted.")),
        at(ScriptedResponse::text(
            "Good news: I found three flights and I'm holding a window seat.",
        )),
        at(ScriptedResponse::text(
            "You're booked on Saturday's 08:15 from London to Paris, seat 14A. Your confirmation is CQ-4884.",
        )),
        at(ScriptedResponse::calls([ScriptedCall::new("call_end", "end_call", "{}")])),
        at(ScriptedResponse::text("Have a wonderful trip to Paris. Goodbye!")),
    ]
}

/// Plays the demo, writing the transcript to `out` as the events arrive. `pace` scales every
/// simulated delay (zero for `--fast`).
pub async fn run(out: impl Write, color: bool, pace: Duration) -> Result<(), Box<dyn Error>> {
    let mut transcript = Transcript::new(out, color);
    transcript
        .heading("colloquy demo: a travel agent on the scripted LLM (no network, no keys)")?;
    let mut builder = Session::builder().llm(ScriptedLlm::new(script(pace * 3)));
    let mut events = builder.subscribe();
    let session = builder.start(travel_agent(pace * 4)).await?;
    let conversation = async {
        for turn in USER_TURNS {
            // The user takes a moment to type.
            tokio::time::sleep(pace * 3).await;
            session.user_turn(turn).await?;
            // Background tools keep working after the reply: wait for them and their news.
            // The agent ends the call after the goodbye: then the waits fail, as it closes.
            if session.wait_for_quiet().await.is_err() || session.wait_for_idle().await.is_err() {
                break;
            }
        }
        session.close().await // already closed by the agent: nothing to do
    };
    tokio::pin!(conversation);
    let mut talking = true;
    loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => transcript.event(&event)?,
                None => break, // the session closed and every event was printed
            },
            result = &mut conversation, if talking => {
                result?;
                talking = false;
            }
        }
    }
    // The stream ends when the session has closed; its actors may still be stopping, and
    // `close` returns only once they have: finish it, so nothing is cut off at exit.
    if talking {
        conversation.await?;
    }
    Ok(())
}
