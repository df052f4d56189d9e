// Drives the playground page of a running `colloquy serve --provider scripted
// --require-approval get_weather` in Debian's chromium: a conversation, a background booking
// cancelled from the page, a dropped socket resumed, one booking let run to its end, the rows
// and the actor tree checked, screenshots (light and dark) saved, a weather call approved and
// one rejected, and a reload replaying the same page. With PLAYGROUND_TOKEN set, the server
// requires that token: the page must ask for it first (the WebSocket carries it as a
// subprotocol). With PLAYGROUND_MODE=gap (a server keeping few events), one exchange then a
// reload that starts with a `gap`: the page redraws the conversation from the history. With
// PLAYGROUND_MODE=signals, the page's socket passes through the script (`relay` below), which
// holds the server's frames back as a model thinking for seconds would, splits a reply in two
// as a stream would, and adds an `x_tool_budget_exhausted` event (the scripted model makes one
// call a turn, never twenty): the agent's state, a Markdown reply drawn as it streams (its
// HTML kept as text), the spent budget, and a message refused as too large kept in the box.
// Usage: node playground.mjs <page URL> <screenshot folder>.
// Exits 0 when every check passes; otherwise prints the failed check and exits 1.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error('usage: node playground.mjs <page URL> <screenshot folder>');
  process.exit(2);
}
/** The bound on every wait for the page (ms): the scripted booking takes 3 s end to end. */
const BOUND = 15_000;

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'colloquy-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  // No traffic beyond loopback: Chromium's own background calls are turned off.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
context.setDefaultTimeout(BOUND);
// The page's sockets, so the test can drop one as a network would.
await context.addInitScript(() => {
  const Native = window.WebSocket;
  window.testSockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.testSockets.push(this);
    }
  };
});
const page = context.pages()[0] ?? (await context.newPage());
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
/** A server's token (`--token-env`): the page must ask for it, and then work as without. */
const token = process.env.PLAYGROUND_TOKEN ?? '';
page.on('console', (m) => {
  // Chromium logs the 401 that tells the page to ask for a token.
  const expected = token && m.text().includes('status of 401');
  if (m.type() === 'error' && !expected) problems.push(`console error: ${m.text()}`);
});
page.on('request', (r) => {
  const host = new URL(r.url()).hostname;
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(host)) problems.push(`request off loopback: ${r.url()}`);
});

/**
 * The page's WebSockets, relayed by the script (PLAYGROUND_MODE=signals only). It may hold the
 * server's frames back from the page after one it names (`holdAfter`), split the text delta that
 * holds `split` in two events, and add events of its own (`inject`); event numbers are shifted
 * past what it adds, so the page sees one unbroken sequence.
 */
const relay = {
  toPage: null,
  holdAfter: null,
  held: null,
  split: null,
  shift: 0,
  lastSeq: 0,
  lastAt: 0,
  fromServer(message) {
    const frame = JSON.parse(String(message));
    const frames = [frame];
    if (frame.type === 'event') {
      frame.seq += this.shift;
      this.lastAt = frame.event.at_ms;
      const { delta } = frame.event;
      const at = this.split && frame.event.type === 'x_agent_text' ? delta.indexOf(this.split) : -1;
      if (at > 0) {
        this.split = null;
        this.shift += 1;
        frames.push({ ...frame, seq: frame.seq + 1, event: { ...frame.event, delta: delta.slice(at) } });
        frame.event.delta = delta.slice(0, at);
      }
    }
    for (const each of frames) this.deliver(each);
  },
  deliver(frame) {
    if (frame.type === 'event') this.lastSeq = frame.seq;
    if (this.held) {
      this.held.push(frame);
      return;
    }
    this.toPage(JSON.stringify(frame));
    if (this.holdAfter?.(frame)) {
      this.holdAfter = null;
      this.held = [];
    }
  },
  release() {
    const held = this.held ?? [];
    this.held = null;
    for (const frame of held) this.deliver(frame);
  },
  inject(event) {
    this.shift += 1;
    this.deliver({ type: 'event', seq: this.lastSeq + 1, event: { at_ms: this.lastAt, ...event } });
  },
};
const isEvent = (type, test = () => true) => (frame) => frame.type === 'event' && frame.event.type === type && test(frame.event);

/** Thrown when a shorter script (PLAYGROUND_MODE) has passed all its checks. */
const DONE = Symbol('done');

let step = 'start';
const check = (name) => {
  step = name;
  console.log(`- ${name}`);
};

