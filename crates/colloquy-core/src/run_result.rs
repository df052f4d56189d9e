//! What one `SessionHandle::run` produced, and expectations over it (§17.1,
//! decision 9).
//!
//! A run records the items its speeches committed, ordered by timestamp: assistant messages,
//! function calls (unknown-tool and unparseable calls included, decision 9), their outputs,
//! and agent handoffs. The user's own message is not an event of its run.
//!
//! ```
//! use colloquy_core::{ChatItem, FunctionCall, FunctionCallOutput, Message, Role, RunResult, Timestamp};
//! use serde_json::json;
//! let at = Timestamp::default();
//! let result = RunResult::new(vec![
//!     ChatItem::FunctionCall(FunctionCall { id: "i1".into(), call_id: "c1".into(),
//!         name: "book_flight".into(), arguments: r#"{"to": "Paris", "seats": 2}"#.into(),
//!         extra: Default::default(), created_at: at }),
//!     ChatItem::FunctionCallOutput(FunctionCallOutput { id: "i2".into(), call_id: "c1".into(),
//!         name: "book_flight".into(), output: "BK-1".into(), is_error: false,
//!         reply_required: true, created_at: at }),
//!     ChatItem::Message(Message { id: "i3".into(), role: Role::Assistant,
//!         text: "Booked: BK-1.".into(), interrupted: false, created_at: at }),
//! ]);
//! let mut expect = result.expect();
//! expect.next_event().is_function_call("book_flight").with_args(json!({"to": "Paris"}));
//! expect.next_event().is_function_call_output().with_output("BK-1");
//! expect.next_event().is_message(Role::Assistant).containing("BK-1");
//! expect.no_more_events();
//! ```

use std::fmt::Write as _;

use serde_json::Value;

use crate::chat::{AgentHandoff, ChatItem, FunctionCall, FunctionCallOutput, Message, Role};

/// The events of one run, in timestamp order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunResult {
    events: Vec<ChatItem>,
}

impl RunResult {
    /// A result holding `events` (sorted here by timestamp, stable).
    pub fn new(mut events: Vec<ChatItem>) -> Self {
        events.sort_by_key(ChatItem::created_at);
        Self { events }
    }

    /// The recorded events.
    pub fn events(&self) -> &[ChatItem] {
        &self.events
    }

    /// A cursor for expectations, at the first event.
    pub fn expect(&self) -> RunExpect<'_> {
        RunExpect { result: self, cursor: 0 }
    }

    /// Panics unless some function call has this name and its arguments contain `args`
    /// (a subset match on the decoded JSON; pass `Value::Null` to skip the check).
    pub fn contains_function_call(&self, name: &str, args: Value) -> &FunctionCall {
        let found = self.events.iter().position(|e| {
            e.as_function_call().is_some_and(|c| c.name == name && args_match(&c.arguments, &args))
        });
        match found {
            Some(i) => self.events[i].as_function_call().expect("matched a function call"),
            None => self.fail(None, &format!("no function call `{name}` with arguments {args}")),
        }
    }

    /// Panics unless some function call output has this text and error flag.
    pub fn contains_function_call_output(
        &self,
        output: &str,
        is_error: bool,
    ) -> &FunctionCallOutput {
        let found = self.events.iter().find_map(|e| {
            e.as_function_call_output().filter(|o| o.output == output && o.is_error == is_error)
        });
        found.unwrap_or_else(|| {
            self.fail(None, &format!("no function call output {output:?} (is_error: {is_error})"))
        })
    }

    /// Panics unless some message has this role.
    pub fn contains_message(&self, role: Role) -> &Message {
        let found = self.events.iter().find_map(|e| e.as_message().filter(|m| m.role == role));
        found.unwrap_or_else(|| self.fail(None, &format!("no {role:?} message")))
    }

    /// Panics unless some handoff goes to `new_agent`.
    pub fn contains_agent_handoff(&self, new_agent: &str) -> &AgentHandoff {
        let found = self.events.iter().find_map(|e| match e {
            ChatItem::AgentHandoff(h) if h.new_agent == new_agent => Some(h),
            _ => None,
        });
        found.unwrap_or_else(|| self.fail(None, &format!("no handoff to `{new_agent}`")))
    }

    /// Panics with `problem`, the whole event list and a marker at `at`.
    fn fail(&self, at: Option<usize>, problem: &str) -> ! {
        let mut text = format!("run expectation failed: {problem}\nevents:\n");
        for (i, event) in self.events.iter().enumerate() {
            let marker = if at == Some(i) { ">>" } else { "  " };
            let _ = writeln!(text, "{marker} [{i}] {}", describe(event));
        }
        if at.is_some_and(|i| i >= self.events.len()) {
            let _ = writeln!(text, ">> [{}] (no more events)", self.events.len());
        }
        panic!("{text}");
    }
}

