/**
 * The check order of wire-notes for the limits (issue item 12): billing eligibility → key quota →
 * key windows → plan limits → account spend caps → RPM (group, then user) → concurrency queue.
 * Every limit is made to fail at once (spend under generous limits, then tighten them all by a
 * config reload); loosening them one by one must reveal the next in the order.
 */
import t from 'tap';
import { writeFileSync } from 'node:fs';
import YAML from 'yaml';
import { baseConfig, bearer, call, startGateway, type TestGateway } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, bodyFor, key, modelCall, until, type ErrorExpectation } from './helpers.js';

/** 15000 micro-USD on claude-model. */
const COST = { input: 1000, output: 800 };
const K = { multi: key(0x900), plan: key(0x901) };

const clock = new ManualClock(Date.UTC(2026, 0, 7, 10, 0, 10)); // Wednesday
let cfg: Record<string, any>;
let g: TestGateway;

t.before(async () => {
  cfg = baseConfig();
  // Generous limits first (RPM is counted only where it is configured).
  cfg.groups.ordered = { kind: 'messages', models: ['claude-model', 'free-model'], rpm: 100 };
  cfg.groups['ordered-plan'] = { kind: 'messages', billing: 'plan', models: ['claude-model'], plan: { daily: 10 }, rpm: 100 };
  cfg.users.multi = { balance: 10, rpm: 100, concurrency: 1, queue: { size: 0, max_wait: '30s' } };
  cfg.users.pmulti = { balance: 0, subscriptions: [{ group: 'ordered-plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.keys.push(
    { key: K.multi, name: 'multi', user: 'multi', group: 'ordered', quota: 10, windows: { '5h': 10 } },
    { key: K.plan, name: 'plan-multi', user: 'pmulti', group: 'ordered-plan', quota: 10, windows: { '1d': 10 } },
  );
  g = await startGateway(cfg, { clock });
});
t.teardown(() => g.close());

const reload = async () => {
  writeFileSync(g.file, YAML.stringify(cfg));
  const err = await g.gw.reload();
  if (err) throw err;
};
const user = (n: string) => cfg.users[n];
const keyCfg = (n: string) => cfg.keys.find((k: any) => k.name === n);

const E: Record<string, ErrorExpectation> = {
  expired: { status: 403, code: 'API_KEY_EXPIRED' },
  billing: { status: 403, type: 'billing_error', retryAfter: null },
  quota: { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED', retryAfter: null, shouldRetryFalse: true },
  window5h: { status: 429, type: 'rate_limit_exceeded', message: 'api key 5小时限额已用完', retryAfter: null, shouldRetryFalse: true },
  window1d: { status: 429, type: 'rate_limit_exceeded', message: 'api key 日限额已用完', retryAfter: null, shouldRetryFalse: true },
  plan: { status: 429, code: 'USAGE_LIMIT_EXCEEDED', retryAfter: null, shouldRetryFalse: true },
  cap: { status: 402, type: 'spend_cap_reached', retryAfter: String((Date.UTC(2026, 0, 12) - Date.UTC(2026, 0, 7, 10, 0, 10)) / 1000) },
  rpmGroup: { status: 429, type: 'rate_limit_exceeded', message: /group/, retryAfter: '50' },
  rpmUser: { status: 429, type: 'rate_limit_exceeded', message: /user/, retryAfter: '50' },
  queue: { status: 429, type: 'rate_limit_error', message: 'Too many pending requests, please retry later', retryAfter: null },
  subInvalid: { status: 403, code: 'SUBSCRIPTION_INVALID' },
};

t.test('balance group: every limit failing at once, loosened one by one', async (t) => {
  // Spend 0.03 under generous limits (2 requests this minute), then hold the only slot.
  t.equal((await modelCall(g, K.multi, 'messages', 'claude-model', COST)).status, 200);
  t.equal((await modelCall(g, K.multi, 'messages', 'claude-model', COST)).status, 200);
  const mock = g.gw.mocks.get('mock')!;
  const seen = mock.requests.length;
  const ac = new AbortController();
  const holder = fetch(g.url + '/v1/messages', {
    method: 'POST',
    signal: ac.signal,
    headers: { ...bearer(K.multi), 'content-type': 'application/json' },
    body: JSON.stringify(bodyFor('messages', 'claude-model', '[[mock: hang]]')),
  }).catch(() => 'aborted');
  t.teardown(() => ac.abort());
  t.ok(await until(() => mock.requests.length > seen), 'a request holds the only slot (3 requests this minute)');
  const ct = await call(g.url + '/v1/messages/count_tokens', {
    headers: bearer(K.multi),
    json: { model: 'claude-model', messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(ct.status, 200, 'count_tokens takes no slot');
  assertError(t, await modelCall(g, K.multi, 'messages', 'claude-model', COST), E.queue, 'the queue (size 0) is full');

  // Everything fails at once.
  cfg.groups.ordered.rpm = 3;
  Object.assign(user('multi'), { balance: 0.03, rpm: 3, spend_caps: { weekly: 0.02 } });
  Object.assign(keyCfg('multi'), { quota: 0.02, windows: { '5h': 0.02 }, expires_at: '2026-01-01T00:00:00Z' });
  await reload();
  const step = async (label: string, e: ErrorExpectation, loosen: () => void) => {
    assertError(t, await modelCall(g, K.multi, 'messages', 'claude-model', COST), e, label);
    loosen();
    await reload();
  };
  await step('key expiry before all the limits', E.expired, () => {
    delete keyCfg('multi').expires_at;
  });
  await step('1. billing eligibility', E.billing, () => {
    user('multi').balance = 10;
  });
  await step('2. key quota', E.quota, () => {
    keyCfg('multi').quota = 0;
  });
  await step('3. key window', E.window5h, () => {
    keyCfg('multi').windows = {};
  });
  await step('4. account spend cap', E.cap, () => {
    user('multi').spend_caps = {};
  });
  await step('5. group RPM', E.rpmGroup, () => {
    cfg.groups.ordered.rpm = 0;
  });
  await step('6. user RPM', E.rpmUser, () => {
    user('multi').rpm = 0;
  });
  await step('7. concurrency queue', E.queue, () => {
    user('multi').concurrency = 0;
  });
  t.equal((await modelCall(g, K.multi, 'messages', 'claude-model', COST)).status, 200, 'nothing left failing');
  ac.abort();
  t.equal(await holder, 'aborted');
});

t.test('plan group: subscription → key quota → key window → plan limits → RPM', async (t) => {
  clock.set(Date.UTC(2026, 0, 7, 11, 0, 10));
  t.equal((await modelCall(g, K.plan, 'messages', 'claude-model', COST)).status, 200);
  t.equal((await modelCall(g, K.plan, 'messages', 'claude-model', COST)).status, 200);
  cfg.groups['ordered-plan'].rpm = 2;
  cfg.groups['ordered-plan'].plan = { daily: 0.02 };
  user('pmulti').subscriptions[0].status = 'suspended';
  Object.assign(keyCfg('plan-multi'), { quota: 0.02, windows: { '1d': 0.02 } });
  await reload();
  const step = async (label: string, e: ErrorExpectation, loosen: () => void) => {
    assertError(t, await modelCall(g, K.plan, 'messages', 'claude-model', COST), e, label);
    loosen();
    await reload();
  };
  await step('1. plan eligibility', E.subInvalid, () => {
    user('pmulti').subscriptions[0].status = 'active';
  });
  await step('2. key quota', E.quota, () => {
    keyCfg('plan-multi').quota = 0;
  });
  await step('3. key window', E.window1d, () => {
    keyCfg('plan-multi').windows = {};
  });
  await step('4. plan limits', E.plan, () => {
    cfg.groups['ordered-plan'].plan = {};
  });
  await step('5. group RPM', E.rpmGroup, () => {
    cfg.groups['ordered-plan'].rpm = 0;
  });
  t.equal((await modelCall(g, K.plan, 'messages', 'claude-model', COST)).status, 200, 'nothing left failing');
});

t.test('a $0 model at zero balance: the free-model RPM is part of billing eligibility, before the key quota', async (t) => {
  clock.set(Date.UTC(2026, 0, 7, 12, 0, 30));
  cfg.limits.free_rpm_at_zero_balance = 1;
  user('multi').balance = 0.045; // spent 3 × 0.015: nothing left
  await reload();
  t.equal((await modelCall(g, K.multi, 'messages', 'free-model')).status, 200, 'the free call of the minute');
  keyCfg('multi').quota = 0.01;
  await reload();
  assertError(
    t,
    await modelCall(g, K.multi, 'messages', 'free-model'),
    { status: 429, type: 'rate_limit_exceeded', retryAfter: '30' },
    'free RPM first',
  );
  assertError(t, await modelCall(g, K.multi, 'messages', 'claude-model', COST), E.billing, 'a priced model: billing_error');
});
