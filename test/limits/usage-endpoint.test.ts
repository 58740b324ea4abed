/**
 * GET /v1/usage — the frozen contract of spec §2.9 and wire-notes (issue item 10), checked field
 * by field on whole bodies: a quota-limited key (quota + two windows + expiry; active, expired and
 * exhausted), a balance key (wallet, personal rate: cost ≠ actual_cost) and plan keys (allowances,
 * unlimited plan, no subscription). Deterministic: ManualClock and mock usage directives.
 */
import t from 'tap';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, key, modelCall, usageOf } from './helpers.js';

const K = {
  q: key(0x700),
  wallet: key(0x701),
  plan: key(0x702),
  unlimitedPlan: key(0x703),
  noPlan: key(0x704),
  tiny: key(0x705),
  win: key(0x706),
  owing: key(0x707),
};
/** claude-model (3 / 15 / 0.3 / 3.75): 3000 + 12000 + 600 + 1500 = 17100 micro-USD. */
const U1 = { input: 1000, output: 800, cacheRead: 2000, cacheWrite: 400 };
/** 15000 micro-USD on claude-model. */
const U2 = { input: 1000, output: 800 };

// Saturday 2026-01-10 08:00 UTC.
const clock = new ManualClock(Date.UTC(2026, 0, 10, 8, 0, 0));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.groups['open-plan'] = { kind: 'messages', billing: 'plan', models: ['claude-model'] };
  cfg.users.wallet = { balance: 5, rates: { chat: 0.5 } };
  cfg.users.planner = {
    balance: 0,
    subscriptions: [
      { group: 'plan', expires_at: '2026-03-01T00:00:00Z' },
      { group: 'open-plan', expires_at: '2026-06-30T12:00:00Z' },
    ],
  };
  cfg.users.nosub = { balance: 1 };
  cfg.users.owing = { balance: 0.001 };
  cfg.keys.push(
    {
      key: K.q,
      name: 'snap-quota',
      user: 'alice',
      group: 'messages',
      quota: 1,
      windows: { '5h': 0.5, '7d': 2 },
      expires_at: '2026-02-01T00:00:00Z',
    },
    { key: K.tiny, name: 'snap-tiny', user: 'alice', group: 'messages', quota: 0.01 },
    { key: K.wallet, name: 'snap-wallet', user: 'wallet', group: 'chat' },
    { key: K.plan, name: 'snap-plan', user: 'planner', group: 'plan' },
    { key: K.unlimitedPlan, name: 'snap-open-plan', user: 'planner', group: 'open-plan' },
    { key: K.noPlan, name: 'snap-no-plan', user: 'nosub', group: 'plan' },
    { key: K.win, name: 'snap-window-only', user: 'alice', group: 'messages', windows: { '1d': 1 } },
    { key: K.owing, name: 'snap-owing', user: 'owing', group: 'chat' },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const zero = {
  requests: 0,
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_tokens: 0,
  cache_read_tokens: 0,
  total_tokens: 0,
  cost: 0,
  actual_cost: 0,
};
const emptyUsage = { today: zero, total: zero, average_duration_ms: 0, rpm: 0, tpm: 0 };
/** A usage counter object as a `daily_usage` row names it (cache writes as `cache_write_tokens`). */
const day = ({ cache_creation_tokens, ...c }: typeof zero) => ({
  requests: c.requests,
  input_tokens: c.input_tokens,
  output_tokens: c.output_tokens,
  cache_read_tokens: c.cache_read_tokens,
  cache_write_tokens: cache_creation_tokens,
  total_tokens: c.total_tokens,
  cost: c.cost,
  actual_cost: c.actual_cost,
});

t.test('quota-limited key: before first use', async (t) => {
  t.same(await usageOf(g, K.q), {
    mode: 'quota_limited',
    isValid: true,
    status: 'active',
    remaining: 1,
    unit: 'USD',
    quota: { limit: 1, used: 0, remaining: 1, unit: 'USD' },
    rate_limits: [
      { window: '5h', limit: 0.5, used: 0, remaining: 0.5, window_start: null, reset_at: null },
      { window: '7d', limit: 2, used: 0, remaining: 2, window_start: null, reset_at: null },
    ],
    expires_at: '2026-02-01T00:00:00.000Z',
    days_until_expiry: 22,
    usage: emptyUsage,
    daily_usage: [],
    model_stats: [],
  });
});

t.test('quota-limited key: after use on two days', async (t) => {
  t.equal((await modelCall(g, K.q, 'messages', 'claude-model', U1)).status, 200);
  t.equal((await modelCall(g, K.q, 'messages', 'free-model', { input: 100, output: 50 })).status, 200);
  clock.set(Date.UTC(2026, 0, 11, 8, 0, 0)); // the 5h window has expired, the 7d one runs on
  t.equal((await modelCall(g, K.q, 'messages', 'claude-model', U2)).status, 200);
  const body = await usageOf(g, K.q);
  t.same(body, {
    mode: 'quota_limited',
    isValid: true,
    status: 'active',
    remaining: 0.9679,
    unit: 'USD',
    quota: { limit: 1, used: 0.0321, remaining: 0.9679, unit: 'USD' },
    rate_limits: [
      {
        window: '5h',
        limit: 0.5,
        used: 0.015,
        remaining: 0.485,
        window_start: '2026-01-11T08:00:00.000Z',
        reset_at: '2026-01-11T13:00:00.000Z',
      },
      {
        window: '7d',
        limit: 2,
        used: 0.0321,
        remaining: 1.9679,
        window_start: '2026-01-10T08:00:00.000Z',
        reset_at: '2026-01-17T08:00:00.000Z',
      },
    ],
    expires_at: '2026-02-01T00:00:00.000Z',
    days_until_expiry: 21,
    usage: {
      today: {
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_creation_tokens: 0,
        cache_read_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
      total: {
        requests: 3,
        input_tokens: 2100,
        output_tokens: 1650,
        cache_creation_tokens: 400,
        cache_read_tokens: 2000,
        total_tokens: 6150,
        cost: 0.0321,
        actual_cost: 0.0321,
      },
      average_duration_ms: 0,
      rpm: 1,
      tpm: 1800,
    },
    daily_usage: [
      {
        date: '2026-01-10',
        requests: 2,
        input_tokens: 1100,
        output_tokens: 850,
        cache_read_tokens: 2000,
        cache_write_tokens: 400,
        total_tokens: 4350,
        cost: 0.0171,
        actual_cost: 0.0171,
      },
      {
        date: '2026-01-11',
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
    ],
    model_stats: [
      {
        model: 'claude-model',
        requests: 2,
        input_tokens: 2000,
        output_tokens: 1600,
        cache_creation_tokens: 400,
        cache_read_tokens: 2000,
        total_tokens: 6000,
        cost: 0.0321,
        actual_cost: 0.0321,
      },
      {
        model: 'free-model',
        requests: 1,
        input_tokens: 100,
        output_tokens: 50,
        cache_creation_tokens: 0,
        cache_read_tokens: 0,
        total_tokens: 150,
        cost: 0,
        actual_cost: 0,
      },
    ],
  });
  t.equal(body.quota.remaining, body.remaining, 'quota.remaining == remaining');

  // rpm / tpm cover the last 60 seconds only.
  clock.advance(61_000);
  const later = await usageOf(g, K.q);
  t.equal(later.usage.rpm, 0);
  t.equal(later.usage.tpm, 0);
});

t.test('model_stats follows start_date / end_date; defaults 30 days back to today; bad dates are 400', async (t) => {
  const stats = async (q: string) => (await usageOf(g, K.q, q)).model_stats.map((m: any) => [m.model, m.requests]);
  t.same(await stats('?start_date=2026-01-11'), [['claude-model', 1]], 'from today');
  t.same(
    await stats('?start_date=2026-01-10&end_date=2026-01-10'),
    [
      ['claude-model', 1],
      ['free-model', 1],
    ],
    'yesterday only',
  );
  t.same(await stats('?end_date=2026-01-09'), [], 'before any use');
  t.same(await stats('?start_date=2025-12-01&end_date=2026-12-31'), [
    ['claude-model', 2],
    ['free-model', 1],
  ]);
  clock.set(Date.UTC(2026, 1, 9, 12, 0, 0)); // 30 days after the 10th: still inside the default range
  t.same(
    await stats(''),
    [
      ['claude-model', 2],
      ['free-model', 1],
    ],
    'today − 30 days is included',
  );
  clock.set(Date.UTC(2026, 1, 10, 12, 0, 0)); // the 10th falls out
  t.same(await stats(''), [['claude-model', 1]], 'older days fall out of the default range');
  const body = await usageOf(g, K.q);
  t.equal(body.usage.total.requests, 3, 'usage.total is not bounded by the range');
  t.equal(body.usage.today.requests, 0, "today is the clock's UTC day");
  for (const q of [
    '?start_date=2026-13-01',
    '?start_date=yesterday',
    '?end_date=2026-02-30',
    '?start_date=2026-1-5',
    '?start_date=2026-01-12&end_date=2026-01-11',
    '?end_date=',
    '?end_date=2026-13-01',
  ]) {
    const r = await call(g.url + '/v1/usage' + q, { headers: bearer(K.q) });
    assertError(t, r, { status: 400, type: 'invalid_request_error' }, q);
  }
  const msgStyle = await call(g.url + '/v1/usage?start_date=nope', { headers: { 'x-api-key': K.q } });
  t.equal(msgStyle.status, 400);
  t.equal(msgStyle.json.type, 'error', 'Messages-style body for a Messages client');
});

t.test('quota-limited key: expired, and exhausted — /v1/usage still answers', async (t) => {
  // The clock is at 2026-02-10 12:00, past the key's expiry.
  assertError(t, await modelCall(g, K.q, 'messages', 'claude-model', U2), { status: 403, code: 'API_KEY_EXPIRED' });
  const body = await usageOf(g, K.q);
  t.match(body, {
    mode: 'quota_limited',
    isValid: true,
    status: 'expired',
    expires_at: '2026-02-01T00:00:00.000Z',
    days_until_expiry: 0,
    remaining: 0.9679,
  });

  t.equal((await modelCall(g, K.tiny, 'messages', 'claude-model', U2)).status, 200);
  assertError(t, await modelCall(g, K.tiny, 'messages', 'claude-model', U2), { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED' });
  const tiny = await usageOf(g, K.tiny);
  t.same(tiny, {
    mode: 'quota_limited',
    isValid: true,
    status: 'quota_exhausted',
    remaining: 0,
    unit: 'USD',
    quota: { limit: 0.01, used: 0.015, remaining: 0, unit: 'USD' },
    rate_limits: [],
    usage: {
      today: {
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_creation_tokens: 0,
        cache_read_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
      total: {
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_creation_tokens: 0,
        cache_read_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
      average_duration_ms: 0,
      rpm: 1,
      tpm: 1800,
    },
    daily_usage: [
      {
        date: '2026-02-10',
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
    ],
    model_stats: [
      {
        model: 'claude-model',
        requests: 1,
        input_tokens: 1000,
        output_tokens: 800,
        cache_creation_tokens: 0,
        cache_read_tokens: 0,
        total_tokens: 1800,
        cost: 0.015,
        actual_cost: 0.015,
      },
    ],
  });
});

t.test('plan keys: allowances, an unlimited plan, no subscription', async (t) => {
  clock.set(Date.UTC(2026, 1, 20, 10, 0, 0)); // Friday
  t.equal((await modelCall(g, K.plan, 'messages', 'claude-model', U1)).status, 200);
  const body = await usageOf(g, K.plan);
  const c = {
    requests: 1,
    input_tokens: 1000,
    output_tokens: 800,
    cache_creation_tokens: 400,
    cache_read_tokens: 2000,
    total_tokens: 4200,
    cost: 0.0171,
    actual_cost: 0.0171,
  };
  t.same(body, {
    mode: 'unrestricted',
    isValid: true,
    planName: 'plan',
    remaining: 9.9829,
    unit: 'USD',
    subscription: {
      daily_usage_usd: 0.0171,
      weekly_usage_usd: 0.0171,
      monthly_usage_usd: 0.0171,
      daily_limit_usd: 10,
      weekly_limit_usd: 50,
      monthly_limit_usd: 150,
      weekly_window_start: '2026-02-16T00:00:00.000Z',
      expires_at: '2026-03-01T00:00:00.000Z',
    },
    usage: { today: c, total: c, average_duration_ms: 0, rpm: 1, tpm: 4200 },
    daily_usage: [{ date: '2026-02-20', ...day(c) }],
    model_stats: [{ model: 'claude-model', ...c }],
  });
  t.notOk('balance' in body, 'exactly one of balance and subscription');

  clock.set(Date.UTC(2026, 1, 21, 10, 0, 0)); // Saturday: a new day, the same week and month
  const next = await usageOf(g, K.plan);
  t.same(next.subscription, {
    daily_usage_usd: 0,
    weekly_usage_usd: 0.0171,
    monthly_usage_usd: 0.0171,
    daily_limit_usd: 10,
    weekly_limit_usd: 50,
    monthly_limit_usd: 150,
    weekly_window_start: '2026-02-16T00:00:00.000Z',
    expires_at: '2026-03-01T00:00:00.000Z',
  });
  t.equal(next.remaining, 10, 'the smallest allowance left: the daily one');
  t.equal(next.usage.today.requests, 0);

  t.same(
    await usageOf(g, K.unlimitedPlan),
    {
      mode: 'unrestricted',
      isValid: true,
      planName: 'open-plan',
      remaining: -1,
      unit: 'USD',
      subscription: {
        daily_usage_usd: 0,
        weekly_usage_usd: 0,
        monthly_usage_usd: 0,
        daily_limit_usd: 0,
        weekly_limit_usd: 0,
        monthly_limit_usd: 0,
        weekly_window_start: '2026-02-16T00:00:00.000Z',
        expires_at: '2026-06-30T12:00:00.000Z',
      },
      usage: emptyUsage,
      daily_usage: [],
      model_stats: [],
    },
    'a plan without allowances: -1 = unlimited',
  );

  const none = await usageOf(g, K.noPlan);
  t.match(none, { mode: 'unrestricted', isValid: true, planName: 'plan', remaining: 0, unit: 'USD' });
  t.ok('expires_at' in none.subscription, 'subscription.expires_at is present');
  t.equal(none.subscription.expires_at, null);
});

t.test('balance key: the wallet', async (t) => {
  clock.set(Date.UTC(2026, 2, 2, 10, 0, 0));
  t.same(await usageOf(g, K.wallet), {
    mode: 'unrestricted',
    isValid: true,
    planName: '钱包余额',
    remaining: 5,
    unit: 'USD',
    balance: 5,
    usage: emptyUsage,
    daily_usage: [],
    model_stats: [],
  });
  // chat-model 1 / 2 per Mtok: 1000 + 1000 = 2000 micro-USD at list price, × 0.5 personal rate.
  t.equal((await modelCall(g, K.wallet, 'chat', 'chat-model', { input: 1000, output: 500 })).status, 200);
  const body = await usageOf(g, K.wallet);
  const c = {
    requests: 1,
    input_tokens: 1000,
    output_tokens: 500,
    cache_creation_tokens: 0,
    cache_read_tokens: 0,
    total_tokens: 1500,
    cost: 0.002,
    actual_cost: 0.001,
  };
  t.same(body, {
    mode: 'unrestricted',
    isValid: true,
    planName: '钱包余额',
    remaining: 4.999,
    unit: 'USD',
    balance: 4.999,
    usage: { today: c, total: c, average_duration_ms: 0, rpm: 1, tpm: 1500 },
    daily_usage: [{ date: '2026-03-02', ...day(c) }],
    model_stats: [{ model: 'chat-model', ...c }],
  });
  t.notOk('subscription' in body, 'exactly one of balance and subscription');
});

t.test('open cases of the contract (docs/limits.md): window-only key, a wallet overrun by the last request', async (t) => {
  const w = await usageOf(g, K.win);
  t.match(w, {
    mode: 'quota_limited',
    status: 'active',
    rate_limits: [{ window: '1d', limit: 1, used: 0, remaining: 1, window_start: null, reset_at: null }],
  });
  t.notOk('quota' in w, 'no quota object without a quota');
  t.notOk('remaining' in w, 'no top-level remaining: the key has no amount of its own (strict parsers refuse one)');
  t.notOk('unit' in w, 'nor a unit');

  // 1000 micro-USD of credit; one request costing 15000 is admitted (available > 0) and overruns it.
  t.equal((await modelCall(g, K.owing, 'chat', 'chat-model', { input: 5000, output: 5000 })).status, 200);
  const o = await usageOf(g, K.owing);
  t.equal(o.balance, -0.014, 'the negative balance is what is owed');
  t.equal(o.remaining, -0.014, 'remaining equals balance, unclamped (strict parsers refuse remaining != balance)');
  const r = await modelCall(g, K.owing, 'chat', 'chat-model');
  assertError(t, r, { status: 403, type: 'billing_error' }, 'the next priced request');
});

t.test('average_duration_ms is the mean time from arrival to settlement', async (t) => {
  const k = K.owing; // one earlier request, settled with no clock movement (0 ms)
  const before = (await usageOf(g, k)).usage;
  t.equal(before.total.requests, 1);
  t.equal(before.average_duration_ms, 0);
  // The upstream answers after 300 ms of real time; meanwhile the gateway's clock moves 1234 ms.
  const pending = modelCall(g, k, 'chat', 'free-model', { extra: 'delay=300' });
  await new Promise((r) => setTimeout(r, 100));
  clock.advance(1234);
  t.equal((await pending).status, 200);
  t.equal((await usageOf(g, k)).usage.average_duration_ms, 617, '(0 + 1234) / 2');
});