/// A one-line description of an event, as failures print it.
pub fn describe(item: &ChatItem) -> String {
    match item {
        ChatItem::Message(m) => {
            let cut = if m.interrupted { " (interrupted)" } else { "" };
            format!("message {:?}: {:?}{cut}", m.role, m.text)
        }
        ChatItem::FunctionCall(c) => {
            format!("function_call {}#{} {}", c.name, c.call_id, c.arguments)
        }
        ChatItem::FunctionCallOutput(o) => {
            let err = if o.is_error { " (error)" } else { "" };
            format!("function_call_output #{}: {:?}{err}", o.call_id, o.output)
        }
        ChatItem::AgentHandoff(h) => format!("agent_handoff {:?} -> {}", h.old_agent, h.new_agent),
    }
}

/// Whether the call's argument text decodes to an object containing `expected` (recursively
/// for objects; other values compare equal). `Value::Null` matches anything.
fn args_match(arguments: &str, expected: &Value) -> bool {
    if expected.is_null() {
        return true;
    }
    serde_json::from_str::<Value>(arguments).is_ok_and(|actual| subset(expected, &actual))
}

fn subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            e.iter().all(|(k, v)| a.get(k).is_some_and(|av| subset(v, av)))
        }
        _ => expected == actual,
    }
}

/// A cursor over a run's events.
pub struct RunExpect<'a> {
    result: &'a RunResult,
    cursor: usize,
}

impl<'a> RunExpect<'a> {
    /// The next event; panics if there is none.
    pub fn next_event(&mut self) -> EventExpect<'a> {
        let at = self.cursor;
        if at >= self.result.events.len() {
            self.result.fail(Some(at), "expected another event");
        }
        self.cursor += 1;
        EventExpect { result: self.result, at }
    }

    /// Skips `n` events; panics if fewer remain.
    pub fn skip_next(&mut self, n: usize) -> &mut Self {
        if self.cursor + n > self.result.events.len() {
            self.result.fail(Some(self.result.events.len()), &format!("cannot skip {n} events"));
        }
        self.cursor += n;
        self
    }

    /// Skips the next event if `f` holds for it.
    pub fn skip_next_event_if(&mut self, f: impl FnOnce(&ChatItem) -> bool) -> &mut Self {
        if self.result.events.get(self.cursor).is_some_and(f) {
            self.cursor += 1;
        }
        self
    }

    /// Panics if any event remains.
    pub fn no_more_events(&self) {
        if self.cursor < self.result.events.len() {
            self.result.fail(Some(self.cursor), "expected no more events");
        }
    }
}

/// One event under expectation.
pub struct EventExpect<'a> {
    result: &'a RunResult,
    at: usize,
}

impl<'a> EventExpect<'a> {
    fn item(&self) -> &'a ChatItem {
        &self.result.events[self.at]
    }

    /// The event itself.
    pub fn event(&self) -> &'a ChatItem {
        self.item()
    }

    /// Panics unless this is a call of `name`.
    pub fn is_function_call(self, name: &str) -> CallExpect<'a> {
        match self.item() {
            ChatItem::FunctionCall(call) if call.name == name => CallExpect { inner: self, call },
            _ => self.result.fail(Some(self.at), &format!("expected a function call `{name}`")),
        }
    }

    /// Panics unless this is a function call output.
    pub fn is_function_call_output(self) -> OutputExpect<'a> {
        match self.item() {
            ChatItem::FunctionCallOutput(output) => OutputExpect { inner: self, output },
            _ => self.result.fail(Some(self.at), "expected a function call output"),
        }
    }

    /// Panics unless this is a message of `role`.
    pub fn is_message(self, role: Role) -> MessageExpect<'a> {
        match self.item() {
            ChatItem::Message(message) if message.role == role => {
                MessageExpect { inner: self, message }
            }
            _ => self.result.fail(Some(self.at), &format!("expected a {role:?} message")),
        }
    }

    /// Panics unless this is a handoff to `new_agent`.
    pub fn is_agent_handoff(self, new_agent: &str) -> &'a AgentHandoff {
        match self.item() {
            ChatItem::AgentHandoff(h) if h.new_agent == new_agent => h,
            _ => self.result.fail(Some(self.at), &format!("expected a handoff to `{new_agent}`")),
        }
    }
}

