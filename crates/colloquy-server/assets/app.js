// The playground: pick an agent, start a session, talk to it, and watch its background tool
// calls, its actor tree and its timeline as the events arrive. Everything it draws comes from
// the session's events (replayed from the start on a reload), so two tabs show the same thing.

import { Api, Connection, HttpError, TOKEN_PATTERN } from './client.js';
import { renderMarkdown } from './markdown.js';
import { Timeline } from './timeline.js';

const $ = (id) => document.getElementById(id);
// The token lives as long as the tab (a reload keeps it), never in the URL.
const TOKEN_KEY = 'colloquy.token';
const api = new Api(sessionStorage.getItem(TOKEN_KEY) ?? '');
let connection = null;
let timeline = null;
let closed = false;
let inspectTimer = null;

/** Events after which the actor tree has likely changed. */
const TREE_EVENTS = new Set([
  'tool_call_started', 'tool_call_ended', 'agent_handoff', 'x_tool_approval_requested', 'x_tool_call_approved',
]);
/** How long the tree waits for more such events before it asks again (ms). */
const INSPECT_DEBOUNCE_MS = 250;

function setStatus(state, text) {
  const status = $('status');
  status.dataset.state = state;
  status.textContent = text;
}

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

// ---- Agents and sessions ----

async function loadAgents() {
  try {
    const { agents, default: chosen } = await api.agents();
    $('agent').replaceChildren(...agents.map((name) => element('option', { value: name }, name)));
    $('agent').value = chosen ?? agents[0];
    $('agent').disabled = $('start-button').disabled = false;
    $('token-form').hidden = true;
    const resume = new URLSearchParams(location.hash.slice(1)).get('session');
    if (resume) attach(resume);
    else setStatus('idle', 'No session: pick an agent and start one.');
  } catch (e) {
    if (e instanceof HttpError && e.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      $('token-form').hidden = false;
      $('token').focus();
      setStatus('error', api.token ? 'The server refused this access token.' : 'This server needs an access token.');
    } else {
      setStatus('error', `Cannot list agents: ${e.message}`);
    }
  }
}

async function startSession(event) {
  event.preventDefault();
  try {
    const started = await api.startSession($('agent').value);
    history.replaceState(null, '', `#session=${encodeURIComponent(started.session_id)}`);
    attach(started.session_id);
  } catch (e) {
    setStatus('error', `Cannot start a session: ${e.message}`);
  }
}

async function endSession() {
  if (!connection) return;
  try {
    await api.closeSession(connection.sessionId);
  } catch (e) {
    note(`Could not end the session: ${e.message}`, 'error');
  }
}

/** Connects to a session and clears what the previous one drew. */
function attach(sessionId) {
  connection?.stop();
  closed = false;
  $('messages').replaceChildren();
  showAgentState(null);
  $('calls').replaceChildren();
  rows.clear();
  $('no-calls').hidden = false;
  $('tree').replaceChildren(element('p', { class: 'empty' }, 'Waiting for the session…'));
  timeline?.tick(true);
  timeline = new Timeline($('timeline'));
  timeline.draw();
  timeline.tick();
  const conn = new Connection(sessionId, api.token, {
    onStatus: (state, detail) => {
      if (!closed) setStatus(state, `${state[0].toUpperCase()}${state.slice(1)} ${detail}`.trim());
      enableInput(state === 'connected' && !closed);
    },
    onHello: (hello) => {
      setStatus('connected', `Connected to session ${hello.session_id} (agent ${hello.agent}${hello.node ? ` on ${hello.node}` : ''})`);
      $('end').disabled = false;
      scheduleInspect();
    },
    onEvent: (_seq, event) => handleEvent(event),
    onError: (frame) => {
      if (frame.code === 'gap') reloadHistory(conn, frame.oldest_seq);
      else note(`Server error (${frame.code}): ${frame.message}`, 'error');
    },
    onClosing: (reason) => {
      if (closed) return;
      if (reason === 'session_lost') {
        closed = true;
        enableInput(false);
        $('end').disabled = true;
        setStatus('closed', 'Session lost: the node it ran on is gone');
        note('The session was lost with the node it ran on.', 'error');
      } else {
        setStatus('reconnecting', `The server closed the connection (${reason})`);
      }
    },
  });
  connection = conn;
}

