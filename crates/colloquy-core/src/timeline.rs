//! A timeline view of a session: a self-contained HTML page (inline SVG, inline CSS, no script,
//! no network) drawn from the session's events.
//!
//! Lanes from top to bottom: the user (each message a mark, each spell of speaking a bar), the
//! agent (each speech a bar from `speech_created` to `speech_done`, by source; interrupted ones
//! outlined), then one lane per tool call (a bar from start to end coloured by status, its
//! updates as ticks). Curves link each update to the deferred reply that carried it; handoffs
//! are dashed dividers across every lane; errors are red marks on the agent lane. Every shape
//! has a `<title>` (hover text) and `data-*` attributes naming what it shows.
//!
//! ```
//! use colloquy_core::{EventKind, SessionEvent, timeline};
//! let events = vec![
//!     SessionEvent { at_ms: 0, kind: EventKind::ToolCallStarted { call_id: "c1".into(), name: "book".into() } },
//!     SessionEvent { at_ms: 400, kind: EventKind::ToolCallEnded {
//!         id: "c1".into(), call_id: "c1".into(), status: colloquy_core::ToolCallStatus::Done, message: None, cached: false } },
//! ];
//! let html = timeline::render_html(&events, "booking");
//! assert!(html.contains(r#"data-call-id="c1""#) && html.contains("status-done"));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::chat::{ChatItem, Role};
use crate::event::{EventKind, ReplyStatus, SessionEvent, ToolCallStatus, UserState};

const WIDTH: f64 = 1200.0;
const LABEL_W: f64 = 190.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const ROW_H: f64 = 34.0;
const BAR_H: f64 = 18.0;

/// One tool call's lane.
#[derive(Debug)]
struct Call {
    call_id: String,
    name: String,
    start: u64,
    end: Option<(u64, ToolCallStatus, Option<String>)>,
    /// (update id, at, message)
    updates: Vec<(String, u64, String)>,
}

#[derive(Debug)]
struct Speech {
    speech_id: String,
    source: String,
    start: u64,
    end: Option<(u64, bool)>,
}

/// What the page draws, gathered from the events.
#[derive(Debug, Default)]
struct Model {
    end_ms: u64,
    user_messages: Vec<(u64, String)>,
    /// Spells of user speech (start, end).
    user_speaking: Vec<(u64, Option<u64>)>,
    speeches: Vec<Speech>,
    calls: Vec<Call>,
    /// (update id, speech id) for each pair a scheduled deferred reply carries.
    replies: Vec<(String, String)>,
    /// (at, old agent, new agent) for handoffs after the first agent.
    handoffs: Vec<(u64, String, String)>,
    errors: Vec<(u64, String, String)>,
    first_agent: Option<String>,
}

fn name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Model {
    fn build(events: &[SessionEvent]) -> Self {
        let mut m = Model::default();
        let mut calls: BTreeMap<String, usize> = BTreeMap::new();
        let mut speeches: BTreeMap<String, usize> = BTreeMap::new();
        for event in events {
            let at = event.at_ms;
            m.end_ms = m.end_ms.max(at);
            match &event.kind {
                EventKind::ConversationItemAdded { item } => {
                    if let ChatItem::Message(msg) = &**item
                        && msg.role == Role::User
                    {
                        m.user_messages.push((at, msg.text.clone()));
                    }
                }
                EventKind::UserState { state } => match state {
                    UserState::Speaking => m.user_speaking.push((at, None)),
                    _ => {
                        if let Some(last) = m.user_speaking.last_mut()
                            && last.1.is_none()
                        {
                            last.1 = Some(at);
                        }
                    }
                },
                EventKind::SpeechCreated { speech_id, source } => {
                    speeches.insert(speech_id.clone(), m.speeches.len());
                    m.speeches.push(Speech {
                        speech_id: speech_id.clone(),
                        source: name(source),
                        start: at,
                        end: None,
                    });
                }
                EventKind::SpeechDone { speech_id, interrupted } => {
                    if let Some(&i) = speeches.get(speech_id) {
                        m.speeches[i].end = Some((at, *interrupted));
                    }
                }
                EventKind::ToolCallStarted { call_id, name } => {
                    calls.insert(call_id.clone(), m.calls.len());
                    m.calls.push(Call {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        start: at,
                        end: None,
                        updates: Vec::new(),
                    });
                }
                EventKind::ToolCallUpdated { id, call_id, message, .. } => {
                    if let Some(&i) = calls.get(call_id) {
                        m.calls[i].updates.push((id.clone(), at, message.clone()));
                    }
                }
                EventKind::ToolCallEnded { call_id, status, message, .. } => {
                    if let Some(&i) = calls.get(call_id) {
                        m.calls[i].end = Some((at, *status, message.clone()));
                    }
                }
                EventKind::ToolReplyUpdated { update_ids, status, speech_id, .. }
                    if *status == ReplyStatus::Scheduled =>
                {
                    for id in update_ids {
                        m.replies.push((id.clone(), speech_id.clone()));
                    }
                }
                EventKind::AgentHandoff { old_agent, new_agent } => match old_agent {
                    Some(old) => m.handoffs.push((at, old.clone(), new_agent.clone())),
                    None => m.first_agent = Some(new_agent.clone()),
                },
                EventKind::Error { source, message, .. } => {
                    m.errors.push((at, name(source), message.clone()));
                }
                _ => {}
            }
        }
        m.end_ms = m.end_ms.max(1);
        m
    }
}

