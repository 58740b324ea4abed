/**
 * Concurrency per user with a wait queue (issue item 7), observed at a scripted upstream that
 * counts the requests open on it: C slots and a queue of Q under 3·(C+Q) simultaneous streaming
 * requests give exactly C upstream requests in flight at any moment, exactly 2·(C+Q) queue-full
 * 429s, and no slot left held afterwards; waiting past max_wait fails; a client that disconnects
 * frees its slot or its queue place at once: the next request gets it while the upstream of the one
 * that left is still held open by the test (so only the disconnect can have freed it).
 */
import t from 'tap';
import type http from 'node:http';
import { baseConfig, bearer, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scriptedUpstream, type ScriptedUpstream } from '../helpers/upstream.js';
import { assertError, key, sleep, until } from './helpers.js';
import type { Reply } from '../helpers/gateway.js';

const C = 2;
const Q = 3;
const K = { burst: key(0x500), timeout: key(0x501), gone: key(0x502), free: key(0x503), failing: key(0x504) };

let g: TestGateway;
let up: ScriptedUpstream;
let open = 0;
let maxOpen = 0;
let arrivals: number[] = [];
/** Requests wait at the upstream until the gate opens (after their first content chunk). */
let gate: { promise: Promise<void>; open: () => void };

function newGate() {
  let openFn!: () => void;
  const promise = new Promise<void>((r) => {
    openFn = r;
  });
  gate = { promise, open: openFn };
}

const frame = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: 1, model: 'slow', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

