//! `tracing` spans: one tree per conversation — session → turn → speech → tool_call — with the
//! ids as fields, seen by a standard subscriber (a minimal recording one here).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use crate::common::*;
use colloquy::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[derive(Clone, Debug)]
struct SpanRecord {
    name: &'static str,
    fields: BTreeMap<String, String>,
    parent: Option<u64>,
}

/// An event: the name of the span it happened in, and its message.
type EventRecord = (Option<&'static str>, String);

#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    /// (span name, event message) for every event.
    events: Arc<Mutex<Vec<EventRecord>>>,
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let parent = if attrs.is_root() {
            None
        } else if let Some(parent) = attrs.parent() {
            Some(parent.into_u64())
        } else {
            STACK.with(|s| s.borrow().last().copied())
        };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push(SpanRecord { name: attrs.metadata().name(), fields, parent });
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let current = STACK.with(|s| s.borrow().last().copied());
        let name = current.map(|id| self.spans.lock().unwrap()[id as usize - 1].name);
        let message = fields.remove("message").unwrap_or_default();
        self.events.lock().unwrap().push((name, message));
    }

    fn enter(&self, id: &Id) {
        STACK.with(|s| s.borrow_mut().push(id.into_u64()));
    }

    fn exit(&self, id: &Id) {
        STACK.with(|s| {
            let mut stack = s.borrow_mut();
            if let Some(at) = stack.iter().rposition(|x| *x == id.into_u64()) {
                stack.remove(at);
            }
        });
    }
}

fn lookup() -> FunctionTool {
    FunctionTool::new("lookup", "Looks up.", |ctx: RunContext, _a: NoArgs| async move {
        tracing::info!("looking it up");
        ctx.update("halfway").await?;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        Ok::<_, ToolError>("found")
    })
}

#[tokio::test(start_paused = true)]
async fn sessions_turns_speeches_and_tool_calls_form_one_span_tree() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let script = vec![call("c1", "lookup", "{}"), text("Looking."), text("Found it.")];
    let h = Harness::start(Agent::new("A", "inst").tool(lookup()), script).await;
    h.turn("find it").await;
    h.session.wait_for_quiet().await.unwrap();
    h.session.wait_for_idle().await.unwrap();
    let session_id = h.session.id().to_string();
    h.close().await;

    let spans = recorder.spans.lock().unwrap().clone();
    let find = |name: &str| -> Vec<(u64, &SpanRecord)> {
        let all = spans.iter().enumerate().map(|(i, s)| (i as u64 + 1, s));
        all.filter(|(_, s)| s.name == name).collect()
    };
    let sessions = find("session");
    assert_eq!(sessions.len(), 1);
    let (session, record) = sessions[0];
    assert_eq!(record.fields["session_id"], session_id);
    assert_eq!(record.parent, None);

    let turns = find("turn");
    assert_eq!(turns.len(), 1);
    let (turn, record) = turns[0];
    assert_eq!(record.parent, Some(session));
    assert_eq!(record.fields["turn"], "1");
    assert_eq!(record.fields["agent"], "A");

    // The user turn's speech hangs under the turn; the deferred reply under the session.
    let speeches = find("speech");
    let by_id: BTreeMap<&str, &SpanRecord> =
        speeches.iter().map(|(_, s)| (s.fields["speech_id"].as_str(), *s)).collect();
    assert_eq!(by_id["s1"].parent, Some(turn));
    assert_eq!(by_id["s1"].fields["source"], "UserTurn");
    assert_eq!(by_id["s2"].parent, Some(session));
    assert_eq!(by_id["s2"].fields["source"], "DeferredReply");

    let calls = find("tool_call");
    assert_eq!(calls.len(), 1);
    let (_, call) = calls[0];
    let s1 = speeches.iter().find(|(_, s)| s.fields["speech_id"] == "s1").unwrap().0;
    assert_eq!(call.parent, Some(s1));
    assert_eq!(call.fields["call_id"], "c1");
    assert_eq!(call.fields["name"], "lookup");
    assert_eq!(call.fields["session_id"], session_id);

    // What the tool logs lands in its call's span.
    let events = recorder.events.lock().unwrap().clone();
    assert!(events.contains(&(Some("tool_call"), "looking it up".to_string())), "{events:?}");
}