/// A function call under expectation.
pub struct CallExpect<'a> {
    inner: EventExpect<'a>,
    call: &'a FunctionCall,
}

impl<'a> CallExpect<'a> {
    /// Panics unless the decoded arguments contain `args` (subset match).
    pub fn with_args(self, args: Value) -> Self {
        if !args_match(&self.call.arguments, &args) {
            self.inner
                .result
                .fail(Some(self.inner.at), &format!("expected arguments containing {args}"));
        }
        self
    }

    /// The call.
    pub fn event(&self) -> &'a FunctionCall {
        self.call
    }
}

/// A function call output under expectation.
pub struct OutputExpect<'a> {
    inner: EventExpect<'a>,
    output: &'a FunctionCallOutput,
}

impl<'a> OutputExpect<'a> {
    /// Panics unless the output text is exactly `text`.
    pub fn with_output(self, text: &str) -> Self {
        if self.output.output != text {
            self.inner.result.fail(Some(self.inner.at), &format!("expected output {text:?}"));
        }
        self
    }

    /// Panics unless the output reports an error (`true`) or does not (`false`).
    pub fn with_error(self, is_error: bool) -> Self {
        if self.output.is_error != is_error {
            self.inner.result.fail(Some(self.inner.at), &format!("expected is_error = {is_error}"));
        }
        self
    }

    /// The output.
    pub fn event(&self) -> &'a FunctionCallOutput {
        self.output
    }
}

/// A message under expectation.
pub struct MessageExpect<'a> {
    inner: EventExpect<'a>,
    message: &'a Message,
}

impl<'a> MessageExpect<'a> {
    /// Panics unless the text is exactly `text`.
    pub fn with_text(self, text: &str) -> Self {
        if self.message.text != text {
            self.inner.result.fail(Some(self.inner.at), &format!("expected text {text:?}"));
        }
        self
    }

    /// Panics unless the text contains `part`.
    pub fn containing(self, part: &str) -> Self {
        if !self.message.text.contains(part) {
            self.inner
                .result
                .fail(Some(self.inner.at), &format!("expected text containing {part:?}"));
        }
        self
    }

    /// The message.
    pub fn event(&self) -> &'a Message {
        self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use serde_json::json;

    fn result() -> RunResult {
        let at = |n| Timestamp::new(n, n);
        RunResult::new(vec![
            ChatItem::Message(Message {
                id: "m".into(),
                role: Role::Assistant,
                text: "done".into(),
                interrupted: false,
                created_at: at(3),
            }),
            ChatItem::FunctionCall(FunctionCall {
                id: "c".into(),
                call_id: "c1".into(),
                name: "book".into(),
                arguments: r#"{"trip": {"to": "Oslo", "seats": 2}}"#.into(),
                extra: Default::default(),
                created_at: at(1),
            }),
        ])
    }

    #[test]
    fn events_are_ordered_by_timestamp_and_matched_by_subset() {
        let r = result();
        let mut e = r.expect();
        e.next_event().is_function_call("book").with_args(json!({"trip": {"to": "Oslo"}}));
        e.next_event().is_message(Role::Assistant).with_text("done");
        e.no_more_events();
        r.contains_function_call("book", json!({"trip": {"seats": 2}}));
        r.contains_message(Role::Assistant);
    }

    #[test]
    fn a_failed_expectation_lists_every_event_with_a_marker() {
        let r = result();
        let panic = std::panic::catch_unwind(|| {
            r.expect().skip_next(1).next_event().is_function_call("book");
        })
        .unwrap_err();
        let text = panic.downcast_ref::<String>().unwrap();
        assert!(text.starts_with("run expectation failed: expected a function call `book`"));
        assert!(text.contains("   [0] function_call book#c1"), "{text}");
        assert!(text.contains(">> [1] message Assistant: \"done\""), "{text}");
    }

    #[test]
    fn no_more_events_fails_on_the_remaining_one() {
        let r = result();
        let panic =
            std::panic::catch_unwind(|| r.expect().skip_next(1).no_more_events()).unwrap_err();
        assert!(panic.downcast_ref::<String>().unwrap().contains(">> [1] message"));
        let wrong_args = std::panic::catch_unwind(|| {
            r.contains_function_call("book", json!({"trip": {"to": "Rome"}}));
        });
        assert!(wrong_args.is_err());
    }
}