/** After a `gap`, the conversation drawn from events has a hole: redraw it from the history. */
async function reloadHistory(conn, oldest) {
  const reply = await conn.send('history').catch(() => null);
  if (conn !== connection) return;
  if (!reply || reply.reply !== 'history') {
    note(`Missed events before seq ${oldest}: the server no longer had them.`, 'error');
    return;
  }
  const messages = reply.items.filter((item) => item.type === 'message' && ['user', 'assistant'].includes(item.role));
  $('messages').replaceChildren(...messages.map((item) => (item.role === 'user'
    ? element('li', { class: 'user', 'aria-label': 'You' }, item.text)
    : element('li', { class: 'agent', 'aria-label': 'Agent' }, element('div', { class: 'md' }, ...renderMarkdown(item.text))))));
  note(`Missed events before seq ${oldest}: the conversation was reloaded from the history.`);
}

function enableInput(on) {
  for (const id of ['message', 'send', 'queue']) $(id).disabled = !on;
}

// ---- Events ----

function handleEvent(event) {
  timeline.add(event);
  switch (event.type) {
    case 'agent_state':
      showAgentState(event.state);
      break;
    case 'x_agent_text':
      addText(agentBubble(event.speech_id, event.step), event.delta);
      break;
    case 'speech_done':
      for (const bubble of document.querySelectorAll(`[data-speech="${CSS.escape(event.speech_id)}"]`)) {
        renderText(bubble);
        bubble.classList.remove('streaming');
        if (event.interrupted) bubble.append(element('span', { class: 'tag' }, 'interrupted'));
      }
      break;
    case 'x_conversation_item_added':
      if (event.item.type === 'message' && event.item.role === 'user') {
        $('messages').append(element('li', { class: 'user', 'aria-label': 'You' }, event.item.text));
        scrollMessages();
      }
      break;
    case 'tool_call_started':
      callRow(event.call_id, event.name, event.at_ms);
      break;
    case 'x_tool_approval_requested':
      callRow(event.call_id, event.name, event.at_ms).awaitApproval(event.arguments);
      break;
    case 'x_tool_call_approved':
      callRow(event.call_id)?.approved();
      break;
    case 'tool_call_updated':
      callRow(event.call_id)?.update(event.message, event.at_ms);
      break;
    case 'tool_call_ended':
      callRow(event.call_id)?.end(event.status, event.message, event.at_ms);
      break;
    case 'agent_handoff':
      if (event.old_agent) note(`Handoff: ${event.old_agent} → ${event.new_agent}`);
      break;
    case 'error':
      note(`Error (${event.source}): ${event.message}`, 'error');
      break;
    case 'x_session_resumed':
      note(`The session resumed from its journal${inDoubt(event.in_doubt)}.`);
      break;
    case 'x_session_moved':
      note(`The session moved from ${event.from} to ${event.to}${inDoubt(event.calls_in_doubt)}.`, 'warning');
      break;
    case 'x_tool_call_refused':
      note(`${event.name} ${event.call_id} refused (${event.reason})`);
      break;
    case 'x_tool_budget_exhausted':
      note(`The agent has made its ${event.limit} tool calls for this turn: further calls are refused `
        + 'and it answers without tools until your next message.', 'warning');
      break;
    case 'session_closed':
      // Suspended by a server with a store that stops: the connection reconnects and resumes it.
      if (event.reason === 'suspended') {
        showAgentState(null);
        note('The server suspended the session: it resumes when the server is back.');
        return;
      }
      closed = true;
      showAgentState(null);
      timeline.tick(true);
      enableInput(false);
      $('end').disabled = true;
      setStatus('closed', `Session closed (${event.reason})`);
      note(`The session closed: ${event.reason}.`);
      return;
    default:
      break;
  }
  if (TREE_EVENTS.has(event.type)) scheduleInspect();
}

