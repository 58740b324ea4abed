/**
 * Admission without races (issue item 8): 200 concurrent requests against a small key quota, a
 * key window, a plan allowance and a wallet balance. Each admission reserves the request's worst
 * case in one atomic step, so the limit is overrun by at most one request; every answered request
 * is settled exactly once (the recorded spend — /v1/usage and the store — equals the sum of the
 * charges computed from the mock's deterministic usage), and no reservation is left behind.
 */
import t from 'tap';
import { baseConfig, bearer, call, startGateway, type Reply, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, charge, directive, key, usageOf, type ErrorExpectation } from './helpers.js';
import { worstCaseCharge } from '../../core/billing.js';

const N = 200;
const PRICE = { input: 10, output: 20 };
const USAGE = { input: 10, output: 20 };
/** 10×10 + 20×20 = 500 micro-USD per request. */
const EACH = charge(USAGE, PRICE).actual;
const LIMIT_USD = 0.0102; // not a multiple of a request: the last one admitted overruns it
const LIMIT = 10_200;
const K = { quota: key(0x600), window: key(0x601), plan: key(0x602), balance: key(0x603), sameId: key(0x604), uncapped: key(0x605) };

const clock = new ManualClock(Date.UTC(2026, 0, 6, 8, 0, 0));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['race-model'] = { provider: 'mock', price: PRICE };
  // A model whose output ceiling is small, so uncapped requests still admit a few at a time.
  cfg.models['race-small'] = { provider: 'mock', price: PRICE, max_output_tokens: 50 };
  cfg.groups.race = { kind: 'chat', passthrough: true, models: ['race-model', 'race-small'] };
  cfg.groups['race-plan'] = { kind: 'chat', passthrough: true, billing: 'plan', models: ['race-model'], plan: { daily: LIMIT_USD } };
  cfg.users.rich = { balance: 1000, subscriptions: [{ group: 'race-plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.users.poor = { balance: LIMIT_USD };
  cfg.keys.push(
    { key: K.quota, name: 'race-quota', user: 'rich', group: 'race', quota: LIMIT_USD },
    { key: K.window, name: 'race-window', user: 'rich', group: 'race', windows: { '1d': LIMIT_USD } },
    { key: K.plan, name: 'race-plan', user: 'rich', group: 'race-plan' },
    { key: K.balance, name: 'race-balance', user: 'poor', group: 'race' },
    { key: K.sameId, name: 'race-same-id', user: 'rich', group: 'race', quota: LIMIT_USD },
    { key: K.uncapped, name: 'race-uncapped', user: 'rich', group: 'race', quota: LIMIT_USD },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const requestBody = JSON.stringify({
  model: 'race-model',
  max_tokens: USAGE.output,
  messages: [{ role: 'user', content: `Hello ${directive(USAGE)}` }],
});

/** A request that sets no output cap, in CJK text (3 UTF-8 bytes a character). */
const uncappedCjkBody = JSON.stringify({
  model: 'race-small',
  messages: [{ role: 'user', content: `你好，请用中文回答这个问题。${directive(USAGE)}` }],
});

/** The reservation each request makes (its worst case): input ≈ UTF-8 bytes / 2, output = the cap. */
function reserve(text = requestBody): number {
  const json = JSON.parse(text);
  const body = { text, json, model: json.model, stream: false, fallback: [] };
  return worstCaseCharge(body, [g.gw.config.models[json.model]], 1_000_000);
}

async function storm(k: string, headers: Record<string, string>, body: string): Promise<Reply[]> {
  return Promise.all(
    Array.from({ length: N }, () =>
      call(g.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { ...bearer(k), 'content-type': 'application/json', ...headers },
        body,
      }),
    ),
  );
}

/** The refusal of a request whose limit is filled only by reservations in flight: retryable. */
const HELD: ErrorExpectation = {
  status: 429,
  type: 'rate_limit_error',
  message: 'The rest of this limit is held by requests in flight, please retry shortly',
  retryAfter: '1',
  shouldRetryFalse: false,
};
const signature = (x: Reply) => `${x.status} ${x.json?.code ?? x.json?.error?.type} ${x.json?.message ?? x.json?.error?.message}`;

async function check(
  t: any,
  k: string,
  name: string,
  err: ErrorExpectation,
  spent: () => Promise<number>,
  headers: Record<string, string> = {},
  body = requestBody,
) {
  const r = reserve(body);
  t.ok(r >= EACH, `the reservation (${r}) covers the actual charge (${EACH})`);
  // Storms until one admits nothing. While requests are in flight their reservations refuse others
  // with the retryable "held" 429; once everything settled the limit is reached, not passed by more
  // than one request, and every refusal is the limit's own (non-retryable) error.
  let admitted = 0;
  let storms = 0;
  let last: Reply[] = [];
  const held: Reply[] = [];
  for (;;) {
    const replies = await storm(k, headers, body);
    storms++;
    const ok = replies.filter((x) => x.status === 200);
    last = replies.filter((x) => x.status !== 200);
    for (const x of ok) t.equal(x.json.usage.total_tokens, USAGE.input + USAGE.output);
    if (headers['x-request-id'])
      t.ok(
        replies.every((x) => x.headers.get('x-request-id') === headers['x-request-id']),
        "the client's X-Request-ID is echoed",
      );
    admitted += ok.length;
    if (ok.length === 0 || storms === 20) break;
    // The held 429 is a protocol-format error; flat limit errors carry a top-level `code`.
    const isHeld = (x: Reply) => x.json?.code === undefined && x.json?.error?.type === 'rate_limit_error';
    held.push(...last.filter(isHeld));
    const other = last.filter((x) => !isHeld(x));
    if (other.length > 0) assertError(t, other[0], err, `${name} (storm ${storms})`);
  }
  t.ok(storms < 20, `the limit was reached after ${storms} storms of ${N}`);
  t.ok(admitted * EACH >= LIMIT, `spend ${admitted * EACH} reached the limit ${LIMIT}`);
  t.ok(admitted * EACH < LIMIT + r, `spend ${admitted * EACH} < limit ${LIMIT} + one request's worst case ${r}`);
  t.ok(admitted <= Math.floor(LIMIT / EACH) + 1, `at most one request beyond the limit (${admitted})`);
  t.equal(last.length, N, 'the final storm admitted nothing');
  const distinct = new Set(last.map(signature));
  t.equal(distinct.size, 1, `once the limit is reached every refusal is the same error: ${[...distinct].join(' | ')}`);
  assertError(t, last[0], err, name);
  t.ok(held.length > 0, `requests refused only by reservations in flight were told to retry (${held.length})`);
  for (const x of new Set(held.map(signature))) t.equal(x, signature(held[0]), 'one held error');
  if (held.length > 0) assertError(t, held[0], HELD, `${name} held`);
  const u = await usageOf(g, k);
  t.equal(u.usage.total.requests, admitted, 'one usage record per answered request');
  t.equal(Math.round(u.usage.total.actual_cost * 1e6), admitted * EACH, '/v1/usage spend = sum of the charges');
  t.equal(await spent(), admitted * EACH, "the store's counter = sum of the charges");
  return { ok: admitted, u };
}

t.test('key quota', async (t) => {
  const res = await check(
    t,
    K.quota,
    'quota',
    { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', shouldRetryFalse: true },
    async () => (await g.gw.store.keyState('race-quota')).used,
  );
  const st = await g.gw.store.keyState('race-quota');
  t.equal(st.reserved, 0, 'no reservation left behind');
  t.equal(res.u.quota.used, (res.ok * EACH) / 1e6);
});

t.test('key window', async (t) => {
  await check(
    t,
    K.window,
    'window',
    { status: 429, type: 'rate_limit_exceeded', message: 'api key 日限额已用完', shouldRetryFalse: true },
    async () => (await g.gw.store.keyState('race-window')).windows['1d'].used,
  );
  const st = await g.gw.store.keyState('race-window');
  t.equal(st.windows['1d'].reserved, 0, 'no reservation left behind');
});

t.test('plan allowance', async (t) => {
  await check(
    t,
    K.plan,
    'plan',
    { status: 429, code: 'USAGE_LIMIT_EXCEEDED', shouldRetryFalse: true },
    async () => (await g.gw.store.planUsage('rich', 'race-plan')).daily,
  );
});

t.test('wallet balance', async (t) => {
  const res = await check(t, K.balance, 'balance', { status: 403, type: 'billing_error' }, async () => g.gw.store.balanceSpent('poor'));
  t.equal(res.u.balance, (LIMIT - res.ok * EACH) / 1e6, 'balance = credit − the sum of the charges');
  t.ok(res.u.balance > -reserve() / 1e6, 'overrun by less than one request');
});

t.test('every request carries the same client X-Request-ID: each is still admitted and billed on its own', async (t) => {
  // The client's id is echoed, never used as the ledger id: reusing it cannot skip a claim or a charge.
  const res = await check(
    t,
    K.sameId,
    'quota, shared X-Request-ID',
    { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', shouldRetryFalse: true },
    async () => (await g.gw.store.keyState('race-same-id')).used,
    { 'x-request-id': 'my-fixed-request-id' },
  );
  t.equal((await g.gw.store.keyState('race-same-id')).reserved, 0, 'no reservation left behind');
  t.equal(res.u.quota.used, (res.ok * EACH) / 1e6);
});

t.test("requests without max_tokens, in CJK text: the reservation is the model's output ceiling, the bound holds", async (t) => {
  const r = reserve(uncappedCjkBody);
  t.ok(
    r >= 50 * PRICE.output + (Buffer.byteLength(uncappedCjkBody) / 2) * PRICE.input,
    `the output ceiling and the bytes are reserved (${r})`,
  );
  await check(
    t,
    K.uncapped,
    'quota, uncapped',
    { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', shouldRetryFalse: true },
    async () => (await g.gw.store.keyState('race-uncapped')).used,
    {},
    uncappedCjkBody,
  );
});