try {
  check('the page lists the agents and starts a session');
  if (process.env.PLAYGROUND_MODE === 'signals') {
    await page.routeWebSocket(/\/v1\/sessions\/[^/]+\/ws/, (ws) => {
      const server = ws.connectToServer();
      relay.toPage = (text) => ws.send(text);
      server.onMessage((message) => relay.fromServer(message));
    });
  }
  await page.goto(url);
  if (token) {
    check('the page asks for the token the server requires');
    await expectText(page.getByRole('status', { name: 'Connection' }), /needs an access token/);
    check('a token a WebSocket cannot carry is refused, and never shown');
    const unsendable = `${token} and, more`;
    await page.getByLabel('Access token').fill(unsendable);
    await page.getByRole('button', { name: 'Use token' }).click();
    await expectText(page.getByRole('status', { name: 'Connection' }), /only letters, digits/);
    if ((await page.locator('body').innerText()).includes(unsendable)) throw new Error('the page shows the token');
    await page.getByLabel('Access token').fill(token);
    await page.getByRole('button', { name: 'Use token' }).click();
  }
  await page.getByLabel('Agent').locator('option').first().waitFor({ state: 'attached' });
  await page.getByRole('button', { name: 'Start session' }).click();
  await expectText(page.getByRole('status', { name: 'Connection' }), /Connected to session/);

  const log = page.getByRole('log', { name: 'Conversation' });
  const message = page.getByLabel('Message');
  if (process.env.PLAYGROUND_MODE === 'signals') {
    await signals(log, message);
    if (problems.length) throw new Error(problems.join('\n'));
    throw DONE;
  }
  check('a user turn is shown and the reply streams in');
  await message.fill('Hello there');
  await message.press('Enter');
  await expectText(log.getByRole('listitem', { name: 'You' }).first(), 'Hello there');
  await expectText(log.getByRole('listitem', { name: 'Agent' }).first(), /I am the scripted model/);

  if (process.env.PLAYGROUND_MODE === 'gap') {
    check('after a gap the page redraws the conversation from the history');
    await expectCount(log.locator('.streaming'), 0);
    await page.reload();
    await expectText(log, /reloaded from the history/);
    await expectText(log.getByRole('listitem', { name: 'You' }).first(), 'Hello there');
    await expectText(log.getByRole('listitem', { name: 'Agent' }).first(), /I am the scripted model/);
    if (problems.length) throw new Error(problems.join('\n'));
    throw DONE;
  }

  const calls = page.getByRole('list', { name: 'Tool calls' });
  const tree = page.getByRole('group', { name: 'Actor tree' });
  check('a booking runs in the background as a live row; cancel from the page ends it');
  await message.fill('Please book a flight');
  await message.press('Enter');
  const first = calls.getByRole('listitem', { name: /^book_flight / });
  await expectText(first.locator('.status'), 'running');
  const firstId = (await first.getAttribute('data-call')) ?? '';
  // At once: the scripted booking ends by itself after a few seconds.
  await page.getByRole('button', { name: `Cancel ${firstId}` }).click();
  await expectText(first.locator('.status'), 'cancelled');
  await expectCount(first.getByRole('button'), 0);
  await until(async () => !(await tree.textContent()).includes(`tool_call:${firstId}`), 'the tree drops the cancelled call');

  check('a dropped connection comes back with after=<last seq> and draws nothing twice');
  const drawn = await log.getByRole('listitem').allTextContents();
  await page.evaluate(() => window.testSockets.at(-1).close());
  await until(async () => (await page.evaluate(() => window.testSockets.length)) === 2, 'a second socket');
  await expectText(page.getByRole('status', { name: 'Connection' }), /Connected to session/);
  const resumed = await page.evaluate(() => window.testSockets[1].url);
  if (!/[?&]after=[1-9]/.test(resumed)) throw new Error(`the reconnect did not resume: ${resumed}`);
  const redrawn = await log.getByRole('listitem').allTextContents();
  if (!grown(drawn, redrawn)) throw new Error(`the reconnect changed the conversation: ${JSON.stringify(drawn)} → ${JSON.stringify(redrawn)}`);

  check('a second booking runs to its end with its updates');
  await message.fill('Book it again, please');
  await message.press('Enter');
  await expectCount(calls.getByRole('listitem', { name: /^book_flight / }), 2);
  const second = calls.getByRole('listitem', { name: /^book_flight / }).nth(1);
  await expectText(second.getByRole('list', { name: /^Updates of / }), /Found 3 flights/);
  await expectText(second.locator('.status'), 'done');
  await expectText(log, /Here is what I have/);

  check('a third booking is running, in the actor tree, when the screenshots are taken');
  await message.fill('And book one more, to Rome');
  await message.press('Enter');
  await expectCount(calls.getByRole('listitem', { name: /^book_flight / }), 3);
  const third = calls.getByRole('listitem', { name: /^book_flight / }).nth(2);
  await expectText(third.getByRole('list', { name: /^Updates of / }), /Searching/);
  const thirdId = (await third.getAttribute('data-call')) ?? '';
  await expectText(tree, `tool_call:${thirdId}`);
  fs.mkdirSync(outDir, { recursive: true });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.screenshot({ path: path.join(outDir, 'playground-light.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: path.join(outDir, 'playground-dark.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });
  await expectText(third.locator('.status'), 'done');
  await expectCount(log.locator('.streaming'), 0);

  check('a call waiting for approval runs once approved from the page');
  await message.fill("What's the weather in Rome?");
  await message.press('Enter');
  const weather = calls.getByRole('listitem', { name: /^get_weather / });
  await expectText(weather.first().locator('.status'), 'awaiting approval');
  const weatherId = (await weather.first().getAttribute('data-call')) ?? '';
  await page.getByRole('button', { name: `Approve ${weatherId}` }).click();
  await expectText(weather.first().locator('.status'), 'done');
  await expectText(weather.first(), /Rome: day 1: sunny/);
  await expectCount(weather.first().getByRole('button'), 0);

  check('a call rejected from the page ends as rejected and never runs');
  await message.fill('And the weather in Oslo?');
  await message.press('Enter');
  await expectCount(weather, 2);
  const rejectedId = (await weather.nth(1).getAttribute('data-call')) ?? '';
  await expectText(weather.nth(1).locator('.status'), 'awaiting approval');
  await page.getByRole('button', { name: `Reject ${rejectedId}` }).click();
  await expectText(weather.nth(1).locator('.status'), 'rejected');

  check('a message queued after the reply under way is answered after it, uninterrupted');
  const said = await log.getByRole('listitem', { name: 'You' }).count();
  await message.fill('Tell me a story');
  await message.press('Enter');
  await message.fill('And another one');
  await page.getByRole('button', { name: 'Queue after reply' }).click();
  await expectCount(log.getByRole('listitem', { name: 'You' }), said + 2);
  await expectText(log.getByRole('listitem', { name: 'You' }).last(), 'And another one');
  await expectCount(log.locator('.streaming'), 0);
  const queuedReply = log.getByRole('listitem').last();
  await expectText(queuedReply, /I am the scripted model/);
  await expectCount(log.locator('.tag', { hasText: 'interrupted' }), 0);

  check('the timeline has a lane per speech and per tool call');
  const lanes = await page.locator('#timeline rect.bar.call').count();
  if (lanes !== 5) throw new Error(`expected 5 tool-call lanes in the timeline, found ${lanes}`);

  check('a reload replays the session into the same page');
  const before = await log.getByRole('listitem').allTextContents();
  await page.reload();
  await expectText(page.getByRole('status', { name: 'Connection' }), /Connected to session/);
  await expectCount(calls.getByRole('listitem', { name: /^book_flight / }), 3);
  await expectCount(calls.getByRole('listitem', { name: /^get_weather / }), 2);
  await until(async () => (await log.getByRole('listitem').count()) >= before.length, 'the conversation is replayed');
  const after = await log.getByRole('listitem').allTextContents();
  if (!grown(before, after)) {
    throw new Error(`the replayed conversation differs:\n${JSON.stringify(before)}\n${JSON.stringify(after)}`);
  }
  await expectText(calls.getByRole('listitem', { name: /^book_flight / }).first().locator('.status'), 'cancelled');

  if (problems.length) throw new Error(problems.join('\n'));
  console.log(`all checks passed; screenshots in ${outDir}`);
} catch (e) {
  if (e === DONE) {
    console.log('all checks passed');
  } else {
    console.error(`FAILED at "${step}": ${e.message}`);
    fs.mkdirSync(outDir, { recursive: true });
    await page.screenshot({ path: path.join(outDir, 'failure.png'), fullPage: true }).catch(() => {});
    if (problems.length) console.error(problems.join('\n'));
    process.exitCode = 1;
  }
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}

/** The checks of PLAYGROUND_MODE=signals, the page's socket relayed by `relay`. */
async function signals(log, message) {
  const state = page.getByRole('status', { name: 'Agent state' });
  const agent = log.getByRole('listitem', { name: 'Agent', exact: true });
  check('while the model thinks (its answer held back), the page says the agent is thinking');
  relay.holdAfter = isEvent('agent_state', (e) => e.state === 'thinking');
  await message.fill('Hello there');
  await message.press('Enter');
  await expectText(state, /thinking/);
  if (!(await state.isVisible())) throw new Error('the agent state is not visible');
  fs.mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, 'thinking.png') });
  await expectCount(agent, 0);
  relay.release();
  await expectText(agent.first(), /I am the scripted model/);
  await expectText(state, /listening/);

  check('a Markdown reply is drawn as elements while it streams, its HTML left as text');
  const markdown = [
    'Plan:', '- **bold** item', '- *italic* item with `code`', '', '1. first', '2. second', '',
    '```', '<b>not bold</b>', '```',
    'A [link](https://example.com/x), [another](javascript:window.pwned=2) and <img src=x onerror="window.pwned=1">',
  ].join('\n');
  relay.split = '1. first';
  relay.holdAfter = isEvent('x_agent_text');
  await message.fill(markdown);
  await message.press('Enter');
  await expectCount(log.locator('.agent strong'), 1);
  const reply = agent.last();
  await expectText(reply.locator('strong'), 'bold');
  await expectCount(reply.locator('ul > li'), 2);
  await expectText(reply.locator('em'), 'italic');
  await expectText(reply.locator('li code'), 'code');
  await expectCount(reply.locator('ol'), 0);
  if (!(await reply.getAttribute('class')).includes('streaming')) throw new Error('the first half is not drawn as streaming');
  relay.release();
  await expectCount(reply.locator('ol > li'), 2);
  await expectText(reply.locator('pre > code'), '<b>not bold</b>');
  await expectCount(reply.locator('b, img, script'), 0);
  await expectText(reply, '[another](javascript:window.pwned=2)');
  await expectText(reply, '<img src=x onerror="window.pwned=1">');
  const link = reply.getByRole('link', { name: 'link' });
  if ((await link.getAttribute('href')) !== 'https://example.com/x') throw new Error('the http link is not kept');
  if ((await link.getAttribute('rel')) !== 'noopener noreferrer') throw new Error('the link lacks rel="noopener noreferrer"');
  await expectCount(reply.locator('a'), 1);
  await expectCount(log.locator('.streaming'), 0);
  if ((await page.evaluate(() => window.pwned)) !== undefined) throw new Error('the reply ran script');
  await page.screenshot({ path: path.join(outDir, 'markdown.png') });

  check('a spent tool budget is shown');
  await expectText(state, /listening/);
  relay.inject({ type: 'x_tool_budget_exhausted', limit: 20 });
  await expectText(log.locator('.warning'), /made its 20 tool calls/);

  check('a message refused as too large stays in the box, and one accepted leaves it');
  const big = 'x'.repeat(70 * 1024);
  await message.fill(big);
  await message.press('Enter');
  await expectText(log.locator('.error').last(), /Not sent \(too_large/);
  if ((await message.inputValue()) !== big) throw new Error('the refused message left the box');
  await expectCount(log.getByRole('listitem', { name: 'You' }), 2);
  await message.fill('Thanks');
  await message.press('Enter');
  await expectText(log.getByRole('listitem', { name: 'You' }).last(), 'Thanks');
  await until(async () => (await message.inputValue()) === '', 'an empty box once the message was taken');
}

/**
 * Whether the conversation `after` is `before` drawn again, each bubble once, in order: replies
 * may have gone on meanwhile, so a bubble that was streaming may have grown and more may follow.
 */
function grown(before, after) {
  return before.every((text, i) => after[i]?.startsWith(text));
}

/** Waits (bounded) until the locator's text matches. */
async function expectText(locator, want) {
  const matches = (text) => (typeof want === 'string' ? text.includes(want) : want.test(text));
  await until(async () => matches((await locator.textContent({ timeout: 1000 }).catch(() => '')) ?? ''),
    `text ${want} in ${locator}`);
}

async function expectCount(locator, n) {
  await until(async () => (await locator.count()) === n, `${n} of ${locator}`);
}

/** Polls `ready` every 50 ms until it holds or BOUND passes. */
async function until(ready, what) {
  const deadline = Date.now() + BOUND;
  while (Date.now() < deadline) {
    if (await ready()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${BOUND} ms waiting for ${what}`);
}
