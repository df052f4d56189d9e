//! A timeline view of a session: a self-contained HTML page (inline SVG, inline CSS, no script,
//! no network) drawn from the session's events.
//!
//! Lanes from top to bottom: the user (each message a mark, each spell of speaking a bar), the
//! agent (each speech a bar from `speech_created` to `speech_done`, by source; interrupted ones
//! outlined), then one lane per tool call (a bar from start to end coloured by status, its
//! updates as ticks). Curves link each update to the deferred reply that carried it; handoffs
//! are dashed dividers across every lane; errors are red marks on the agent lane. Every shape
//! has a `<title>` (hover text) and `data-*` attributes naming what it shows; the legend names
//! every colour and mark.
//!
//! The label column is as wide as its labels need, within bounds: a label longer than that
//! (a provider's 32-character call id) is shortened with an ellipsis and clipped to its column,
//! and its `<title>` holds it whole. The axis counts in milliseconds, seconds or minutes and
//! seconds, by the session's span.
//!
//! ```
//! use colloquy_model::{EventKind, SessionEvent, timeline};
//! let events = vec![
//!     SessionEvent { at_ms: 0, kind: EventKind::ToolCallStarted { call_id: "c1".into(), name: "book".into() } },
//!     SessionEvent { at_ms: 400, kind: EventKind::ToolCallEnded {
//!         id: "c1".into(), call_id: "c1".into(), status: colloquy_model::ToolCallStatus::Done, message: None, cached: false } },
//! ];
//! let html = timeline::render_html(&events, "booking");
//! assert!(html.contains(r#"data-call-id="c1""#) && html.contains("status-done"));
//! ```

mod model;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::event::SessionEvent;
use model::{Model, name};

const WIDTH: f64 = 1200.0;
/// The label column's width at least and at most; the bars get the rest.
const LABEL_MIN: f64 = 190.0;
const LABEL_MAX: f64 = 320.0;
/// Room left and right of a label in its column.
const LABEL_PAD: f64 = 8.0;
/// A generous average advance of the labels' glyphs (12 px, semibold sans-serif): no font
/// metrics here, so the estimate errs wide, and the column clips what still overflows.
const CHAR_W: f64 = 7.4;
/// Call ids longer than this show their first `ID_SHOWN` characters and an ellipsis.
const ID_MAX: usize = 14;
const ID_SHOWN: usize = 10;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const ROW_H: f64 = 34.0;
const BAR_H: f64 = 18.0;

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

/// How the axis writes a time: the unit follows the session's span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// `250 ms`, for spans under two seconds.
    Ms,
    /// `1.5 s`, `20 s`, for spans under two minutes.
    S,
    /// `2:30`, beyond.
    MinS,
}

/// The axis's unit and a round step between its labels, giving about eight of them.
fn axis_scale(end_ms: u64) -> (Unit, u64) {
    let rough = (end_ms / 8).max(1);
    let first_over = |steps: &[u64]| steps.iter().copied().find(|&s| s >= rough);
    if end_ms < 2_000 {
        let magnitude = 10u64.pow(rough.ilog10());
        let step = first_over(&[magnitude, 2 * magnitude, 5 * magnitude]);
        (Unit::Ms, step.unwrap_or(10 * magnitude))
    } else if end_ms < 120_000 {
        let step = first_over(&[500, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000]);
        (Unit::S, step.unwrap_or(30_000))
    } else {
        let minutes = [30, 60, 120, 300, 600, 900, 1_800, 3_600].map(|s| s * 1_000);
        // Past eight hours: whole hours.
        let step = first_over(&minutes).unwrap_or(rough.div_ceil(3_600_000) * 3_600_000);
        (Unit::MinS, step)
    }
}

/// `at` as `unit` writes it.
fn format_time(at: u64, unit: Unit) -> String {
    match unit {
        Unit::Ms => format!("{at} ms"),
        Unit::S if at.is_multiple_of(1_000) => format!("{} s", at / 1_000),
        Unit::S => format!("{:.1} s", at as f64 / 1_000.0),
        Unit::MinS => format!("{}:{:02}", at / 60_000, at % 60_000 / 1_000),
    }
}

