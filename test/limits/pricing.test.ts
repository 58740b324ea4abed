/**
 * Pricing and metering end to end (issue "Money and limits" items 1 and 9): per-model prices for
 * the four disjoint token buckets, group multiplier or personal rate, $0 models, integer micro-USD
 * with `cost` (list) and `actual_cost` (charged) — all read back through /v1/usage — for
 * non-streaming and streaming answers of every protocol, OpenAI-style and Anthropic-style upstream
 * usage, cut-short streams, count_tokens (never billed) and fallback (billed once).
 */
import t from 'tap';
import { baseConfig, bearer, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { bodyFor, charge, directive, key, modelCall, PATHS, sleep, until, usageOf, type Proto } from './helpers.js';
import type { Usage } from '../../core/money.js';

const CLAUDE = { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 };
const GPT = { input: 0.25, output: 2, cache_read: 0.025, cache_write: 0.5 };
const BOB_CHAT = key(0xb0b1);
const BOB_MSG = key(0xb0b2);

let g: TestGateway;
const clock = new ManualClock(Date.UTC(2026, 2, 10, 9, 0, 0));

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['p-claude'] = { provider: 'mock', price: CLAUDE };
  cfg.models['p-gpt'] = { provider: 'mock', price: GPT };
  cfg.models['p-fail'] = { provider: 'mock', upstream: 'p-fail#status=503', price: { input: 100, output: 100 } };
  for (const grp of ['chat', 'messages', 'responses']) cfg.groups[grp].models.push('p-claude', 'p-gpt', 'p-fail', 'free-model');
  cfg.groups.responses.models = [...new Set(cfg.groups.responses.models)];
  cfg.groups.messages.models = [...new Set(cfg.groups.messages.models)];
  cfg.groups.chat.models = [...new Set(cfg.groups.chat.models)];
  cfg.groups.messages.multiplier = 1.2;
  cfg.groups.responses.multiplier = 1.5;
  cfg.users.bob = { balance: 50, rates: { chat: 0.85, messages: 0.5 } };
  cfg.keys.push({ key: BOB_CHAT, name: 'bob-chat', user: 'bob', group: 'chat' });
  cfg.keys.push({ key: BOB_MSG, name: 'bob-msg', user: 'bob', group: 'messages' });
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const micros = (usd: number) => Math.round(usd * 1e6);

interface Snap {
  requests: number;
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  total: number;
  cost: number;
  actual: number;
  balance: number;
  models: Record<string, { requests: number; cost: number; actual: number }>;
}

async function snap(apiKey: string): Promise<Snap> {
  const u = await usageOf(g, apiKey);
  const tot = u.usage.total;
  const models: Snap['models'] = {};
  for (const m of u.model_stats) models[m.model] = { requests: m.requests, cost: micros(m.cost), actual: micros(m.actual_cost) };
  return {
    requests: tot.requests,
    input: tot.input_tokens,
    output: tot.output_tokens,
    cacheRead: tot.cache_read_tokens,
    cacheWrite: tot.cache_creation_tokens,
    total: tot.total_tokens,
    cost: micros(tot.cost),
    actual: micros(tot.actual_cost),
    balance: micros(u.balance),
    models,
  };
}

function diff(a: Snap, b: Snap) {
  return {
    requests: b.requests - a.requests,
    input: b.input - a.input,
    output: b.output - a.output,
    cacheRead: b.cacheRead - a.cacheRead,
    cacheWrite: b.cacheWrite - a.cacheWrite,
    total: b.total - a.total,
    cost: b.cost - a.cost,
    actual: b.actual - a.actual,
    spent: a.balance - b.balance,
  };
}

const U: Usage = { input: 1000, output: 500, cacheRead: 2000, cacheWrite: 400 };

async function streamCall(
  apiKey: string,
  proto: Proto,
  model: string,
  u: Partial<Usage> & { extra?: string },
): Promise<{ status: number; text: string }> {
  const res = await fetch(g.url + PATHS[proto], {
    method: 'POST',
    headers: { ...bearer(apiKey), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor(proto, model, directive(u), { stream: true })),
  });
  return { status: res.status, text: await res.text() };
}

const cases: Array<{ name: string; key: string; proto: Proto; multiplier: number }> = [
  { name: 'Chat on a passthrough chat group (OpenAI-style usage, prompt includes cache)', key: KEYS.chat, proto: 'chat', multiplier: 1 },
  {
    name: 'Messages on a messages group (Anthropic-style usage, input excludes cache)',
    key: KEYS.messages,
    proto: 'messages',
    multiplier: 1.2,
  },
  { name: 'Responses on a responses group (OpenAI Responses usage)', key: KEYS.responses, proto: 'responses', multiplier: 1.5 },
  { name: 'Chat converted to an Anthropic upstream (messages group)', key: KEYS.messages, proto: 'chat', multiplier: 1.2 },
  { name: 'Messages converted to an OpenAI upstream (responses group)', key: KEYS.responses, proto: 'messages', multiplier: 1.5 },
  { name: 'Responses converted to an Anthropic upstream (messages group)', key: KEYS.messages, proto: 'responses', multiplier: 1.2 },
];

for (const c of cases) {
  for (const stream of [false, true]) {
    t.test(`${c.name}, ${stream ? 'streaming' : 'non-streaming'}: four buckets priced once`, async (t) => {
      const before = await snap(c.key);
      const r = stream ? await streamCall(c.key, c.proto, 'p-claude', U) : await modelCall(g, c.key, c.proto, 'p-claude', U);
      t.equal(r.status, 200, r.text.slice(0, 300));
      const after = await snap(c.key);
      const expected = charge(U, CLAUDE, c.multiplier);
      t.equal(expected.cost, 12_600, 'list price: 1000×3 + 500×15 + 2000×0.3 + 400×3.75 micro-USD');
      t.same(
        diff(before, after),
        {
          requests: 1,
          input: 1000,
          output: 500,
          cacheRead: 2000,
          cacheWrite: 400,
          total: 3900,
          cost: expected.cost,
          actual: expected.actual,
          spent: expected.actual,
        },
        'one record, disjoint buckets, cost at list price, actual after the multiplier, balance charged actual',
      );
    });
  }
}

t.test('the client sees the buckets in its own protocol: OpenAI prompt_tokens includes cache, Anthropic input excludes it', async (t) => {
  const chat = await modelCall(g, KEYS.chat, 'chat', 'p-claude', U);
  t.equal(chat.json.usage.prompt_tokens, 3400);
  t.equal(chat.json.usage.prompt_tokens_details.cached_tokens, 2000);
  t.equal(chat.json.usage.completion_tokens, 500);
  const msg = await modelCall(g, KEYS.messages, 'messages', 'p-claude', U);
  t.match(msg.json.usage, { input_tokens: 1000, output_tokens: 500, cache_read_input_tokens: 2000, cache_creation_input_tokens: 400 });
});

t.test('a cost is rounded once (half up) from the exact sum, never the sum of rounded pieces', async (t) => {
  // 2×0.25 + 1×2 + 20×0.025 = 0.5 + 2 + 0.5 = 3 micro-USD exactly (rounding each piece would give 4).
  const u = { input: 2, output: 1, cacheRead: 20, cacheWrite: 0 };
  const b1 = await snap(KEYS.chat);
  t.equal((await modelCall(g, KEYS.chat, 'chat', 'p-gpt', u)).status, 200);
  const d1 = diff(b1, await snap(KEYS.chat));
  t.equal(d1.cost, 3);
  t.equal(d1.actual, 3);
  // ×1.5: 4.5 micro-USD → 5.
  const b2 = await snap(KEYS.responses);
  t.equal((await modelCall(g, KEYS.responses, 'responses', 'p-gpt', u)).status, 200);
  const d2 = diff(b2, await snap(KEYS.responses));
  t.equal(d2.cost, 3);
  t.equal(d2.actual, 5);
  const u2 = await usageOf(g, KEYS.responses);
  t.ok(Number.isFinite(u2.usage.total.cost));
  for (const v of [u2.usage.total.cost, u2.usage.total.actual_cost, u2.balance]) {
    const dec = String(v).split('.')[1] ?? '';
    t.ok(dec.length <= 6 && !/e/i.test(String(v)), `${v} has at most 6 decimals`);
  }
});

t.test('a personal rate replaces the group multiplier', async (t) => {
  const b1 = await snap(BOB_CHAT);
  t.equal((await modelCall(g, BOB_CHAT, 'chat', 'p-claude', U)).status, 200);
  const d1 = diff(b1, await snap(BOB_CHAT));
  t.equal(d1.cost, 12_600);
  t.equal(d1.actual, 10_710, '12600 × 0.85');
  t.equal(d1.spent, 10_710);
  const b2 = await snap(BOB_MSG);
  t.equal((await modelCall(g, BOB_MSG, 'messages', 'p-claude', U)).status, 200);
  const d2 = diff(b2, await snap(BOB_MSG));
  t.equal(d2.cost, 12_600);
  t.equal(d2.actual, 6_300, '12600 × 0.5, not × 1.2 × 0.5');
});

t.test('$0 models: recorded with their tokens, cost and charge 0', async (t) => {
  const b = await snap(KEYS.chat);
  t.equal((await modelCall(g, KEYS.chat, 'chat', 'free-model', U)).status, 200);
  const d = diff(b, await snap(KEYS.chat));
  t.same(d, { requests: 1, input: 1000, output: 500, cacheRead: 2000, cacheWrite: 400, total: 3900, cost: 0, actual: 0, spent: 0 });
});

t.test('count_tokens is never billed nor recorded', async (t) => {
  const b = await snap(KEYS.messages);
  const r = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(KEYS.messages),
    json: { model: 'p-claude', messages: [{ role: 'user', content: 'count me [[mock: input_tokens=1234]]' }] },
  });
  t.equal(r.status, 200);
  t.equal(r.json.input_tokens, 1234);
  const d = diff(b, await snap(KEYS.messages));
  t.same(d, { requests: 0, input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0, cost: 0, actual: 0, spent: 0 });
});