/// Escapes text for XML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A step for axis labels giving about eight of them.
fn axis_step(end_ms: u64) -> u64 {
    let rough = (end_ms / 8).max(1);
    let magnitude = 10u64.pow(rough.ilog10());
    for factor in [1, 2, 5, 10] {
        if magnitude * factor >= rough {
            return magnitude * factor;
        }
    }
    magnitude * 10
}

struct Canvas {
    end_ms: u64,
}

impl Canvas {
    fn x(&self, at: u64) -> f64 {
        LABEL_W + (at as f64) * (WIDTH - LABEL_W - RIGHT) / (self.end_ms as f64)
    }

    /// A bar from `start` to `end`, at least 3 px wide.
    fn span(&self, start: u64, end: u64) -> (f64, f64) {
        let x = self.x(start);
        (x, (self.x(end) - x).max(3.0))
    }
}

fn row_y(row: usize) -> f64 {
    TOP + row as f64 * ROW_H
}

/// Renders the timeline of `events` as a self-contained HTML page titled `title`.
pub fn render_html(events: &[SessionEvent], title: &str) -> String {
    let m = Model::build(events);
    let c = Canvas { end_ms: m.end_ms };
    let rows = 2 + m.calls.len();
    let height = TOP + rows as f64 * ROW_H + 70.0;
    let bottom = row_y(rows);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    lanes(&mut svg, &m);
    axis(&mut svg, &m, &c, bottom);
    user_lane(&mut svg, &m, &c);
    let speech_x = agent_lane(&mut svg, &m, &c);
    let update_at = call_lanes(&mut svg, &m, &c);
    reply_links(&mut svg, &m, &update_at, &speech_x);
    handoffs(&mut svg, &m, &c, bottom);
    legend(&mut svg, bottom + 40.0);
    svg.push_str("</svg>");
    page(&m, title, &svg)
}

/// Where a bar of lane `row` starts vertically.
fn bar_y(row: usize) -> f64 {
    row_y(row) + (ROW_H - BAR_H) / 2.0
}

/// The lanes (the user, the agent, one per call) and their labels.
fn lanes(svg: &mut String, m: &Model) {
    let mut labels = vec![("user".to_string(), "user".to_string())];
    labels.push(("agent".into(), format!("agent {}", m.first_agent.as_deref().unwrap_or(""))));
    for call in &m.calls {
        labels
            .push((format!("call:{}", call.call_id), format!("{} ({})", call.name, call.call_id)));
    }
    for (row, (lane, label)) in labels.iter().enumerate() {
        let y = row_y(row);
        let _ = write!(
            svg,
            r#"<g class="lane" data-lane="{lane}"><rect class="lane-bg" x="0" y="{y}" width="{WIDTH}" height="{ROW_H}"/><text class="lane-label" x="8" y="{ty}">{label}</text></g>"#,
            lane = esc(lane),
            ty = y + ROW_H / 2.0 + 4.0,
            label = esc(label),
        );
    }
}

