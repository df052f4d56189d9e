//! `colloquy chat` in a real pseudo-terminal (expectrl), as a person at a keyboard uses it:
//! the line editor's prompt, lines read while the agent speaks, a long paste, Ctrl-C and
//! Ctrl-D, a terminal that hangs up. The model
//! is a replay server on 127.0.0.1 whose reply pauses for 30 s mid-stream, so "the agent is
//! speaking" lasts as long as a test needs. Real processes on the real clock: each expect has
//! a 20 s bound, and so has each wait for the process to end (docs/testing.md §3).

mod common;

use common::streamed;

use std::time::{Duration, Instant};

use colloquy_replay::{ReplayServer, Reply};
use expectrl::{ControlCode, Eof, Expect};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

const BOUND: Duration = Duration::from_secs(20);

/// A chat in a pseudo-terminal, on a replay server with `replies`.
struct Chat {
    session: expectrl::session::OsSession,
    /// Everything read so far.
    seen: String,
    _server: std::sync::Arc<ReplayServer>,
    _runtime: tokio::runtime::Runtime,
}

impl Chat {
    fn start(replies: Vec<Reply>) -> Self {
        Self::start_with(replies).0
    }

    /// As [`Chat::start`], with the server's address, to read what it received.
    fn start_with(replies: Vec<Reply>) -> (Self, std::sync::Arc<ReplayServer>) {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime for the replay server");
        let server = runtime.block_on(ReplayServer::start(replies)).expect("the replay server");
        let server = std::sync::Arc::new(server);
        let mut command = common::colloquy();
        command.args(["chat", "--no-color", "--base-url", &format!("{}/v1", server.base_url())]);
        let mut session = expectrl::Session::spawn(command).expect("colloquy starts in a pty");
        session.set_expect_timeout(Some(BOUND));
        let chat = Self {
            session,
            seen: String::new(),
            _server: std::sync::Arc::clone(&server),
            _runtime: runtime,
        };
        (chat, server)
    }

    /// Reads until `text` (at most [`BOUND`]).
    fn expect(&mut self, text: &str) {
        match self.session.expect(text) {
            Ok(found) => {
                self.seen.push_str(&String::from_utf8_lossy(found.before()));
                self.seen.push_str(text);
            }
            Err(e) => panic!("`{text}` not seen ({e}) after:\n{}", self.seen),
        }
    }

    fn type_line(&mut self, line: &str) {
        self.session.send_line(line).expect("the terminal takes the line");
    }

    fn ctrl_c(&mut self) {
        self.session.send(ControlCode::EndOfText).expect("the terminal takes Ctrl-C");
        std::io::Write::flush(&mut self.session).expect("Ctrl-C reaches the terminal");
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.session.get_process().pid().as_raw())
    }

    /// Reads to the end of output and waits (at most [`BOUND`]) for the exit: its status, and
    /// everything the chat wrote.
    fn end(mut self) -> (i32, String) {
        if let Ok(found) = self.session.expect(Eof) {
            self.seen.push_str(&String::from_utf8_lossy(found.before()));
            self.seen.push_str(&String::from_utf8_lossy(&found[0]));
        }
        let pid = self.pid();
        let started = Instant::now();
        loop {
            // Our own child, without blocking.
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => return (code, self.seen),
                Ok(WaitStatus::StillAlive) | Err(_) => {}
                Ok(other) => panic!("not a normal exit: {other:?}\n{}", self.seen),
            }
            assert!(started.elapsed() < BOUND, "the chat did not exit within 20 s:\n{}", self.seen);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn in_a_terminal_there_is_a_prompt_and_commands_act_while_the_agent_speaks() {
    let mut chat = Chat::start(vec![streamed("Let me think", 30_000)]);
    chat.expect("/quit to leave");
    chat.expect("you › ");
    chat.type_line("tell me");
    chat.expect("agent › Let me think");
    // The reply is paused for 30 s: each command answers at once all the same.
    chat.type_line("/tools");
    chat.expect("no call running");
    chat.type_line("/inspect");
    chat.expect("    activity:assistant · activity · running · agent assistant");
    chat.type_line("/quit");
    let (code, text) = chat.end();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("── session closed: close ──"), "{text}");
    assert!(!text.contains("…and more"), "the reply was cut by /quit:\n{text}");
}

