/**
 * Plan groups (issue item 3): a subscription with an expiry; daily / weekly / monthly USD
 * allowances on the UTC calendar (429 USAGE_LIMIT_EXCEEDED, flat, x-should-retry: false, no
 * Retry-After); no subscription or an expired one → 403 SUBSCRIPTION_NOT_FOUND, a suspended one →
 * 403 SUBSCRIPTION_INVALID, on model calls, /v1/models and count_tokens. Plan spend never touches
 * the wallet.
 */
import t from 'tap';
import { baseConfig, bearer, call, KEYS, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, key, modelCall, usageOf } from './helpers.js';

/** $0.015 on claude-model (3 / 15 per Mtok). */
const COST = { input: 1000, output: 800 };
const K = { tiny: key(0x200), nosub: key(0x201), expired: key(0x202), suspended: key(0x203), soon: key(0x204), wallet: key(0x205) };

// Monday 2026-0105 10:00 UTC.
const clock = new ManualClock(Date.UTC(2026, 0, 5, 10, 0, 0));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.groups['tiny-plan'] = {
    kind: 'messages',
    billing: 'plan',
    models: ['claude-model'],
    plan: { daily: 0.02, weekly: 0.05, monthly: 0.08 },
  };
  cfg.users.planner = {
    balance: 10,
    subscriptions: [
      { group: 'tiny-plan', expires_at: '2099-01-01T00:00:00Z' },
      { group: 'plan', expires_at: new Date(Date.UTC(2026, 0, 5, 11, 0, 0)).toISOString() },
    ],
  };
  cfg.users.nosub = { balance: 10 };
  cfg.users.lapsed = { balance: 10, subscriptions: [{ group: 'plan', expires_at: '2025-12-31T00:00:00Z' }] };
  cfg.users.frozen = { balance: 10, subscriptions: [{ group: 'plan', expires_at: '2099-01-01T00:00:00Z', status: 'suspended' }] };
  cfg.keys.push(
    { key: K.tiny, name: 'tiny', user: 'planner', group: 'tiny-plan' },
    { key: K.soon, name: 'soon', user: 'planner', group: 'plan' },
    { key: K.wallet, name: 'planner-wallet', user: 'planner', group: 'messages' },
    { key: K.nosub, name: 'nosub', user: 'nosub', group: 'plan' },
    { key: K.expired, name: 'expired', user: 'lapsed', group: 'plan' },
    { key: K.suspended, name: 'suspended', user: 'frozen', group: 'plan' },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const ct = (k: string) =>
  call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(k),
    json: { model: 'claude-model', messages: [{ role: 'user', content: 'hi' }] },
  });

t.test('no subscription, an expired one, a suspended one: flat 403 on every endpoint that needs the plan', async (t) => {
  for (const [k, code] of [
    [K.nosub, 'SUBSCRIPTION_NOT_FOUND'],
    [K.expired, 'SUBSCRIPTION_NOT_FOUND'],
    [K.suspended, 'SUBSCRIPTION_INVALID'],
  ] as const) {
    assertError(t, await modelCall(g, k, 'messages', 'claude-model'), { status: 403, code, retryAfter: null }, `${code} messages`);
    assertError(t, await modelCall(g, k, 'chat', 'claude-model'), { status: 403, code }, `${code} chat`);
    assertError(t, await call(g.url + '/v1/models', { headers: bearer(k) }), { status: 403, code }, `${code} models`);
    assertError(t, await ct(k), { status: 403, code }, `${code} count_tokens`);
    t.equal((await call(g.url + '/v1/usage', { headers: bearer(k) })).status, 200, '/v1/usage answers');
  }
  t.equal((await modelCall(g, KEYS.plan, 'messages', 'claude-model')).status, 200, 'an active subscription works');
});

