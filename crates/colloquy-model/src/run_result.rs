//! What one `SessionHandle::run` produced, and expectations over it (§17.1,
//! decision 9).
//!
//! A run records the items its speeches committed, ordered by timestamp: assistant messages,
//! function calls (unknown-tool and unparseable calls included, decision 9), their outputs,
//! and agent handoffs. The user's own message is not an event of its run. For each call of a
//! known tool it also records the validated arguments, what the tool's body received (`"25"`
//! sent for a number arrives as `25`): `with_args` matches what the model sent,
//! `with_validated_args` what the tool got.
//!
//! ```
//! use colloquy_model::{ChatItem, FunctionCall, FunctionCallOutput, Message, Role, RunResult, Timestamp};
//! use serde_json::json;
//! let at = Timestamp::default();
//! let mut result = RunResult::new(vec![
//!     ChatItem::FunctionCall(FunctionCall { id: "i1".into(), call_id: "c1".into(),
//!         name: "book_flight".into(), arguments: r#"{"to": "Paris", "seats": "2"}"#.into(),
//!         extra: Default::default(), created_at: at }),
//!     ChatItem::FunctionCallOutput(FunctionCallOutput { id: "i2".into(), call_id: "c1".into(),
//!         name: "book_flight".into(), output: "Booked: BK-1".into(), is_error: false,
//!         reply_required: true, created_at: at }),
//!     ChatItem::Message(Message { id: "i3".into(), role: Role::Assistant,
//!         text: "Booked: BK-1.".into(), interrupted: false, created_at: at }),
//! ]);
//! // What the session records for a call of a tool whose schema says `seats` is an integer.
//! result.set_validated_args("c1", json!({"to": "Paris", "seats": 2}));
//! let mut expect = result.expect();
//! expect.next_event().is_function_call("book_flight")
//!     .with_args(json!({"seats": "2"}))              // as the model sent it
//!     .with_validated_args(json!({"seats": 2}));     // as the tool received it
//! expect.next_event().is_function_call_output().containing("BK-1");
//! expect.next_event().is_message(Role::Assistant).matching(|text| text.ends_with('.'));
//! expect.no_more_events();
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::args::{parse_arguments, validate_arguments};
use crate::chat::{AgentHandoff, ChatItem, FunctionCall, FunctionCallOutput, Message, Role};
use crate::duplicate::{CONFIRM_PARAM, OnDuplicate, take_confirmation};
use crate::tool::FunctionTool;

/// The events of one run, in timestamp order, and the validated arguments of its calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunResult {
    events: Vec<ChatItem>,
    /// By call id (unique in a session, decision 24).
    validated: BTreeMap<String, Value>,
}

impl RunResult {
    /// A result holding `events` (sorted here by timestamp, stable).
    pub fn new(mut events: Vec<ChatItem>) -> Self {
        events.sort_by_key(ChatItem::created_at);
        Self { events, validated: BTreeMap::new() }
    }

    /// Records what call `call_id`'s tool received: its arguments after validation against
    /// the tool's schema. The session does this for every call of a tool it knows.
    pub fn set_validated_args(&mut self, call_id: impl Into<String>, args: Value) {
        self.validated.insert(call_id.into(), args);
    }

    /// The recorded events.
    pub fn events(&self) -> &[ChatItem] {
        &self.events
    }