/// `text` in at most `max` characters, the last an ellipsis when it was longer.
fn ellipsize(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut short: String = text.chars().take(max.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// The lanes' labels: (lane, label shown, whole label).
fn lane_labels(m: &Model) -> Vec<(String, String, String)> {
    let fits = ((LABEL_MAX - 2.0 * LABEL_PAD) / CHAR_W) as usize;
    let agent = format!("agent {}", m.first_agent.as_deref().unwrap_or(""));
    let mut labels = vec![
        ("user".to_string(), "user".to_string(), "user".to_string()),
        ("agent".into(), ellipsize(&agent, fits), agent),
    ];
    for call in &m.calls {
        // The start of an id tells calls apart; the tooltip and `data-call-id` hold it whole.
        let id = match call.call_id.chars().count() > ID_MAX {
            true => ellipsize(&call.call_id, ID_SHOWN + 1),
            false => call.call_id.clone(),
        };
        let shown = format!("{} ({id})", call.name);
        let whole = format!("{} ({})", call.name, call.call_id);
        labels.push((format!("call:{}", call.call_id), ellipsize(&shown, fits), whole));
    }
    labels
}

/// The label column's width: room for the longest label shown, within bounds.
fn label_width(labels: &[(String, String, String)]) -> f64 {
    let longest = labels.iter().map(|(_, shown, _)| shown.chars().count()).max().unwrap_or(0);
    (longest as f64 * CHAR_W + 2.0 * LABEL_PAD).clamp(LABEL_MIN, LABEL_MAX)
}

struct Canvas {
    end_ms: u64,
    /// Where the bars start: the label column's width.
    left: f64,
}

impl Canvas {
    fn x(&self, at: u64) -> f64 {
        self.left + (at as f64) * (WIDTH - self.left - RIGHT) / (self.end_ms as f64)
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
    let labels = lane_labels(&m);
    let c = Canvas { end_ms: m.end_ms, left: label_width(&labels) };
    let rows = 2 + m.calls.len();
    let bottom = row_y(rows);
    let legend_rows = legend_layout().last().map_or(1, |item| item.row + 1);
    let height = bottom + 40.0 + legend_rows as f64 * LEGEND_ROW_H + 12.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">"#
    );
    lanes(&mut svg, &labels);
    // Labels stay in their column whatever their real width turns out to be (after the lanes,
    // whose stripes count their places among the drawing's children).
    let _ = write!(
        svg,
        r#"<defs><clipPath id="label-column"><rect x="0" y="0" width="{w}" height="{height}"/></clipPath></defs>"#,
        w = c.left - LABEL_PAD / 2.0,
    );
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
fn lanes(svg: &mut String, labels: &[(String, String, String)]) {
    for (row, (lane, shown, whole)) in labels.iter().enumerate() {
        let y = row_y(row);
        let _ = write!(
            svg,
            r#"<g class="lane" data-lane="{lane}"><rect class="lane-bg" x="0" y="{y}" width="{WIDTH}" height="{ROW_H}"/><text class="lane-label" x="{LABEL_PAD}" y="{ty}" clip-path="url(#label-column)"><title>{whole}</title>{shown}</text></g>"#,
            lane = esc(lane),
            ty = y + ROW_H / 2.0 + 4.0,
            whole = esc(whole),
            shown = esc(shown),
        );
    }
}

/// The time axis and its grid.
fn axis(svg: &mut String, m: &Model, c: &Canvas, bottom: f64) {
    let (unit, step) = axis_scale(m.end_ms);
    let _ = write!(svg, r#"<g class="axis">"#);
    let mut t = 0;
    while t <= m.end_ms {
        let x = c.x(t);
        let _ = write!(
            svg,
            r#"<line class="gridline" x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{bottom}"/><text class="tick-label" x="{x:.1}" y="{ty}">{label}</text>"#,
            y1 = TOP - 6.0,
            ty = TOP - 12.0,
            label = format_time(t, unit),
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
<p class="summary">{span} · {speeches} speeches · {calls} tool calls ({calls_done} ended) · {replies} deferred-reply links · {handoffs} handoffs · {errors} errors</p>
{svg}
</body>
</html>
"#,
        t = esc(title),
        span = match axis_scale(m.end_ms).0 {
            Unit::MinS => format!("{} min", format_time(m.end_ms, Unit::MinS)),
            unit => format_time(m.end_ms, unit),
        },
        speeches = m.speeches.len(),
        calls = m.calls.len(),
        replies = m.replies.len(),
        handoffs = m.handoffs.len(),
        errors = m.errors.len(),
    );
    page
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, Debug)]
enum Swatch {
    /// A bar, with the classes of what it stands for.
    Bar(&'static str),
    /// The red dot of an error.
    Dot,
    /// An update's tick.
    Tick,
    /// The dashed curve from an update to the deferred reply that carried it.
    Link,
}

/// Every colour and mark the drawing uses. Swatches have classes of their own where a test or
/// a reader of the page picks the drawing's marks by class.
const LEGEND: [(Swatch, &str); 13] = [
    (Swatch::Bar("speech source-user_turn"), "reply to the user"),
    (Swatch::Bar("speech source-deferred_reply"), "deferred reply"),
    (Swatch::Bar("speech source-say"), "say / other"),
    (Swatch::Bar("speech source-user_turn interrupted"), "interrupted"),
    (Swatch::Bar("tool-bar status-done"), "call done"),
    (Swatch::Bar("tool-bar status-error"), "call error"),
    (Swatch::Bar("tool-bar status-timed_out"), "call timed out"),
    (Swatch::Bar("tool-bar status-rejected"), "call rejected"),
    (Swatch::Bar("tool-bar status-cancelled"), "call cancelled"),
    (Swatch::Bar("tool-bar status-running"), "still running"),
    (Swatch::Tick, "update"),
    (Swatch::Link, "update → its deferred reply"),
    (Swatch::Dot, "error"),
];
const LEGEND_ROW_H: f64 = 20.0;
/// The legend's text is 12 px regular: narrower than the labels.
const LEGEND_CHAR_W: f64 = 6.8;

/// One legend entry placed: its row, and its x in that row.
struct Placed {
    swatch: Swatch,
    label: &'static str,
    row: usize,
    x: f64,
}

/// The legend's entries in rows that fit the drawing's width.
fn legend_layout() -> Vec<Placed> {
    let mut placed = Vec::with_capacity(LEGEND.len());
    let (mut row, mut x) = (0, LABEL_PAD);
    for (swatch, label) in LEGEND {
        let w = 18.0 + label.chars().count() as f64 * LEGEND_CHAR_W + 22.0;
        if x + w > WIDTH - RIGHT && x > LABEL_PAD {
            (row, x) = (row + 1, LABEL_PAD);
        }
        placed.push(Placed { swatch, label, row, x });
        x += w;
    }
    placed
}

fn legend(svg: &mut String, top: f64) {
    let _ = write!(svg, r#"<g class="legend">"#);
    for Placed { swatch, label, row, x } in legend_layout() {
        let y = top + row as f64 * LEGEND_ROW_H;
        let _ = match swatch {
            Swatch::Bar(class) => {
                write!(svg, r#"<rect class="{class}" x="{x}" y="{y}" width="14" height="12"/>"#)
            }
            Swatch::Dot => write!(
                svg,
                r#"<circle class="swatch-error" cx="{cx}" cy="{cy}" r="5"/>"#,
                cx = x + 7.0,
                cy = y + 6.0,
            ),
            Swatch::Tick => write!(
                svg,
                r#"<line class="swatch-tick" x1="{tx}" y1="{y}" x2="{tx}" y2="{y2}"/>"#,
                tx = x + 7.0,
                y2 = y + 12.0,
            ),
            Swatch::Link => write!(
                svg,
                r#"<path class="swatch-link" d="M {x} {y} C {x} {mid}, {x2} {mid}, {x2} {y2}"/>"#,
                mid = y + 6.0,
                x2 = x + 14.0,
                y2 = y + 12.0,
            ),
        };
        let _ =
            write!(svg, r#"<text x="{tx}" y="{ty}">{label}</text>"#, tx = x + 18.0, ty = y + 11.0);
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
.tool-bar.status-timed_out { fill: #b7791f; }
.tool-bar.status-rejected { fill: #a05195; }
.tool-bar.status-running { fill: #8fb8f0; }
.update-tick, .swatch-tick { stroke: #1d232b; stroke-width: 2; }
.reply-link, .swatch-link { fill: none; stroke: #f2994a; stroke-width: 1.5; stroke-dasharray: 4 3; }
.handoff line { stroke: #6d3fd1; stroke-width: 2; stroke-dasharray: 6 4; }
.handoff text { fill: #6d3fd1; font-weight: 600; }
.error, .swatch-error { fill: #d22; }
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ErrorSource;
    use crate::event::{EventKind, ToolCallStatus};

    fn at(at_ms: u64, kind: EventKind) -> SessionEvent {
        SessionEvent { at_ms, kind }
    }

    fn call(start: u64, end: u64, call_id: &str, name: &str) -> [SessionEvent; 2] {
        let ended = EventKind::ToolCallEnded {
            id: call_id.into(),
            call_id: call_id.into(),
            status: ToolCallStatus::Done,
            message: None,
            cached: false,
        };
        [
            at(start, EventKind::ToolCallStarted { call_id: call_id.into(), name: name.into() }),
            at(end, ended),
        ]
    }

    /// The text of every element of `class` (a `<title>` inside it left out).
    fn texts(html: &str, class: &str) -> Vec<String> {
        html.split(&format!(r#"class="{class}""#))
            .skip(1)
            .map(|rest| {
                let body = &rest[rest.find('>').map_or(0, |i| i + 1)..];
                let body = match body.find("</title>") {
                    Some(i) if body.starts_with("<title>") => &body[i + "</title>".len()..],
                    _ => body,
                };
                body[..body.find('<').unwrap_or(body.len())].to_string()
            })
            .collect()
    }

    /// The x of the first bar drawn after `marker`.
    fn first_x_after(html: &str, marker: &str) -> f64 {
        let rest = &html[html.find(marker).expect(marker)..];
        let x = &rest[rest.find(" x=\"").expect("an x") + 4..];
        x[..x.find('"').unwrap()].parse().unwrap()
    }

    #[test]
    fn a_provider_length_call_id_is_shortened_in_its_label_and_whole_in_its_tooltip() {
        let id = "call_7Qm2xKfP9aLw3ZbT8vYc1NdR5sH";
        assert_eq!(id.len(), 32);
        let events: Vec<SessionEvent> = call(0, 900, id, "search_flights").into();
        let html = render_html(&events, "ids");
        let labels = texts(&html, "lane-label");
        assert_eq!(labels[2], "search_flights (call_7Qm2x…)");
        assert!(html.contains(&format!("<title>search_flights ({id})</title>")), "{html}");
        assert!(html.contains(&format!(r#"data-call-id="{id}""#)));
        // The bars start past the longest label, as estimated, and labels are clipped there.
        let left = first_x_after(&html, r#"class="tool-bar"#);
        let longest = labels.iter().map(|l| l.chars().count()).max().unwrap();
        assert!(left >= longest as f64 * CHAR_W + LABEL_PAD, "{left} for {labels:?}");
        assert!(html.contains(r#"clip-path="url(#label-column)""#));
    }

    #[test]
    fn the_label_column_grows_with_its_labels_and_then_ellipsizes_them() {
        let short: Vec<SessionEvent> = call(0, 900, "c1", "book").into();
        assert_eq!(first_x_after(&render_html(&short, "t"), r#"class="tool-bar"#), LABEL_MIN);
        let name = "a_tool_name_long_enough_to_need_more_than_the_column_can_hold";
        let long: Vec<SessionEvent> = call(0, 900, "c1", name).into();
        let html = render_html(&long, "t");
        let left = first_x_after(&html, r#"class="tool-bar"#);
        assert!(left <= LABEL_MAX && left > LABEL_MAX - CHAR_W, "{left}");
        let label = &texts(&html, "lane-label")[2];
        assert!(label.ends_with('…'), "{label}");
        assert!(label.chars().count() as f64 * CHAR_W + 2.0 * LABEL_PAD <= LABEL_MAX, "{label}");
    }

    #[test]
    fn the_legend_names_the_error_dot() {
        let events = vec![at(
            50,
            EventKind::Error { source: ErrorSource::Llm, message: "boom".into(), llm_error: None },
        )];
        let html = render_html(&events, "errors");
        assert!(html.contains(r#"<circle class="error""#));
        let legend = &html[html.find(r#"<g class="legend">"#).unwrap()..];
        let legend = &legend[..legend.find("</g>").unwrap()];
        assert!(legend.contains(r#"<circle class="swatch-error""#), "{legend}");
        assert!(legend.contains(">error</text>"), "{legend}");
        // Every entry fits the drawing's width.
        for item in legend_layout() {
            let w = 18.0 + item.label.chars().count() as f64 * LEGEND_CHAR_W;
            assert!(item.x + w <= WIDTH - RIGHT, "{} at {}", item.label, item.x);
        }
    }

    #[test]
    fn the_axis_unit_and_step_follow_the_span() {
        assert_eq!(axis_scale(400), (Unit::Ms, 50));
        assert_eq!(axis_scale(1_500), (Unit::Ms, 200));
        assert_eq!(axis_scale(3_000), (Unit::S, 500));
        assert_eq!(axis_scale(45_000), (Unit::S, 10_000));
        assert_eq!(axis_scale(150_000), (Unit::MinS, 30_000));
        assert_eq!(axis_scale(3_000_000), (Unit::MinS, 600_000));
        assert_eq!(axis_scale(40 * 3_600_000), (Unit::MinS, 5 * 3_600_000));
        assert_eq!(format_time(1_500, Unit::S), "1.5 s");
        assert_eq!(format_time(20_000, Unit::S), "20 s");
        assert_eq!(format_time(90_000, Unit::MinS), "1:30");
        assert_eq!(format_time(0, Unit::MinS), "0:00");
    }

    #[test]
    fn a_long_session_is_labelled_in_minutes_and_seconds() {
        let events: Vec<SessionEvent> = call(2_000, 150_000, "c1", "book").into();
        let html = render_html(&events, "long");
        let ticks = texts(&html, "tick-label");
        assert_eq!(ticks, ["0:00", "0:30", "1:00", "1:30", "2:00", "2:30"]);
        assert!(html.contains(r#"<p class="summary">2:30 min ·"#), "{html}");
        let short: Vec<SessionEvent> = call(0, 900, "c1", "book").into();
        let ticks = texts(&render_html(&short, "short"), "tick-label");
        assert_eq!(ticks.first().map(String::as_str), Some("0 ms"));
        assert_eq!(ticks.last().map(String::as_str), Some("800 ms"));
    }
}