for (const proto of ['chat', 'messages', 'responses'] as const) {
  t.test(`fallback (${proto}): the first model fails, the answer is billed once for the model that answered`, async (t) => {
    const k = proto === 'chat' ? KEYS.chat : proto === 'messages' ? KEYS.messages : KEYS.responses;
    const mult = proto === 'chat' ? 1 : proto === 'messages' ? 1.2 : 1.5;
    const b = await snap(k);
    const r = await modelCall(g, k, proto, 'p-fail', U, { models: ['p-claude'] });
    t.equal(r.status, 200, r.text.slice(0, 200));
    const a = await snap(k);
    const d = diff(b, a);
    const expected = charge(U, CLAUDE, mult);
    t.same(d, {
      requests: 1,
      input: 1000,
      output: 500,
      cacheRead: 2000,
      cacheWrite: 400,
      total: 3900,
      cost: expected.cost,
      actual: expected.actual,
      spent: expected.actual,
    });
    t.equal((a.models['p-claude']?.requests ?? 0) - (b.models['p-claude']?.requests ?? 0), 1);
    t.notOk(a.models['p-fail'], 'nothing recorded for the model that failed');
  });
}

const DELTA: Record<Proto, string> = { chat: '"content":', messages: 'text_delta', responses: 'response.output_text.delta' };

