/**
 * Balance groups and account spend caps (issue items 2 and 5): a priced model at balance ≤ 0 is
 * 403 billing_error; $0 models stay callable under `limits.free_rpm_at_zero_balance` (429
 * rate_limit_exceeded with Retry-After); /v1/models and count_tokens answer the flat 403
 * INSUFFICIENT_BALANCE; a top-up (config reload) restores access. Spend caps count balance spend
 * only: weekly from Monday 00:00 UTC, monthly from the 1st, 402 spend_cap_reached with Retry-After
 * = seconds until the reset, exact with a ManualClock; $0 models stay available at the cap.
 */
import t from 'tap';
import { writeFileSync } from 'node:fs';
import YAML from 'yaml';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, charge, key, modelCall, usageOf } from './helpers.js';

const CLAUDE = { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 };
/** 1000×3 + 800×15 = 15000 micro-USD = $0.015 on claude-model at ×1. */
const COST = { input: 1000, output: 800 };

const K = {
  brokeChat: key(0x100),
  brokeMsg: key(0x101),
  smallMsg: key(0x110),
  zeroMsg: key(0x120),
  capMsg: key(0x130),
  capChat: key(0x131),
  monthMsg: key(0x140),
  bothMsg: key(0x150),
};

// Wednesday 2026-01-07 12:00:00 UTC (2026-01-05 is a Monday).
const clock = new ManualClock(Date.UTC(2026, 0, 7, 12, 0, 0));
let cfg: Record<string, any>;
let g: TestGateway;

t.before(async () => {
  cfg = baseConfig();
  cfg.limits.free_rpm_at_zero_balance = 3;
  cfg.users.broke = { balance: 0 };
  cfg.users.small = { balance: 0.02 };
  cfg.users.zero = { balance: 0 };
  cfg.users.capped = { balance: 100, spend_caps: { weekly: 0.02 } };
  cfg.users.monthly = { balance: 100, spend_caps: { monthly: 0.04 } };
  cfg.users.both = { balance: 100, spend_caps: { weekly: 0.02, monthly: 0.02 } };
  cfg.keys.push(
    { key: K.brokeChat, name: 'broke-chat', user: 'broke', group: 'chat' },
    { key: K.brokeMsg, name: 'broke-msg', user: 'broke', group: 'messages' },
    { key: K.smallMsg, name: 'small-msg', user: 'small', group: 'messages' },
    { key: K.zeroMsg, name: 'zero-msg', user: 'zero', group: 'messages' },
    { key: K.capMsg, name: 'cap-msg', user: 'capped', group: 'messages' },
    { key: K.capChat, name: 'cap-chat', user: 'capped', group: 'chat' },
    { key: K.monthMsg, name: 'month-msg', user: 'monthly', group: 'messages' },
    { key: K.bothMsg, name: 'both-msg', user: 'both', group: 'messages' },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const reload = async () => {
  writeFileSync(g.file, YAML.stringify(cfg));
  const err = await g.gw.reload();
  if (err) throw err;
};

t.test('a priced model at balance 0 → 403 billing_error in the protocol format, x-should-retry: false, no Retry-After', async (t) => {
  const chat = await modelCall(g, K.brokeChat, 'chat', 'chat-model');
  assertError(t, chat, { status: 403, type: 'billing_error', retryAfter: null, shouldRetryFalse: true }, 'chat');
  t.ok(chat.json.error.code, 'chat body has error.code');
  const msg = await modelCall(g, K.brokeMsg, 'messages', 'claude-model');
  assertError(t, msg, { status: 403, type: 'billing_error', retryAfter: null }, 'messages');
  t.equal(msg.json.type, 'error', 'Messages-style body');
  const neg = await modelCall(g, K.zeroMsg, 'messages', 'claude-model');
  assertError(t, neg, { status: 403, type: 'billing_error' }, 'another user at zero');
  // A fallback list with a priced model is not free.
  const mixed = await modelCall(g, K.brokeChat, 'chat', 'free-model', {}, { models: ['chat-model'] });
  assertError(t, mixed, { status: 403, type: 'billing_error' }, 'free model with a priced fallback');
});

t.test('/v1/models and count_tokens at balance ≤ 0 → flat 403 INSUFFICIENT_BALANCE', async (t) => {
  for (const k of [K.brokeChat, K.brokeMsg, K.zeroMsg]) {
    const r = await call(g.url + '/v1/models', { headers: bearer(k) });
    assertError(t, r, { status: 403, code: 'INSUFFICIENT_BALANCE', retryAfter: null }, '/v1/models');
  }
  const ct = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(K.brokeMsg),
    json: { model: 'claude-model', messages: [{ role: 'user', content: 'hi' }] },
  });
  assertError(t, ct, { status: 403, code: 'INSUFFICIENT_BALANCE', retryAfter: null }, 'count_tokens');
  const free = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(K.brokeMsg),
    json: { model: 'free-model', messages: [{ role: 'user', content: 'hi' }] },
  });
  assertError(t, free, { status: 403, code: 'INSUFFICIENT_BALANCE' }, 'count_tokens of a free model');
  t.equal((await call(g.url + '/v1/usage', { headers: bearer(K.brokeMsg) })).status, 200, '/v1/usage still answers');
});