#[test]
fn a_line_typed_while_the_agent_speaks_interrupts_it() {
    let mut chat = Chat::start(vec![streamed("Let me think", 30_000), streamed("Sure, Rome.", 0)]);
    chat.expect("you › ");
    chat.type_line("tell me about Paris");
    chat.expect("agent › Let me think");
    chat.type_line("no, Rome");
    chat.expect("[interrupted]");
    chat.expect("agent › Sure, Rome.");
    chat.expect("you › "); // the prompt comes back once the reply is over
    chat.type_line("/history");
    chat.expect("user: no, Rome");
    chat.type_line("/quit");
    let (code, text) = chat.end();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("agent: Let me think [interrupted]"), "{text}");
}

#[test]
fn ctrl_c_interrupts_the_reply_and_twice_quits() {
    let mut chat = Chat::start(vec![streamed("Let me think", 30_000)]);
    chat.expect("you › ");
    chat.type_line("tell me");
    chat.expect("agent › Let me think");
    chat.ctrl_c();
    chat.expect(" [interrupted]");
    assert!(chat.seen.contains("agent › Let me think [interrupted]"), "{}", chat.seen);
    // Still running: the first Ctrl-C only interrupted the reply.
    chat.type_line("/tools");
    chat.expect("no call running");
    // Past the first press's window, a press with nothing to interrupt says so; the next one
    // within a second quits. One at a time: signals sent together may arrive as one.
    std::thread::sleep(Duration::from_millis(1_100));
    chat.ctrl_c();
    chat.expect("Ctrl-C again or /quit to leave");
    chat.ctrl_c();
    let (code, text) = chat.end();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("── session closed: close ──"), "{text}");
}

#[test]
fn a_terminal_that_hangs_up_ends_the_chat_while_the_agent_speaks() {
    let mut chat = Chat::start(vec![streamed("Let me think", 30_000)]);
    chat.expect("you › ");
    chat.type_line("tell me");
    chat.expect("agent › Let me think");
    // Our own child's pid, not yet reaped (`end` reaps it).
    kill(chat.pid(), Signal::SIGHUP).expect("SIGHUP sent");
    let (code, text) = chat.end();
    assert_eq!(code, 128 + Signal::SIGHUP as i32, "{text}");
    assert!(text.contains("── session closed: close ──"), "{text}");
}

#[test]
fn a_paste_longer_than_a_terminal_line_reaches_the_model_whole() {
    // A terminal's cooked mode keeps 4,095 bytes of a line; the line editor has no such limit.
    let (mut chat, server) = Chat::start_with(vec![streamed("Got it.", 0)]);
    chat.expect("you › ");
    let long: String = (0..6_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    chat.type_line(&long);
    chat.expect("agent › Got it.");
    chat.expect("you › ");
    chat.session.send(ControlCode::EndOfTransmission).expect("the terminal takes Ctrl-D");
    let (code, text) = chat.end();
    assert_eq!(code, 0, "{text}");
    let received = server.received();
    let messages = received[0].body["messages"].as_array().expect("messages").clone();
    let said = messages.last().expect("the user's message")["content"].as_str().unwrap_or("");
    assert_eq!(said.len(), long.len(), "the model got {} bytes of {}", said.len(), long.len());
    assert_eq!(said, long);
}

#[test]
fn the_prompt_stays_below_what_the_agent_and_the_tools_print() {
    let mut chat = Chat::start(vec![streamed("Let me think", 30_000)]);
    chat.expect("you › ");
    chat.type_line("tell me");
    chat.expect("agent › Let me think");
    // The prompt is drawn again below the agent's line: the user types on it meanwhile.
    chat.expect("you › ");
    chat.type_line("/quit");
    let (code, text) = chat.end();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("── session closed: close ──"), "{text}");
}