/** Starts a stream, reads until `deltas` text deltas arrived, then aborts the client side. */
async function abortMidStream(apiKey: string, proto: Proto, model: string, text: string, deltas: number): Promise<string> {
  const ac = new AbortController();
  const res = await fetch(g.url + PATHS[proto], {
    method: 'POST',
    signal: ac.signal,
    headers: { ...bearer(apiKey), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor(proto, model, text, { stream: true })),
  });
  const reader = res.body!.getReader();
  let got = '';
  const dec = new TextDecoder();
  while (got.split(DELTA[proto]).length - 1 < deltas) {
    const { value, done } = await reader.read();
    if (done) break;
    got += dec.decode(value);
  }
  ac.abort();
  await reader.cancel().catch(() => undefined);
  return got;
}

for (const [proto, k] of [
  ['chat', KEYS.chat],
  ['messages', KEYS.messages],
  ['responses', KEYS.responses],
  ['chat', KEYS.messages],
] as const) {
  t.test(
    `a client that disconnects mid-stream (${proto}${k === KEYS.messages && proto === 'chat' ? ', converted' : ''}) is billed for what was generated, never zero`,
    async (t) => {
      const b = await snap(k);
      const got = await abortMidStream(k, proto, 'p-claude', '[[mock: words=400 chunk_delay=10 input_tokens=1000]]', 10);
      t.ok(got.split(DELTA[proto]).length > 10, 'part of the reply arrived');
      t.ok(await until(async () => (await snap(k)).requests === b.requests + 1), 'one usage record');
      const d = diff(b, await snap(k));
      t.equal(d.requests, 1);
      t.ok(d.output > 0, `output billed (${d.output} tokens)`);
      t.ok(d.output < 400, 'not the whole reply: the upstream was aborted');
      t.ok(d.input > 0, 'input billed');
      if (k === KEYS.messages) t.equal(d.input, 1000, 'the input the upstream reported in message_start');
      t.ok(d.actual > 0, 'charged');
      t.equal(d.spent, d.actual);
    },
  );
}