t.test('$0 models at balance 0: callable, limited by free_rpm_at_zero_balance per user, Retry-After = rest of the minute', async (t) => {
  clock.set(Date.UTC(2026, 0, 7, 12, 1, 15));
  for (let i = 0; i < 3; i++) {
    const r = await modelCall(g, i % 2 ? K.brokeMsg : K.brokeChat, i % 2 ? 'messages' : 'chat', 'free-model');
    t.equal(r.status, 200, `free call ${i + 1}`);
  }
  const over = await modelCall(g, K.brokeChat, 'chat', 'free-model');
  assertError(t, over, { status: 429, type: 'rate_limit_exceeded', retryAfter: '45' }, 'chat');
  const overMsg = await modelCall(g, K.brokeMsg, 'messages', 'free-model');
  assertError(t, overMsg, { status: 429, type: 'rate_limit_exceeded', retryAfter: '45' }, 'messages (same user)');
  t.not(over.headers.get('x-should-retry'), 'false', 'retryable');
  clock.advance(44_500);
  assertError(
    t,
    await modelCall(g, K.brokeChat, 'chat', 'free-model'),
    { status: 429, type: 'rate_limit_exceeded', retryAfter: '1' },
    'half a second left',
  );
  clock.advance(500);
  t.equal((await modelCall(g, K.brokeChat, 'chat', 'free-model')).status, 200, 'next minute: allowed again');
  const u = await usageOf(g, K.brokeChat);
  t.equal(u.balance, 0, 'free calls cost nothing');
});

t.test('a balance that runs out: the request that crosses zero completes, the next priced one is refused', async (t) => {
  clock.set(Date.UTC(2026, 0, 7, 13, 0, 0));
  t.equal((await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST)).status, 200, '0.02 → 0.005');
  t.equal((await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST)).status, 200, '0.005 > 0: admitted, overruns to -0.01');
  const u = await usageOf(g, K.smallMsg);
  t.equal(u.balance, -0.01);
  t.equal(u.remaining, -0.01, 'remaining is the balance, negative too (what strict parsers of /v1/usage require)');
  assertError(t, await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST), { status: 403, type: 'billing_error' }, 'priced');
  assertError(
    t,
    await call(g.url + '/v1/models', { headers: bearer(K.smallMsg) }),
    { status: 403, code: 'INSUFFICIENT_BALANCE' },
    'models',
  );
  t.equal((await modelCall(g, K.smallMsg, 'messages', 'free-model')).status, 200, '$0 model still callable');

  cfg.users.small.balance = 0.025; // top-up by config edit: 0.025 − 0.03 = −0.005, still ≤ 0
  await reload();
  assertError(
    t,
    await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST),
    { status: 403, type: 'billing_error' },
    'still negative',
  );
  cfg.users.small.balance = 0.03; // exactly 0 left
  await reload();
  assertError(t, await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST), { status: 403, type: 'billing_error' }, 'exactly zero');
  assertError(
    t,
    await call(g.url + '/v1/models', { headers: bearer(K.smallMsg) }),
    { status: 403, code: 'INSUFFICIENT_BALANCE' },
    'models at exactly zero',
  );
  cfg.users.small.balance = 1;
  await reload();
  t.equal((await modelCall(g, K.smallMsg, 'messages', 'claude-model', COST)).status, 200, 'topped up');
  t.equal((await call(g.url + '/v1/models', { headers: bearer(K.smallMsg) })).status, 200);
  t.equal((await usageOf(g, K.smallMsg)).balance, 0.955, '1 − 0.03 − 0.015');
});

