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
const K = { quota: key(0x600), window: key(0x601), plan: key(0x602), balance: key(0x603) };

const clock = new ManualClock(Date.UTC(2026, 0, 6, 8, 0, 0));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.models['race-model'] = { provider: 'mock', price: PRICE };
  cfg.groups.race = { kind: 'chat', passthrough: true, models: ['race-model'] };
  cfg.groups['race-plan'] = { kind: 'chat', passthrough: true, billing: 'plan', models: ['race-model'], plan: { daily: LIMIT_USD } };
  cfg.users.rich = { balance: 1000, subscriptions: [{ group: 'race-plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.users.poor = { balance: LIMIT_USD };
  cfg.keys.push(
    { key: K.quota, name: 'race-quota', user: 'rich', group: 'race', quota: LIMIT_USD },
    { key: K.window, name: 'race-window', user: 'rich', group: 'race', windows: { '1d': LIMIT_USD } },
    { key: K.plan, name: 'race-plan', user: 'rich', group: 'race-plan' },
    { key: K.balance, name: 'race-balance', user: 'poor', group: 'race' },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const requestBody = JSON.stringify({ model: 'race-model', max_tokens: USAGE.output, messages: [{ role: 'user', content: `Hello ${directive(USAGE)}` }] });

/** The reservation each request makes (its worst case): input ≈ body chars / 3, output = max_tokens. */
function reserve(): number {
  const body = { text: requestBody, json: JSON.parse(requestBody), model: 'race-model', stream: false, fallback: [] };
  return worstCaseCharge(body, [g.gw.config.models['race-model']], 1_000_000);
}

async function storm(k: string): Promise<Reply[]> {
  return Promise.all(Array.from({ length: N }, () => call(g.url + '/v1/chat/completions', {
    method: 'POST', headers: { ...bearer(k), 'content-type': 'application/json' }, body: requestBody,
  })));
}

async function check(t: any, k: string, name: string, err: ErrorExpectation, spent: () => Promise<number>) {
  const r = reserve();
  t.ok(r >= EACH, `the reservation (${r}) covers the actual charge (${EACH})`);
  // Storms until one admits nothing: reservations held by requests in flight may refuse requests
  // the limit could still take, but once everything settled the limit is reached, not passed by more
  // than one request.
  let admitted = 0;
  let storms = 0;
  const refused: Reply[] = [];
  for (;;) {
    const replies = await storm(k);
    storms++;
    const ok = replies.filter((x) => x.status === 200);
    refused.push(...replies.filter((x) => x.status !== 200));
    for (const x of ok) t.equal(x.json.usage.total_tokens, USAGE.input + USAGE.output);
    admitted += ok.length;
    if (ok.length === 0 || storms === 10) break;
  }
  t.ok(storms < 10, `the limit was reached after ${storms} storms of ${N}`);
  t.ok(admitted * EACH >= LIMIT, `spend ${admitted * EACH} reached the limit ${LIMIT}`);
  t.ok(admitted * EACH < LIMIT + r, `spend ${admitted * EACH} < limit ${LIMIT} + one request's worst case ${r}`);
  t.ok(admitted <= Math.floor(LIMIT / EACH) + 1, `at most one request beyond the limit (${admitted})`);
  t.equal(refused.length, storms * N - admitted);
  const distinct = new Set(refused.map((x) => `${x.status} ${x.json?.code ?? x.json?.error?.type} ${x.json?.message ?? x.json?.error?.message}`));
  t.equal(distinct.size, 1, `every refusal is the same error: ${[...distinct].join(' | ')}`);
  assertError(t, refused[0], err, name);
  const u = await usageOf(g, k);
  t.equal(u.usage.total.requests, admitted, 'one usage record per answered request');
  t.equal(Math.round(u.usage.total.actual_cost * 1e6), admitted * EACH, '/v1/usage spend = sum of the charges');
  t.equal(await spent(), admitted * EACH, 'the store\'s counter = sum of the charges');
  return { ok: admitted, u };
}

t.test('key quota', async (t) => {
  const res = await check(t, K.quota, 'quota', { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', shouldRetryFalse: true }, async () => (await g.gw.store.keyState('race-quota')).used);
  const st = await g.gw.store.keyState('race-quota');
  t.equal(st.reserved, 0, 'no reservation left behind');
  t.equal(res.u.quota.used, res.ok * EACH / 1e6);
});

t.test('key window', async (t) => {
  await check(t, K.window, 'window', { status: 429, type: 'rate_limit_exceeded', message: 'api key 日限额已用完', shouldRetryFalse: true },
    async () => (await g.gw.store.keyState('race-window')).windows['1d'].used);
  const st = await g.gw.store.keyState('race-window');
  t.equal(st.windows['1d'].reserved, 0, 'no reservation left behind');
});

t.test('plan allowance', async (t) => {
  await check(t, K.plan, 'plan', { status: 429, code: 'USAGE_LIMIT_EXCEEDED', shouldRetryFalse: true },
    async () => (await g.gw.store.planUsage('rich', 'race-plan')).daily);
});

t.test('wallet balance', async (t) => {
  const res = await check(t, K.balance, 'balance', { status: 403, type: 'billing_error' }, async () => g.gw.store.balanceSpent('poor'));
  t.equal(res.u.balance, (LIMIT - res.ok * EACH) / 1e6, 'balance = credit − the sum of the charges');
  t.ok(res.u.balance > -reserve() / 1e6, 'overrun by less than one request');
});
