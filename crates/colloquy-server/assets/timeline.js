// The session's timeline as SVG: one lane per speech and per tool call, from its start to its
// end (or to the latest event while it runs), with a mark at each update; the user's turns are
// marks on a lane of their own. Times are the events' `at_ms` (the session's clock).

const SVG = 'http://www.w3.org/2000/svg';
const LABEL_WIDTH = 150;
const WIDTH = 900;
const LANE = 22;
const AXIS = 20;
/** How often running lanes grow between events (ms). */
const TICK_MS = 250;

/** Lanes in order of appearance, and the marks drawn on them. */
export class Timeline {
  constructor(svg) {
    this.svg = svg;
    this.lanes = new Map();
    this.userMarks = [];
    this.now = 0;
    this.scheduled = false;
  }

  lane(key, label, kind, start) {
    if (!this.lanes.has(key)) this.lanes.set(key, { label, kind, start, end: null, status: 'running', marks: [] });
    return this.lanes.get(key);
  }

  /** Takes one event; the drawing is redrawn once per animation frame. */
  add(event) {
    const at = event.at_ms;
    this.now = Math.max(this.now, at);
    this.seen = { at: this.now, wall: performance.now() };
    switch (event.type) {
      case 'speech_created':
        this.lane(`speech:${event.speech_id}`, `${event.speech_id} ${event.source}`, 'speech', at);
        break;
      case 'speech_done': {
        const lane = this.lanes.get(`speech:${event.speech_id}`);
        if (lane) Object.assign(lane, { end: at, status: event.interrupted ? 'interrupted' : 'done' });
        break;
      }
      case 'tool_call_started':
        this.lane(`call:${event.call_id}`, `${event.name} ${event.call_id}`, 'call', at);
        break;
      case 'tool_call_updated':
        this.lanes.get(`call:${event.call_id}`)?.marks.push(at);
        break;
      case 'tool_call_ended': {
        const lane = this.lanes.get(`call:${event.call_id}`);
        if (lane) Object.assign(lane, { end: at, status: event.status });
        break;
      }
      case 'x_conversation_item_added':
        if (event.item?.type === 'message' && event.item.role === 'user') this.userMarks.push(at);
        break;
      default:
        break;
    }
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.draw();
    });
  }

  /**
   * While a lane runs, its bar grows with the wall clock between events (the session's clock
   * runs at the wall clock's pace on a server); `stop` ends the ticking.
   */
  tick(stop = false) {
    clearInterval(this.ticker);
    if (stop) return;
    this.ticker = setInterval(() => {
      if (![...this.lanes.values()].some((lane) => lane.end === null) || !this.seen) return;
      this.now = Math.max(this.now, this.seen.at + (performance.now() - this.seen.wall));
      this.schedule();
    }, TICK_MS);
  }

  draw() {
    const lanes = [{ label: 'user turns', kind: 'user', start: null, marks: this.userMarks }, ...this.lanes.values()];
    const height = AXIS + lanes.length * LANE + 4;
    const span = niceSpan(this.now);
    const x = (ms) => LABEL_WIDTH + ((WIDTH - LABEL_WIDTH - 20) * ms) / span;
    const children = [];
    const step = span / 5;
    for (let t = 0; t <= span; t += step) {
      children.push(el('line', { class: 'grid', x1: x(t), x2: x(t), y1: AXIS - 4, y2: height }));
      const anchor = t === 0 ? 'start' : t + step > span ? 'end' : 'middle';
      children.push(el('text', { class: 'axis', x: x(t), y: AXIS - 8, 'text-anchor': anchor }, seconds(t)));
    }
    lanes.forEach((lane, i) => {
      const y = AXIS + i * LANE;
      const label = lane.label.length > 22 ? `${lane.label.slice(0, 21)}…` : lane.label;
      children.push(el('text', { class: 'lane-label', x: 4, y: y + LANE / 2 + 4 }, label));
      if (lane.start !== null) {
        const end = lane.end ?? this.now;
        const bar = el('rect', {
          class: `bar ${lane.kind} ${lane.status}`,
          x: x(lane.start),
          y: y + 4,
          width: Math.max(2, x(end) - x(lane.start)),
          height: LANE - 8,
          rx: 3,
        });
        bar.append(el('title', {}, `${lane.label}: ${seconds(lane.start)} → ${lane.end === null ? 'running' : `${seconds(end)}, ${lane.status}`}`));
        children.push(bar);
      }
      for (const at of lane.marks) {
        children.push(el('circle', { class: `mark ${lane.kind}`, cx: x(at), cy: y + LANE / 2, r: 4 }));
      }
    });
    this.svg.setAttribute('viewBox', `0 0 ${WIDTH} ${height}`);
    this.svg.replaceChildren(...children);
  }
}

/** A round span a little over `ms` (at least 1 s), so the grid lands on round numbers. */
function niceSpan(ms) {
  const steps = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600];
  const s = steps.find((n) => n * 1000 >= ms * 1.05) ?? Math.ceil(ms / 3600000) * 3600;
  return s * 1000;
}

function seconds(ms) {
  return ms >= 10000 ? `${Math.round(ms / 1000)} s` : `${(ms / 1000).toFixed(1)} s`;
}

function el(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}