t.test('weekly spend cap: 402 spend_cap_reached, Retry-After = seconds until Monday 00:00 UTC', async (t) => {
  t.equal(charge(COST, CLAUDE).actual, 15_000);
  clock.set(Date.UTC(2026, 0, 7, 14, 0, 0)); // Wednesday
  t.equal((await modelCall(g, K.capMsg, 'messages', 'claude-model', COST)).status, 200, '0.015 of 0.02');
  t.equal((await modelCall(g, K.capMsg, 'messages', 'claude-model', COST)).status, 200, '0.015 < 0.02: admitted, reaches 0.03');
  const msg = await modelCall(g, K.capMsg, 'messages', 'claude-model', COST);
  const untilMonday = (Date.UTC(2026, 0, 12) - clock.now()) / 1000;
  t.equal(untilMonday, 4 * 86_400 + 10 * 3600);
  assertError(t, msg, { status: 402, type: 'spend_cap_reached', retryAfter: String(untilMonday), shouldRetryFalse: true }, 'messages');
  t.equal(msg.json.type, 'error');
  const chat = await modelCall(g, K.capChat, 'chat', 'chat-model');
  assertError(t, chat, { status: 402, type: 'spend_cap_reached', retryAfter: String(untilMonday) }, 'chat, same account');
  t.equal(chat.json.error.code, 'spend_cap_reached');
  t.equal((await modelCall(g, K.capMsg, 'messages', 'free-model')).status, 200, '$0 models stay available at the cap');
  t.equal((await call(g.url + '/v1/models', { headers: bearer(K.capMsg) })).status, 200, '/v1/models is not capped');

  clock.set(Date.UTC(2026, 0, 11, 23, 59, 59));
  assertError(
    t,
    await modelCall(g, K.capMsg, 'messages', 'claude-model', COST),
    { status: 402, type: 'spend_cap_reached', retryAfter: '1' },
    'Sunday 23:59:59',
  );
  clock.set(Date.UTC(2026, 0, 12, 0, 0, 0));
  t.equal((await modelCall(g, K.capMsg, 'messages', 'claude-model', COST)).status, 200, 'Monday 00:00: a new week');
});

t.test('monthly spend cap: Retry-After = seconds until the 1st 00:00 UTC', async (t) => {
  clock.set(Date.UTC(2026, 0, 20, 6, 30, 0));
  for (let i = 0; i < 3; i++) t.equal((await modelCall(g, K.monthMsg, 'messages', 'claude-model', COST)).status, 200, `call ${i + 1}`);
  const r = await modelCall(g, K.monthMsg, 'messages', 'claude-model', COST);
  assertError(t, r, { status: 402, type: 'spend_cap_reached', retryAfter: String((Date.UTC(2026, 1, 1) - clock.now()) / 1000) });
  clock.set(Date.UTC(2026, 0, 26)); // a new week does not help
  assertError(t, await modelCall(g, K.monthMsg, 'messages', 'claude-model', COST), {
    status: 402,
    type: 'spend_cap_reached',
    retryAfter: String(6 * 86_400),
  });
  clock.set(Date.UTC(2026, 1, 1));
  t.equal((await modelCall(g, K.monthMsg, 'messages', 'claude-model', COST)).status, 200, 'February');
});

t.test('both caps reached: Retry-After names the later reset', async (t) => {
  // Friday 2026-01-30: the month resets Sunday Feb 1, the week Monday Feb 2.
  clock.set(Date.UTC(2026, 0, 30, 12, 0, 0));
  t.equal((await modelCall(g, K.bothMsg, 'messages', 'claude-model', COST)).status, 200);
  t.equal((await modelCall(g, K.bothMsg, 'messages', 'claude-model', COST)).status, 200);
  assertError(
    t,
    await modelCall(g, K.bothMsg, 'messages', 'claude-model', COST),
    {
      status: 402,
      type: 'spend_cap_reached',
      retryAfter: String((Date.UTC(2026, 1, 2) - clock.now()) / 1000),
    },
    'until Monday, when both have reset',
  );
  clock.set(Date.UTC(2026, 1, 1));
  assertError(
    t,
    await modelCall(g, K.bothMsg, 'messages', 'claude-model', COST),
    {
      status: 402,
      type: 'spend_cap_reached',
      retryAfter: String(86_400),
    },
    'new month, same week',
  );
  clock.set(Date.UTC(2026, 1, 2));
  t.equal((await modelCall(g, K.bothMsg, 'messages', 'claude-model', COST)).status, 200);
});

t.test('spend caps count balance spend only: plan spend does not count', async (t) => {
  cfg.users.capped.subscriptions = [{ group: 'plan', expires_at: '2099-01-01T00:00:00Z' }];
  cfg.keys.push({ key: key(0x132), name: 'cap-plan', user: 'capped', group: 'plan' });
  await reload();
  clock.set(Date.UTC(2026, 1, 16, 12, 0, 0)); // Monday
  for (let i = 0; i < 3; i++) t.equal((await modelCall(g, key(0x132), 'messages', 'claude-model', COST)).status, 200, `plan call ${i + 1}`);
  t.equal((await modelCall(g, K.capMsg, 'messages', 'claude-model', COST)).status, 200, 'balance spend this week is still 0');
  const u = await usageOf(g, K.capMsg);
  t.equal(u.balance, 99.94, 'plan calls did not touch the wallet');
});