/// The time axis and its grid.
fn axis(svg: &mut String, m: &Model, c: &Canvas, bottom: f64) {
    let step = axis_step(m.end_ms);
    let _ = write!(svg, r#"<g class="axis">"#);
    let mut t = 0;
    while t <= m.end_ms {
        let x = c.x(t);
        let _ = write!(
            svg,
            r#"<line class="gridline" x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{bottom}"/><text class="tick-label" x="{x:.1}" y="{ty}">{t} ms</text>"#,
            y1 = TOP - 6.0,
            ty = TOP - 12.0,
        );
        t += step;
    }
    let _ = write!(svg, "</g>");
}

/// The user's speaking spans and turns.
fn user_lane(svg: &mut String, m: &Model, c: &Canvas) {
    for (start, end) in &m.user_speaking {
        let (x, w) = c.span(*start, end.unwrap_or(m.end_ms));
        let _ = write!(
            svg,
            r#"<rect class="user-speech" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{BAR_H}"><title>user speaking {start}–{e} ms</title></rect>"#,
            y = bar_y(0),
            e = end.unwrap_or(m.end_ms),
        );
    }
    for (at, text) in &m.user_messages {
        let x = c.x(*at);
        let _ = write!(
            svg,
            r#"<rect class="user-turn" x="{x:.1}" y="{y:.1}" width="4" height="{BAR_H}"><title>{at} ms, user: {t}</title></rect>"#,
            y = bar_y(0),
            t = esc(text),
        );
    }
}

/// The agent's speeches and the errors; returns where each speech starts.
fn agent_lane<'m>(svg: &mut String, m: &'m Model, c: &Canvas) -> BTreeMap<&'m str, f64> {
    let mut speech_x: BTreeMap<&str, f64> = BTreeMap::new();
    for s in &m.speeches {
        let (end, interrupted) = s.end.unwrap_or((m.end_ms, false));
        let (x, w) = c.span(s.start, end);
        speech_x.insert(&s.speech_id, x);
        let _ = write!(
            svg,
            r#"<rect class="speech source-{src}{int}" data-speech-id="{id}" data-source="{src}" data-interrupted="{interrupted}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{BAR_H}"><title>{id} ({src}) {start}–{end} ms{note}</title></rect>"#,
            src = esc(&s.source),
            int = if interrupted { " interrupted" } else { "" },
            id = esc(&s.speech_id),
            y = bar_y(1),
            start = s.start,
            note = if interrupted { ", interrupted" } else { "" },
        );
    }
    for (at, source, message) in &m.errors {
        let _ = write!(
            svg,
            r#"<circle class="error" data-source="{src}" cx="{x:.1}" cy="{y:.1}" r="5"><title>{at} ms, {src} error: {msg}</title></circle>"#,
            src = esc(source),
            x = c.x(*at),
            y = row_y(1) + ROW_H - 5.0,
            msg = esc(message),
        );
    }
    speech_x
}

/// Tool calls, with their updates; returns where each update sits, for the reply links.
fn call_lanes(svg: &mut String, m: &Model, c: &Canvas) -> BTreeMap<String, (f64, f64)> {
    let mut update_at: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (i, call) in m.calls.iter().enumerate() {
        let row = 2 + i;
        let (end, status) = match &call.end {
            Some((at, status, _)) => (*at, name(status)),
            None => (m.end_ms, "running".to_string()),
        };
        let (x, w) = c.span(call.start, end);
        let message = call.end.as_ref().and_then(|e| e.2.as_deref()).unwrap_or("");
        let _ = write!(
            svg,
            r#"<g class="tool-call" data-call-id="{id}" data-name="{name}" data-status="{status}"><rect class="tool-bar status-{status}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{BAR_H}"><title>{name} ({id}) {start}–{end} ms: {status} {msg}</title></rect>"#,
            id = esc(&call.call_id),
            name = esc(&call.name),
            y = bar_y(row),
            start = call.start,
            msg = esc(message),
        );
        for (update_id, at, text) in &call.updates {
            let ux = c.x(*at);
            let (y1, y2) = (row_y(row) + 3.0, row_y(row) + ROW_H - 3.0);
            update_at.insert(update_id.clone(), (ux, y1));
            let _ = write!(
                svg,
                r#"<line class="update-tick" data-update-id="{uid}" x1="{ux:.1}" y1="{y1}" x2="{ux:.1}" y2="{y2}"><title>{at} ms, update {uid}: {t}</title></line>"#,
                uid = esc(update_id),
                t = esc(text),
            );
        }
        if let Some((at, ..)) = &call.end {
            update_at.insert(format!("{}_final", call.call_id), (c.x(*at), row_y(row) + 3.0));
        }
        let _ = write!(svg, "</g>");
    }
    update_at
}