    /// The validated arguments of call `call_id`: `None` for a call of an unknown tool, or
    /// whose arguments did not parse or validate (its output says why).
    pub fn validated_args(&self, call_id: &str) -> Option<&Value> {
        self.validated.get(call_id)
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

    /// Panics unless some function call has this name and its validated arguments (what the
    /// tool received, see [`validated_args`](Self::validated_args)) contain `args`
    /// (`Value::Null` matches any call that has them).
    pub fn contains_validated_call(&self, name: &str, args: Value) -> &FunctionCall {
        let found = self.events.iter().find_map(|e| {
            e.as_function_call().filter(|c| {
                c.name == name
                    && self.validated(c).is_some_and(|valid| args.is_null() || subset(&args, valid))
            })
        });
        found.unwrap_or_else(|| {
            self.fail(None, &format!("no function call `{name}` with validated arguments {args}"))
        })
    }

    fn validated(&self, call: &FunctionCall) -> Option<&Value> {
        self.validated.get(&call.call_id)
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
            let _ = write!(text, "{marker} [{i}] {}", describe(event));
            // The validated arguments, where they differ from what the model sent.
            if let Some(call) = event.as_function_call()
                && let Some(valid) = self.validated(call)
                && serde_json::from_str::<Value>(&call.arguments).ok().as_ref() != Some(valid)
            {
                let _ = write!(text, " (validated: {valid})");
            }
            text.push('\n');
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

/// What `tool`'s body receives for the argument text `arguments`, as the tool call computes
/// it (§5): parsed, the confirm parameter taken out (decision 11), validated against the
/// schema unless the tool is raw; `None` when the call fails before its body runs.
pub fn validated_arguments(tool: &FunctionTool, arguments: &str) -> Option<Value> {
    let mut parsed = parse_arguments(tool.name(), arguments).ok()?.value;
    let confirm = tool.duplicate_policy().0 == OnDuplicate::Confirm;
    if confirm {
        take_confirmation(tool.name(), &mut parsed).ok()?;
    }
    if tool.is_raw() {
        return Some(Value::Object(parsed));
    }
    let mut valid = validate_arguments(tool.name(), tool.parameters(), parsed).ok()?;
    if confirm && let Value::Object(map) = &mut valid {
        // The schema's default fills it back in; it is the runtime's, not the tool's.
        map.remove(CONFIRM_PARAM);
    }
    Some(valid)
}

/// Whether the call's argument text decodes to an object containing `expected`.
/// `Value::Null` matches anything.
fn args_match(arguments: &str, expected: &Value) -> bool {
    if expected.is_null() {
        return true;
    }
    serde_json::from_str::<Value>(arguments).is_ok_and(|actual| subset(expected, &actual))
}

/// Whether `actual` contains `expected`: an object's listed keys match recursively (others
/// are ignored), an array matches element by element, numbers by value (`25` matches `25.0`,
/// as the tool's `f64` receives either), anything else by equality.
fn subset(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            e.iter().all(|(k, v)| a.get(k).is_some_and(|av| subset(v, av)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(ev, av)| subset(ev, av))
        }
        (Value::Number(e), Value::Number(a)) if e.is_f64() || a.is_f64() => {
            e.as_f64() == a.as_f64()
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

    /// Panics unless the validated arguments, what the tool received, contain `args`
    /// (the same subset match; see [`RunResult::validated_args`]). A call whose arguments did
    /// not validate, or of an unknown tool, has none and fails.
    pub fn with_validated_args(self, args: Value) -> Self {
        let result = self.inner.result;
        match result.validated(self.call) {
            Some(valid) if args.is_null() || subset(&args, valid) => {}
            Some(_) => result.fail(
                Some(self.inner.at),
                &format!("expected validated arguments containing {args}"),
            ),
            None => result.fail(
                Some(self.inner.at),
                &format!(
                    "expected validated arguments containing {args}, but the call has none \
                     (an unknown tool, or arguments that did not parse or validate)"
                ),
            ),
        }
        self
    }

    /// The call's validated arguments, if it has them.
    pub fn validated_args(&self) -> Option<&'a Value> {
        self.inner.result.validated(self.call)
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

    /// Panics unless the output text contains `part`: a background call's first output is
    /// its first update wrapped in the update template, so an exact match would spell out
    /// the template.
    pub fn containing(self, part: &str) -> Self {
        if !self.output.output.contains(part) {
            self.inner
                .result
                .fail(Some(self.inner.at), &format!("expected output containing {part:?}"));
        }
        self
    }

    /// Panics unless `predicate` holds for the output text.
    pub fn matching(self, predicate: impl FnOnce(&str) -> bool) -> Self {
        if !predicate(&self.output.output) {
            self.inner.result.fail(Some(self.inner.at), "expected an output the predicate accepts");
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

    /// Panics unless `predicate` holds for the text.
    pub fn matching(self, predicate: impl FnOnce(&str) -> bool) -> Self {
        if !predicate(&self.message.text) {
            self.inner.result.fail(Some(self.inner.at), "expected a text the predicate accepts");
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

    #[test]
    fn validated_arguments_match_numbers_by_value_and_are_listed_on_failure() {
        let mut r = result();
        r.set_validated_args("c1", json!({"trip": {"to": "Oslo", "seats": 2.0}}));
        let mut e = r.expect();
        let call = e.next_event().is_function_call("book");
        call.with_validated_args(json!({"trip": {"seats": 2}}))
            .with_args(json!({"trip": {"seats": 2.0}}));
        r.contains_validated_call("book", json!({"trip": {"to": "Oslo"}}));
        let panic = std::panic::catch_unwind(|| {
            r.expect().next_event().is_function_call("book").with_validated_args(json!({"x": 1}));
        })
        .unwrap_err();
        let text = panic.downcast_ref::<String>().unwrap();
        assert!(text.contains("validated: {\"trip\""), "{text}");
        let none = std::panic::catch_unwind(|| {
            result().expect().next_event().is_function_call("book").with_validated_args(json!({}));
        })
        .unwrap_err();
        assert!(none.downcast_ref::<String>().unwrap().contains("the call has none"));
    }

    #[test]
    fn outputs_match_by_substring_or_predicate() {
        let at = Timestamp::new(1, 1);
        let r = RunResult::new(vec![ChatItem::FunctionCallOutput(FunctionCallOutput {
            id: "o".into(),
            call_id: "c1".into(),
            name: "book".into(),
            output: "Still working: searching flights".into(),
            is_error: false,
            reply_required: true,
            created_at: at,
        })]);
        r.expect()
            .next_event()
            .is_function_call_output()
            .containing("searching")
            .matching(|text| text.starts_with("Still"))
            .with_error(false);
        let exact = std::panic::catch_unwind(|| {
            r.expect().next_event().is_function_call_output().containing("booked");
        })
        .unwrap_err();
        assert!(exact.downcast_ref::<String>().unwrap().contains("containing \"booked\""));
        let predicate = std::panic::catch_unwind(|| {
            r.expect().next_event().is_function_call_output().matching(str::is_empty);
        });
        assert!(predicate.is_err());
    }

    #[test]
    fn validated_arguments_are_what_the_body_receives() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)] // only its schema matters here
        struct Refund {
            order_id: String,
            amount: f64,
        }
        let tool = FunctionTool::new("refund", "", |_c: crate::RunContext, _a: Refund| async {
            Ok::<_, crate::ToolError>("ok")
        });
        let valid = validated_arguments(&tool, r#"{"order_id": "A1", "amount": "2.5", "x": 1}"#);
        assert_eq!(valid, Some(json!({"order_id": "A1", "amount": 2.5})));
        assert_eq!(validated_arguments(&tool, r#"{"amount": 1}"#), None);
        let confirm = tool.on_duplicate(OnDuplicate::Confirm, Default::default());
        let valid = validated_arguments(
            &confirm,
            r#"{"order_id": "A1", "amount": 2, "lk_agents_confirm_duplicate": true}"#,
        );
        assert_eq!(valid, Some(json!({"order_id": "A1", "amount": 2})));
    }
}