// What a resume did with the calls that were running: ", book_flight runs again".
function inDoubt(calls) {
  const outcomes = {
    rerun: 'runs again',
    not_started: 'goes on as it would have',
    asked: 'waits for your approval again',
    failed: 'may or may not have completed',
  };
  return (calls || []).map((call) => `, ${call.name} ${outcomes[call.outcome] || call.outcome}`).join('');
}

function agentBubble(speechId, step) {
  const key = `${speechId}:${step}`;
  let bubble = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (!bubble) {
    bubble = element('li', { class: 'agent streaming', 'data-key': key, 'data-speech': speechId, 'aria-label': 'Agent' },
      element('div', { class: 'md' }));
    $('messages').append(bubble);
  }
  return bubble;
}

// ---- The agent's text, as Markdown ----

/** Each bubble's text so far: the Markdown is drawn again from it as it grows. */
const bubbleTexts = new WeakMap();
/** Bubbles whose text grew since they were drawn, drawn at the next frame: a reload replays
 * a long reply's deltas at once, and each would otherwise draw the whole text again. */
const stale = new Set();
let drawFrame = 0;

function addText(bubble, delta) {
  bubbleTexts.set(bubble, (bubbleTexts.get(bubble) ?? '') + delta);
  stale.add(bubble);
  drawFrame ||= requestAnimationFrame(() => {
    drawFrame = 0;
    for (const stalled of stale) renderText(stalled);
  });
}

function renderText(bubble) {
  if (!stale.delete(bubble)) return;
  bubble.querySelector('.md').replaceChildren(...renderMarkdown(bubbleTexts.get(bubble) ?? ''));
  scrollMessages();
}

// ---- The agent's state ----

const AGENT_STATES = {
  initializing: 'The agent is starting…',
  listening: 'The agent is listening',
  thinking: 'The agent is thinking…',
  speaking: 'The agent is speaking…',
};

/** Shows what the agent does (a model may think for seconds); `null` hides it. */
function showAgentState(state) {
  const line = $('agent-state');
  line.hidden = state === null;
  line.dataset.state = state ?? '';
  $('agent-state-text').textContent = state === null ? '' : AGENT_STATES[state] ?? `The agent is ${state}`;
}

function note(text, kind = 'note') {
  $('messages').append(element('li', { class: kind }, text));
  scrollMessages();
}

function scrollMessages() {
  const list = $('messages');
  list.scrollTop = list.scrollHeight;
}

// ---- Tool calls ----

const rows = new Map();

/** The row of a call (made on its first event; `name` is needed only then). */
function callRow(callId, name, at) {
  if (rows.has(callId) && rows.get(callId).node.isConnected) return rows.get(callId);
  if (name === undefined) return null;
  const status = element('span', { class: 'status', 'data-status': 'running' }, 'running');
  const updates = element('ol', { class: 'updates', 'aria-label': `Updates of ${callId}` });
  const actions = element('div', { class: 'actions' });
  const node = element('li', { class: 'call', 'aria-label': `${name} ${callId}`, 'data-call': callId },
    element('div', { class: 'call-head' },
      element('strong', {}, name), element('code', {}, callId), status,
      element('span', { class: 'when' }, `at ${seconds(at)}`)),
    updates, actions);
  const command = async (type, fields) => {
    const conn = connection;
    const reply = await conn.send(type, { call_id: callId, ...fields }).catch(() => null);
    if (conn === connection && reply?.reply === 'error') updates.append(element('li', { class: 'error' }, `${type}: ${reply.message}`));
  };
  const button = (label, aria, onclick, extra = {}) => element('button', { type: 'button', 'aria-label': aria, onclick, ...extra }, label);
  const row = {
    node,
    cancelButton: button('Cancel', `Cancel ${callId}`, () => command('cancel_tool_call')),
    setStatus(text) {
      status.dataset.status = text;
      status.textContent = text.replaceAll('_', ' ');
    },
    awaitApproval(args) {
      this.setStatus('awaiting_approval');
      updates.append(element('li', {}, element('code', {}, args)));
      actions.replaceChildren(
        button('Approve', `Approve ${callId}`, () => command('approve')),
        button('Reject', `Reject ${callId}`, () => command('reject', { reason: 'rejected in the playground' })),
        this.cancelButton);
    },
    approved() {
      this.setStatus('running');
      actions.replaceChildren(this.cancelButton);
    },
    update(message, when) {
      updates.append(element('li', {}, element('span', { class: 'when' }, seconds(when)), ' ', message));
    },
    end(final, message, when) {
      this.setStatus(final);
      actions.replaceChildren();
      updates.append(element('li', { class: `final ${final}` }, element('span', { class: 'when' }, seconds(when)), ' ', message ?? final.replaceAll('_', ' ')));
    },
  };
  actions.append(row.cancelButton);
  rows.set(callId, row);
  $('calls').append(node);
  $('no-calls').hidden = true;
  return row;
}