/// Deferred replies, linked to the updates they carry.
fn reply_links(
    svg: &mut String,
    m: &Model,
    update_at: &BTreeMap<String, (f64, f64)>,
    speech_x: &BTreeMap<&str, f64>,
) {
    for (update_id, speech_id) in &m.replies {
        let (Some(&(ux, uy)), Some(&sx)) =
            (update_at.get(update_id), speech_x.get(speech_id.as_str()))
        else {
            continue;
        };
        let sy = bar_y(1) + BAR_H;
        let mid = (uy + sy) / 2.0;
        let _ = write!(
            svg,
            r#"<path class="reply-link" data-update-id="{uid}" data-speech-id="{sid}" d="M {ux:.1} {uy:.1} C {ux:.1} {mid:.1}, {sx:.1} {mid:.1}, {sx:.1} {sy:.1}"><title>{uid} delivered by {sid}</title></path>"#,
            uid = esc(update_id),
            sid = esc(speech_id),
        );
    }
}

/// Handoffs, across every lane.
fn handoffs(svg: &mut String, m: &Model, c: &Canvas, bottom: f64) {
    for (at, old, new) in &m.handoffs {
        let x = c.x(*at);
        let _ = write!(
            svg,
            r#"<g class="handoff" data-from="{o}" data-to="{n}"><line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{bottom}"/><text x="{tx:.1}" y="{ty}">{o} → {n}</text><title>{at} ms, handoff {o} → {n}</title></g>"#,
            o = esc(old),
            n = esc(new),
            y1 = TOP - 4.0,
            tx = x + 4.0,
            ty = bottom + 16.0,
        );
    }
}

/// The page around the drawing, with its summary line.
fn page(m: &Model, title: &str, svg: &str) -> String {
    let calls_done = m.calls.iter().filter(|c| c.end.is_some()).count();
    let mut page = String::new();
    let _ = write!(
        page,
        r#"<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>{t} — colloquy timeline</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{t}</h1>
<p class="summary">{ms} ms · {speeches} speeches · {calls} tool calls ({calls_done} ended) · {replies} deferred-reply links · {handoffs} handoffs · {errors} errors</p>
{svg}
</body>
</html>
"#,
        t = esc(title),
        ms = m.end_ms,
        speeches = m.speeches.len(),
        calls = m.calls.len(),
        replies = m.replies.len(),
        handoffs = m.handoffs.len(),
        errors = m.errors.len(),
    );
    page
}

fn legend(svg: &mut String, y: f64) {
    let items = [
        ("speech source-user_turn", "reply to the user"),
        ("speech source-deferred_reply", "deferred reply"),
        ("speech source-say", "say / other"),
        ("tool-bar status-done", "call done"),
        ("tool-bar status-error", "call error"),
        ("tool-bar status-cancelled", "call cancelled"),
        ("tool-bar status-running", "still running"),
    ];
    let _ = write!(svg, r#"<g class="legend">"#);
    for (i, (class, label)) in items.iter().enumerate() {
        let x = LABEL_W + i as f64 * 140.0;
        let _ = write!(
            svg,
            r#"<rect class="{class}" x="{x}" y="{y}" width="14" height="12"/><text x="{tx}" y="{ty}">{label}</text>"#,
            tx = x + 18.0,
            ty = y + 11.0,
        );
    }
    let _ = write!(svg, "</g>");
}

const STYLE: &str = "
body { font: 13px system-ui, sans-serif; margin: 16px; color: #1d232b; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; }
.summary { color: #5b6673; margin: 0 0 12px; }
svg text { font: 12px system-ui, sans-serif; fill: #1d232b; }
.lane-bg { fill: #fff; stroke: #eef1f4; }
.lane:nth-child(even) .lane-bg { fill: #f8fafc; }
.lane-label { font-weight: 600; }
.gridline { stroke: #e3e7ec; }
.tick-label { fill: #5b6673; font-size: 11px; text-anchor: middle; }
.user-turn { fill: #6d3fd1; }
.user-speech { fill: #c9b6f2; }
.speech { fill: #2f80ed; }
.speech.source-deferred_reply { fill: #f2994a; }
.speech.source-say, .speech.source-generate_reply, .speech.source-on_enter { fill: #56ccf2; }
.speech.interrupted { stroke: #d22; stroke-width: 2; stroke-dasharray: 3 2; }
.tool-bar.status-done { fill: #27ae60; }
.tool-bar.status-error { fill: #eb5757; }
.tool-bar.status-cancelled { fill: #9aa3ad; }
.tool-bar.status-timed_out { fill: #f2994a; }
.tool-bar.status-running { fill: #8fb8f0; }
.update-tick { stroke: #1d232b; stroke-width: 2; }
.reply-link { fill: none; stroke: #f2994a; stroke-width: 1.5; stroke-dasharray: 4 3; }
.handoff line { stroke: #6d3fd1; stroke-width: 2; stroke-dasharray: 6 4; }
.handoff text { fill: #6d3fd1; font-weight: 600; }
.error { fill: #d22; }
";