async function slowStream(_req: http.IncomingMessage, res: http.ServerResponse, body: string): Promise<void> {
  open++;
  maxOpen = Math.max(maxOpen, open);
  arrivals.push(Date.now());
  res.on('close', () => {
    open--;
  });
  const stream = JSON.parse(body).stream === true;
  const wait = gate.promise;
  if (!stream) {
    await wait;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'chatcmpl-slow',
        object: 'chat.completion',
        created: 1,
        model: 'slow',
        choices: [{ index: 0, message: { role: 'assistant', content: 'done' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
      }),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(frame({ role: 'assistant', content: '' }));
  res.write(frame({ content: 'Hello' }));
  await wait;
  for (const w of [' from', ' the', ' slow', ' upstream']) {
    if (res.destroyed) return;
    res.write(frame({ content: w }));
    await sleep(5);
  }
  res.write(frame({}, 'stop'));
  res.write(
    `data: ${JSON.stringify({ id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: 1, model: 'slow', choices: [], usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 } })}\n\n`,
  );
  res.end('data: [DONE]\n\n');
}

t.before(async () => {
  newGate();
  up = await scriptedUpstream(slowStream);
  const cfg = baseConfig();
  cfg.providers.slow = { kind: 'openai', base_url: up.url + '/v1', protocols: ['openai-chat'] };
  cfg.models.slow = { provider: 'slow', price: { input: 1, output: 1 } };
  cfg.groups.slowgrp = { kind: 'chat', passthrough: true, models: ['slow'] };
  cfg.users.burst = { balance: 10, concurrency: C, queue: { size: Q, max_wait: '30s' } };
  cfg.users.impatient = { balance: 10, concurrency: 1, queue: { size: 1, max_wait: '300ms' } };
  cfg.users.gone = { balance: 10, concurrency: 1, queue: { size: 1, max_wait: '30s' } };
  // One slot and a queue that gives up fast: a leaked slot shows as a queue timeout.
  cfg.users.failing = { balance: 10, concurrency: 1, queue: { size: 1, max_wait: '200ms' } };
  cfg.keys.push(
    { key: K.failing, name: 'failing', user: 'failing', group: 'chat' },
    { key: K.burst, name: 'burst', user: 'burst', group: 'slowgrp' },
    { key: K.timeout, name: 'impatient', user: 'impatient', group: 'slowgrp' },
    { key: K.gone, name: 'gone', user: 'gone', group: 'slowgrp' },
  );
  g = await startGateway(cfg);
});
t.teardown(async () => {
  gate.open();
  await g.close();
  await up.close();
});

const body = (stream = true) => JSON.stringify({ model: 'slow', stream, messages: [{ role: 'user', content: 'hi' }] });

async function send(k: string, opts: { stream?: boolean; signal?: AbortSignal } = {}): Promise<Reply> {
  const res = await fetch(g.url + '/v1/chat/completions', {
    method: 'POST',
    signal: opts.signal,
    headers: { ...bearer(k), 'content-type': 'application/json' },
    body: body(opts.stream ?? true),
  });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

const waiting = async () => (await g.gw.metrics.queueWaiting.get()).values[0]?.value ?? 0;

const QUEUE_FULL = {
  status: 429,
  type: 'rate_limit_error',
  message: 'Too many pending requests, please retry later',
  retryAfter: null,
  shouldRetryFalse: false,
};
const QUEUE_TIMEOUT = {
  status: 429,
  type: 'rate_limit_error',
  message: 'Concurrency limit exceeded for user, please retry later',
  retryAfter: null,
  shouldRetryFalse: false,
};

t.test(`${3 * (C + Q)} simultaneous streams with ${C} slots and a queue of ${Q}`, async (t) => {
  newGate();
  maxOpen = 0;
  const N = 3 * (C + Q);
  const replies: Reply[] = [];
  const all = Array.from({ length: N }, () =>
    send(K.burst).then((r) => {
      replies.push(r);
      return r;
    }),
  );
  t.ok(
    await until(() => open === C && replies.length === 2 * (C + Q), 10_000),
    'C in flight upstream, the rest of the queue overflow answered',
  );
  t.ok(await until(async () => (await waiting()) === Q), `${Q} waiting in the queue`);
  await sleep(50);
  t.equal(open, C, 'still exactly C upstream');
  t.equal(replies.length, 2 * (C + Q), 'nobody else answered meanwhile');
  for (const r of replies) assertError(t, r, QUEUE_FULL);
  t.same(replies[0].json, {
    error: { type: 'rate_limit_error', code: 'rate_limit_error', message: 'Too many pending requests, please retry later', param: null },
  });
  gate.open();
  const done = await Promise.all(all);
  t.equal(maxOpen, C, `never more than ${C} upstream at once`);
  const ok = done.filter((r) => r.status === 200);
  t.equal(ok.length, C + Q, 'the slot holders and the queue were served');
  for (const r of ok) t.match(r.text, /"content":"Hello"[\s\S]*"content":" upstream"[\s\S]*data: \[DONE\]/, 'a whole stream');
  t.equal(done.filter((r) => r.status === 429).length, 2 * (C + Q));

  // No slot left held: C + Q more requests go straight up (C) and into the queue (Q), none refused.
  newGate();
  maxOpen = 0;
  const again: Reply[] = [];
  const second = Array.from({ length: C + Q }, () =>
    send(K.burst).then((r) => {
      again.push(r);
      return r;
    }),
  );
  t.ok(await until(async () => open === C && (await waiting()) === Q), 'C in flight and Q queued again');
  t.equal(again.length, 0, 'nothing refused');
  gate.open();
  t.same(
    (await Promise.all(second)).map((r) => r.status),
    Array(C + Q).fill(200),
  );
  t.equal(maxOpen, C);
  t.ok(await until(async () => open === 0 && (await waiting()) === 0), 'all released');
});

t.test('waiting past max_wait → 429 "Concurrency limit exceeded for user"', async (t) => {
  newGate();
  const holder = send(K.timeout);
  t.ok(await until(() => open === 1), 'the slot is taken');
  const queued = await send(K.timeout);
  assertError(t, queued, QUEUE_TIMEOUT);
  t.equal(open, 1, 'the waiter never reached the upstream');
  gate.open();
  t.equal((await holder).status, 200);
  t.equal((await send(K.timeout)).status, 200, 'the slot is free again');
});

t.test('a client that disconnects frees its slot at once: the queued request gets it before the upstream would have ended', async (t) => {
  for (const stream of [true, false]) {
    newGate();
    arrivals = [];
    const ac = new AbortController();
    const holder = fetch(g.url + '/v1/chat/completions', {
      method: 'POST',
      signal: ac.signal,
      headers: { ...bearer(K.gone), 'content-type': 'application/json' },
      body: body(stream),
    })
      .then(async (r) => {
        await r.text();
      })
      .catch(() => 'aborted');
    t.ok(await until(() => open === 1), `${stream ? 'stream' : 'non-stream'}: the slot is taken`);
    const next = send(K.gone, { stream });
    t.ok(await until(async () => (await waiting()) === 1), 'the next one waits in the queue');
    if (stream) await sleep(20); // the stream is committed and flowing to the client
    ac.abort();
    // The gate is still shut: the holder's upstream would never end on its own, so only the
    // disconnect can hand the slot to the queued request.
    t.ok(await until(() => arrivals.length === 2), 'the queued request reached the upstream after the disconnect, gate still shut');
    gate.open();
    t.equal(await holder, 'aborted');
    t.equal((await next).status, 200);
    t.ok(await until(() => open === 0));
  }
});

t.test('a client that disconnects while queued frees its queue place at once', async (t) => {
  newGate();
  const holder = send(K.gone);
  t.ok(await until(() => open === 1), 'the slot is taken');
  const ac = new AbortController();
  const queued = send(K.gone, { signal: ac.signal }).catch(() => 'aborted');
  t.ok(await until(async () => (await waiting()) === 1), 'queued');
  ac.abort();
  t.ok(await until(async () => (await waiting()) === 0), 'the queue place is free while the slot is still held');
  t.equal(await queued, 'aborted');
  const replacement = send(K.gone);
  t.ok(await until(async () => (await waiting()) === 1), 'a new request takes the place (not refused)');
  const overflow = await send(K.gone);
  assertError(t, overflow, QUEUE_FULL, 'the queue holds one: the next is refused');
  gate.open();
  t.equal((await holder).status, 200);
  t.equal((await replacement).status, 200);
  t.equal(open, 0);
});

t.test('every way a request can fail releases its slot', async (t) => {
  const ask = (text: string, stream = false) =>
    fetch(g.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { ...bearer(K.failing), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-model', stream, messages: [{ role: 'user', content: text }] }),
    }).then(async (r) => ({ status: r.status, text: await r.text() }));
  const cases: [string, string, boolean, number][] = [
    ['upstream 500', '[[mock: status=500]]', false, 502],
    ['upstream 400', '[[mock: status=400]]', false, 400],
    ['upstream 529', '[[mock: status=529]]', true, 503],
    ['connection cut before the answer', '[[mock: cut_after=10]]', false, 502],
    ['stream cut after commit', '[[mock: words=50 cut_after=6]]', true, 200],
    ['in-stream upstream error', '[[mock: words=50 chunk_delay=10 stream_error=6]]', true, 200],
  ];
  for (const [name, text, stream, status] of cases) {
    const r = await ask(text, stream);
    t.equal(r.status, status, `${name}: ${status}`, { body: r.text.slice(0, 300) });
    const next = await ask('hello');
    t.equal(next.status, 200, `${name}: the next request gets the slot at once (no queue timeout)`);
  }
  t.equal(await waiting(), 0);
});