t.test('a client that leaves inside the preamble hold (nothing reached it yet) is billed the input the upstream reported', async (t) => {
  // message_start carries the input usage, then the upstream thinks silently: the response is not
  // committed (preamble_hold) when the client gives up, but the upstream already did the work.
  const k = KEYS.messages;
  const b = await snap(k);
  const ac = new AbortController();
  const pending = fetch(g.url + PATHS.messages, {
    method: 'POST',
    signal: ac.signal,
    headers: { ...bearer(k), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor('messages', 'p-claude', '[[mock: input_tokens=5000 output_tokens=1 hang_after=1]]', { stream: true })),
  }).then(
    () => 'headers',
    () => 'aborted',
  );
  await sleep(300);
  ac.abort();
  t.equal(await pending, 'aborted', 'no response headers had been sent');
  t.ok(await until(async () => (await snap(k)).requests === b.requests + 1), 'one usage record');
  const d = diff(b, await snap(k));
  t.equal(d.input, 5000, 'the input reported in message_start');
  t.equal(d.output, 1, 'the output message_start reported (1, as the real API does), nothing more');
  t.ok(d.actual > 0, 'charged');
  t.equal(d.spent, d.actual);
});

for (const [proto, k] of [
  ['chat', KEYS.chat],
  ['messages', KEYS.messages],
  ['responses', KEYS.responses],
] as const) {
  t.test(`an upstream that dies mid-stream (${proto}): billed for what was generated, the client gets an error event`, async (t) => {
    const b = await snap(k);
    const r = await streamCall(k, proto, 'p-claude', { input: 1000, output: 300, extra: 'words=300 cut_after=40' });
    t.equal(r.status, 200, 'the stream had started');
    t.match(r.text, /event: error/, "the protocol's error event");
    t.ok(await until(async () => (await snap(k)).requests === b.requests + 1), 'one usage record');
    const d = diff(b, await snap(k));
    t.ok(d.output > 0 && d.output < 300, `output billed for the part streamed (${d.output})`);
    t.ok(d.actual > 0);
    t.equal(d.spent, d.actual);
  });
}
