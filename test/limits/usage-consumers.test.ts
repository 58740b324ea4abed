/**
 * `/v1/usage` as the strict parsers written by others read it (test/limits/usage-shapes.ts): every
 * key kind — a wallet, an overdrawn wallet, a plan, a plan without allowances, a key with a quota
 * and a window, a key with windows only — after use on two days, checked against the rules those
 * parsers apply; and the rules themselves checked against bodies shaped as in the consumers' own
 * tests, accepted and refused.
 */
import t from 'tap';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { key, modelCall, usageOf } from './helpers.js';
import { ACCEPTED, REFUSED, problems } from './usage-shapes.js';

const K = {
  wallet: key(0x900),
  owing: key(0x901),
  plan: key(0x902),
  openPlan: key(0x903),
  quota: key(0x904),
  windows: key(0x905),
};

// Wednesday 2026-03-04 09:00 UTC; the plan week began on Monday the 2nd.
const clock = new ManualClock(Date.UTC(2026, 2, 4, 9, 0, 0));
let g: TestGateway;

t.before(async () => {
  const cfg = baseConfig();
  cfg.groups['open-plan'] = { kind: 'messages', billing: 'plan', models: ['claude-model'] };
  cfg.users.walleter = { balance: 5 };
  cfg.users.owing = { balance: 0.001 };
  cfg.users.planner = {
    balance: 0,
    subscriptions: [
      { group: 'plan', expires_at: '2026-06-01T00:00:00Z' },
      { group: 'open-plan', expires_at: '2026-06-01T00:00:00Z' },
    ],
  };
  cfg.keys.push(
    { key: K.wallet, name: 'c-wallet', user: 'walleter', group: 'chat' },
    { key: K.owing, name: 'c-owing', user: 'owing', group: 'chat' },
    { key: K.plan, name: 'c-plan', user: 'planner', group: 'plan' },
    { key: K.openPlan, name: 'c-open-plan', user: 'planner', group: 'open-plan' },
    { key: K.quota, name: 'c-quota', user: 'alice', group: 'messages', quota: 1, windows: { '5h': 0.5 } },
    { key: K.windows, name: 'c-windows', user: 'alice', group: 'messages', windows: { '1d': 0.02, '7d': 1 } },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

t.test('the rules accept the bodies the consumers parse and refuse the ones they reject', async (t) => {
  for (const [name, body] of Object.entries(ACCEPTED)) t.same(problems(body), [], name);
  for (const [name, body] of Object.entries(REFUSED)) t.not(problems(body).length, 0, `${name}: ${problems(body).join('; ')}`);
});

t.test('every key kind, after use on two days, passes the strict parsers', async (t) => {
  const use = async (k: string, proto: 'chat' | 'messages', model: string, u: Record<string, number>) =>
    t.equal((await modelCall(g, k, proto, model, u)).status, 200, `a call with ${model}`);
  // Tuesday the 3rd, then today.
  clock.set(Date.UTC(2026, 2, 3, 12, 0, 0));
  await use(K.wallet, 'chat', 'chat-model', { input: 1000, output: 500 });
  await use(K.plan, 'messages', 'claude-model', { input: 1000, output: 800 });
  await use(K.quota, 'messages', 'claude-model', { input: 1000, output: 800 });
  await use(K.windows, 'messages', 'claude-model', { input: 1000, output: 800 });
  clock.set(Date.UTC(2026, 2, 4, 9, 0, 0));
  await use(K.wallet, 'chat', 'chat-model', { input: 2000, output: 1000 });
  await use(K.wallet, 'chat', 'free-model', { input: 10, output: 10 });
  await use(K.plan, 'messages', 'claude-model', { input: 2000, output: 100, cacheRead: 1000, cacheWrite: 400 });
  await use(K.openPlan, 'messages', 'claude-model', { input: 10, output: 10 });
  await use(K.quota, 'messages', 'claude-model', { input: 10, output: 10 });
  await use(K.windows, 'messages', 'claude-model', { input: 1000, output: 800 }); // past the 1d window: exhausted
  await use(K.owing, 'chat', 'chat-model', { input: 5000, output: 5000 }); // 15000 micro-USD against 1000

  for (const [name, k] of Object.entries(K)) {
    const body = await usageOf(g, k);
    t.same(problems(body), [], `${name}: ${JSON.stringify(body)}`);
  }

  const owing = await usageOf(g, K.owing);
  t.equal(owing.balance, -0.014, 'the overdrawn balance');
  t.equal(owing.remaining, -0.014, "a wallet's remaining is its balance, negative too");

  const windows = await usageOf(g, K.windows);
  t.equal(windows.status, 'active', 'a window refuses the next call; the key itself is not exhausted');
  t.notOk('remaining' in windows, 'windows only: no top-level remaining');
  t.notOk('unit' in windows, 'windows only: no top-level unit');
  t.notOk('quota' in windows);
  t.same(
    windows.rate_limits.map((w: any) => [w.window, w.used, w.remaining]),
    [
      ['1d', 0.03, 0],
      ['7d', 0.03, 0.97],
    ],
  );

  const plan = await usageOf(g, K.plan);
  t.equal(plan.subscription.weekly_window_start, '2026-03-02T00:00:00.000Z', 'the plan week began on Monday 00:00 UTC');

  const wallet = await usageOf(g, K.wallet);
  t.same(
    wallet.daily_usage,
    [
      {
        date: '2026-03-03',
        requests: 1,
        input_tokens: 1000,
        output_tokens: 500,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        total_tokens: 1500,
        cost: 0.002,
        actual_cost: 0.002,
      },
      {
        date: '2026-03-04',
        requests: 2,
        input_tokens: 2010,
        output_tokens: 1010,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        total_tokens: 3020,
        cost: 0.004,
        actual_cost: 0.004,
      },
    ],
    'one row per day with usage, oldest first, every model of the day',
  );
  t.same(
    (await usageOf(g, K.wallet, '?start_date=2026-03-04')).daily_usage.map((d: any) => d.date),
    ['2026-03-04'],
    'bounded by start_date / end_date, like model_stats',
  );
  t.same((await usageOf(g, K.plan)).daily_usage[1], {
    date: '2026-03-04',
    requests: 1,
    input_tokens: 2000,
    output_tokens: 100,
    cache_read_tokens: 1000,
    cache_write_tokens: 400,
    total_tokens: 3500,
    cost: 0.0093,
    actual_cost: 0.0093,
  });
});
