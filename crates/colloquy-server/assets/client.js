// The wire side of the playground: the HTTP calls and one session's WebSocket, as
// docs/protocol.md describes them. No DOM here: app.js draws what this module reports.

export const PROTOCOL_VERSION = 1;

/** What a token may be made of: it travels as a WebSocket subprotocol (docs/protocol.md#auth). */
export const TOKEN_PATTERN = /^[A-Za-z0-9\-._~]+$/;

/** A browser's error message with every copy of `token` blotted out (Chrome quotes a refused
 * subprotocol, and so the token, in its message). */
export function withoutToken(message, token) {
  const text = String(message ?? '');
  return token ? text.replaceAll(token, '…') : text;
}

/** An HTTP answer that is not 2xx: its status and the server's `{code, message}`. */
export class HttpError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** The server's HTTP API; `token` (if any) goes in the Authorization header. */
export class Api {
  constructor(token = '') {
    this.token = token;
  }

  async request(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      throw new Error(withoutToken(e.message, this.token));
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      // A proxy's HTML error page: the status says enough.
    }
    if (!response.ok) throw new HttpError(response.status, json?.code, json?.message || text);
    return json;
  }

  agents() {
    return this.request('GET', '/v1/agents');
  }

  startSession(agent) {
    return this.request('POST', '/v1/sessions', { v: PROTOCOL_VERSION, agent, options: {} });
  }

  closeSession(id) {
    return this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }
}

/** How long to wait before the nth reconnect (ms): 0.5 s doubling, at most 8 s. */
const backoff = (attempt) => Math.min(500 * 2 ** attempt, 8000);
/** Measures frames in bytes, as the server's limit counts them. */
const encoder = new TextEncoder();
/** `closing` reasons after which the session is gone (docs/protocol.md). */
const FINAL_CLOSINGS = new Set(['session_closed', 'session_lost', 'server_shutdown']);
/** Connections refused in a row (about 24 s of tries) before the page gives up on the session. */
const MAX_REFUSED = 6;

/**
 * One session's WebSocket, reconnected with `after=<last seq>` when it drops, so no event is
 * seen twice or missed (a `gap` error says when the server no longer had them).
 * Callbacks: onStatus(state, detail), onHello(frame), onEvent(seq, event), onError(frame),
 * onClosing(reason).
 */
export class Connection {
  constructor(sessionId, token, handlers) {
    this.sessionId = sessionId;
    this.token = token;
    this.handlers = handlers;
    this.lastSeq = 0;
    this.nextId = 1;
    this.pending = new Map();
    this.attempt = 0;
    this.stopped = false;
    // Set by stop(): the page has moved on, so nothing of this connection reaches it any more.
    this.left = false;
    this.open();
  }

  url() {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const id = encodeURIComponent(this.sessionId);
    return `${scheme}://${location.host}/v1/sessions/${id}/ws?after=${this.lastSeq}`;
  }

  open() {
    this.handlers.onStatus('connecting', `after seq ${this.lastSeq}`);
    // Browsers cannot set headers on a WebSocket: the token travels as a subprotocol, and
    // the server picks `colloquy.v1`, which must therefore be offered too.
    const protocols = this.token ? ['colloquy.v1', `colloquy.bearer.${this.token}`] : [];
    let ws;
    try {
      ws = new WebSocket(this.url(), protocols);
    } catch (e) {
      // A token the browser cannot send as a subprotocol: retrying would fail the same way.
      this.stopped = true;
      const detail = TOKEN_PATTERN.test(this.token || 'x')
        ? withoutToken(e.message, this.token)
        : 'the access token may hold only letters, digits and -._~';
      this.handlers.onStatus('closed', `cannot connect: ${detail}`);
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.attempt = 0;
      this.handlers.onStatus('connected', '');
    };
    ws.onmessage = (message) => {
      if (!this.left) this.receive(message.data);
    };
    ws.onclose = (close) => {
      if (this.ws !== ws || this.left) return;
      this.failPending();
      // A session the server no longer has (it closed, or the server restarted) refuses the
      // upgrade every time: after a few tries, say so rather than try forever.
      if (!opened && this.attempt >= MAX_REFUSED) this.stopped = true;
      if (this.stopped) {
        this.handlers.onStatus('closed', close.reason || (opened ? 'closed' : 'the server refuses this session'));
        return;
      }
      const wait = backoff(this.attempt++);
      this.handlers.onStatus('reconnecting', `in ${(wait / 1000).toFixed(1)} s`);
      this.timer = setTimeout(() => this.open(), wait);
    };
  }

  receive(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      this.handlers.onError({ code: 'bad_frame', message: 'the server sent a frame that is not JSON' });
      return;
    }
    switch (frame.type) {
      case 'hello':
        this.suspended = false;
        this.handlers.onHello(frame);
        break;
      case 'event':
        // A reconnect may overlap what was already drawn: each seq is drawn once.
        if (frame.seq <= this.lastSeq) return;
        this.lastSeq = frame.seq;
        // A server with a store suspends its sessions when it stops: they resume when it is back.
        if (frame.event.type === 'session_closed') this.suspended = frame.event.reason === 'suspended';
        this.handlers.onEvent(frame.seq, frame.event);
        break;
      case 'reply': {
        const waiter = this.pending.get(frame.id);
        this.pending.delete(frame.id);
        waiter?.resolve(frame);
        break;
      }
      case 'error': {
        if (frame.code === 'gap' && frame.oldest_seq) this.lastSeq = frame.oldest_seq - 1;
        // An error about a request answers it: its sender reports it, once. A frame too large
        // to read is refused without its id: it is the largest request waiting.
        const id = frame.id ?? (frame.code === 'too_large' ? this.largestPending() : undefined);
        const waiter = this.pending.get(id);
        this.pending.delete(id);
        if (waiter) waiter.resolve({ reply: 'error', kind: frame.code, message: frame.message });
        else this.handlers.onError(frame);
        break;
      }
      case 'closing':
        // The session is over (closed, lost with its node, or closed by the server's
        // shutdown): nothing to reconnect to. After `slow_client` it goes on from lastSeq.
        // A suspended session is not over: reconnecting resumes it once the server is back.
        if (FINAL_CLOSINGS.has(frame.reason) && !this.suspended) this.stopped = true;
        this.handlers.onClosing(frame.reason);
        break;
      default:
        break;
    }
  }

  /** Sends a command; resolves to its reply frame (`{reply: "ok"}`, `{reply: "error", …}`). */
  send(type, fields = {}) {
    if (this.ws?.readyState !== WebSocket.OPEN) {
      return Promise.resolve({ reply: 'error', kind: 'disconnected', message: 'not connected' });
    }
    const id = this.nextId++;
    const frame = JSON.stringify({ v: PROTOCOL_VERSION, id, type, ...fields });
    this.ws.send(frame);
    const bytes = encoder.encode(frame).length;
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, bytes }));
  }

  /** The id of the largest request still waiting (the oldest of equals), if any. */
  largestPending() {
    let largest;
    for (const [id, { bytes }] of this.pending) {
      if (largest === undefined || bytes > this.pending.get(largest).bytes) largest = id;
    }
    return largest;
  }

  /** Closes the socket for good (the session lives on unless it was closed); no callback
   * of this connection runs after this, and its requests still waiting fail. */
  stop() {
    this.stopped = true;
    this.left = true;
    clearTimeout(this.timer);
    this.failPending();
    this.ws?.close(1000, 'client_left');
  }

  failPending() {
    for (const { reject } of this.pending.values()) reject(new Error('connection lost'));
    this.pending.clear();
  }
}