// ---- The actor tree ----

function scheduleInspect() {
  clearTimeout(inspectTimer);
  inspectTimer = setTimeout(refreshTree, INSPECT_DEBOUNCE_MS);
}

async function refreshTree() {
  if (!connection || closed) return;
  const conn = connection;
  const reply = await conn.send('inspect').catch(() => null);
  // A reply from a session the page has left draws nothing.
  if (conn !== connection || !reply || reply.reply !== 'snapshot') return;
  const { snapshot } = reply;
  $('tree').replaceChildren(element('ul', { class: 'tree' }, treeNode(snapshot.tree)));
  // A call the tree says cannot be cancelled gets no working cancel button.
  for (const node of walk(snapshot.tree)) {
    if (node.kind === 'tool_call' && node.cancellable === false) {
      const row = rows.get(node.call_id);
      if (row) Object.assign(row.cancelButton, { disabled: true, title: `${node.name} cannot be cancelled` });
    }
  }
}

function* walk(node) {
  yield node;
  for (const child of node.children) yield* walk(child);
}

function treeNode(node) {
  const detail = [node.agent, node.name, node.scope, node.tools?.join(', '),
    node.elapsed_ms !== undefined ? seconds(node.elapsed_ms) : null].filter(Boolean).join(' · ');
  const label = element('span', { class: 'node' },
    element('span', { class: `kind ${node.kind}` }, node.kind.replaceAll('_', ' ')), ' ',
    element('code', {}, node.id),
    node.status !== 'running' ? element('span', { class: 'status', 'data-status': node.status }, node.status.replaceAll('_', ' ')) : null,
    detail ? element('span', { class: 'detail' }, detail) : null);
  const children = node.children.length ? element('ul', {}, ...node.children.map(treeNode)) : null;
  return element('li', { 'data-node': node.id }, label, children);
}

// ---- Input ----

/** Texts sent and not answered yet: a second Enter does not send one twice. */
const sending = new Set();

async function say(type) {
  const box = $('message');
  const text = box.value.trim();
  if (!text || !connection || sending.has(text)) return;
  const conn = connection;
  sending.add(text);
  const reply = await conn.send(type, { text }).catch(() => null);
  sending.delete(text);
  if (conn !== connection) return;
  if (reply?.reply === 'ok') {
    // The text leaves the box once the session has it (unless the user has typed on): a
    // message refused, or lost with the connection, is still there to send again.
    if (box.value.trim() === text) box.value = '';
  } else if (reply) {
    note(`Not sent (${reply.kind}: ${reply.message}). Your message is still in the box.`, 'error');
  } else {
    note('The connection was lost before the server answered; your message is still in the box.', 'error');
  }
}

$('start').addEventListener('submit', startSession);
$('end').addEventListener('click', endSession);
$('compose').addEventListener('submit', (e) => {
  e.preventDefault();
  say('user_turn');
});
$('queue').addEventListener('click', () => say('user_input'));
$('message').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    say(e.altKey ? 'user_input' : 'user_turn');
  }
});
$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const token = $('token').value.trim();
  if (!TOKEN_PATTERN.test(token)) {
    // Never echoed: the status line is on screen.
    setStatus('error', 'An access token holds only letters, digits and -._~');
    return;
  }
  api.token = token;
  $('token').value = '';
  sessionStorage.setItem(TOKEN_KEY, api.token);
  loadAgents();
});

loadAgents();