t.test('a subscription expires at its expires_at', async (t) => {
  clock.set(Date.UTC(2026, 0, 5, 10, 59, 59));
  t.equal((await modelCall(g, K.soon, 'messages', 'claude-model')).status, 200);
  t.equal((await call(g.url + '/v1/models', { headers: bearer(K.soon) })).status, 200);
  clock.set(Date.UTC(2026, 0, 5, 11, 0, 0));
  assertError(t, await modelCall(g, K.soon, 'messages', 'claude-model'), { status: 403, code: 'SUBSCRIPTION_NOT_FOUND' });
  assertError(t, await call(g.url + '/v1/models', { headers: bearer(K.soon) }), { status: 403, code: 'SUBSCRIPTION_NOT_FOUND' });
  const u = await usageOf(g, K.soon);
  t.equal(u.remaining, 0, 'nothing left on an expired plan');
  t.equal(u.subscription.expires_at, '2026-01-05T11:00:00.000Z');
});

const limited = { status: 429, code: 'USAGE_LIMIT_EXCEEDED', retryAfter: null, shouldRetryFalse: true };

t.test('daily, weekly and monthly allowances on the UTC calendar', async (t) => {
  const wallet = (await usageOf(g, K.wallet)).balance;
  const call2 = async (label: string) => {
    t.equal((await modelCall(g, K.tiny, 'messages', 'claude-model', COST)).status, 200, `${label}: first`);
    t.equal((await modelCall(g, K.tiny, 'messages', 'claude-model', COST)).status, 200, `${label}: second (admitted below the limit)`);
  };
  clock.set(Date.UTC(2026, 0, 5, 12, 0, 0)); // Monday
  await call2('Monday');
  assertError(t, await modelCall(g, K.tiny, 'messages', 'claude-model', COST), limited, 'daily 0.03 ≥ 0.02');
  assertError(t, await modelCall(g, K.tiny, 'chat', 'claude-model', COST), limited, 'daily, Chat endpoint: still flat');
  let u = await usageOf(g, K.tiny);
  t.match(u.subscription, {
    daily_usage_usd: 0.03,
    weekly_usage_usd: 0.03,
    monthly_usage_usd: 0.03,
    daily_limit_usd: 0.02,
    weekly_limit_usd: 0.05,
    monthly_limit_usd: 0.08,
  });
  t.equal(u.remaining, 0);

  clock.set(Date.UTC(2026, 0, 5, 23, 59, 59));
  assertError(t, await modelCall(g, K.tiny, 'messages', 'claude-model', COST), limited, 'Monday 23:59:59');
  clock.set(Date.UTC(2026, 0, 6, 0, 0, 0)); // Tuesday
  await call2('Tuesday');
  clock.set(Date.UTC(2026, 0, 7, 9, 0, 0)); // Wednesday: a fresh day, but the week is at 0.06 ≥ 0.05
  assertError(t, await modelCall(g, K.tiny, 'messages', 'claude-model', COST), limited, 'weekly');
  u = await usageOf(g, K.tiny);
  t.match(u.subscription, { daily_usage_usd: 0, weekly_usage_usd: 0.06, monthly_usage_usd: 0.06 });

  clock.set(Date.UTC(2026, 0, 12, 0, 0, 0)); // next Monday
  await call2('next Monday');
  clock.set(Date.UTC(2026, 0, 13, 8, 0, 0)); // fresh day and week under its limit; the month is at 0.09 ≥ 0.08
  assertError(t, await modelCall(g, K.tiny, 'messages', 'claude-model', COST), limited, 'monthly');
  u = await usageOf(g, K.tiny);
  t.match(u.subscription, { daily_usage_usd: 0, weekly_usage_usd: 0.03, monthly_usage_usd: 0.09 });
  clock.set(Date.UTC(2026, 1, 1, 0, 0, 0));
  t.equal((await modelCall(g, K.tiny, 'messages', 'claude-model', COST)).status, 200, 'February');
  u = await usageOf(g, K.tiny);
  t.match(u.subscription, { daily_usage_usd: 0.015, monthly_usage_usd: 0.015 });
  t.equal(u.remaining, 0.005, 'the smallest allowance left (daily)');
  t.equal((await usageOf(g, K.wallet)).balance, wallet, 'plan spend never touches the wallet');
});
