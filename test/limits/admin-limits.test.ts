/**
 * Limits an operator changes through the admin API apply from the next request: a stored user's
 * RPM and spend cap, a stored key's quota and window, each tightened and then loosened again. The
 * limit plugins make each claim once per user, key or group object (a change makes new objects,
 * core/accounts/directory.ts), so this is what would show a claim kept past its change.
 */
import t from 'tap';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { AdminClient } from '../helpers/admin.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, modelCall } from './helpers.js';

const ADMIN = 'admin-token-for-tests-0123456789';
/** $0.015 on claude-model. */
const COST = { input: 1000, output: 800 };
// A Wednesday noon: no minute, window or week boundary is crossed unless a test moves the clock.
const clock = new ManualClock(Date.UTC(2026, 0, 7, 12, 0, 0));
let g: TestGateway;
let admin: AdminClient;

t.before(async () => {
  const cfg = baseConfig();
  cfg.server.admin_token = ADMIN;
  g = await startGateway(cfg, { clock });
  admin = await new AdminClient(g.url, ADMIN).init();
});
t.teardown(() => g.close());

/** A stored user with $10 and a key of the messages group; the key's secret. */
async function customer(name: string): Promise<string> {
  t.equal((await admin.post('/admin/users', { name })).status, 201);
  const top = await admin.post(`/admin/users/${name}/topups`, { amount_usd: 10, reference: 'test' }, { 'idempotency-key': `${name}-1` });
  t.equal(top.status, 201);
  const k = await admin.post('/admin/keys', { user: name, group: 'messages', name: `${name}-key` });
  t.equal(k.status, 201);
  return k.json.key as string;
}

const call = (key: string) => modelCall(g, key, 'messages', 'claude-model', COST);

t.test("a user's RPM: set, then lifted", async (t) => {
  const key = await customer('rpm-user');
  t.equal((await call(key)).status, 200, 'no RPM yet');
  t.equal((await admin.patch('/admin/users/rpm-user', { rpm: 1 })).status, 200);
  t.equal((await call(key)).status, 200, 'the first request of the minute under RPM 1');
  assertError(t, await call(key), { status: 429, type: 'rate_limit_exceeded', message: /user/ }, 'the second');
  t.equal((await admin.patch('/admin/users/rpm-user', { rpm: 0 })).status, 200);
  t.equal((await call(key)).status, 200, 'RPM lifted: served in the same minute');
});

t.test("a user's weekly spend cap: set below what was spent, then raised", async (t) => {
  const key = await customer('cap-user');
  t.equal((await call(key)).status, 200, 'no cap yet: $0.015 spent');
  t.equal((await admin.patch('/admin/users/cap-user', { spend_caps: { weekly_usd: 0.01 } })).status, 200);
  assertError(t, await call(key), { status: 402, type: 'spend_cap_reached' }, 'capped at $0.01');
  t.equal((await admin.patch('/admin/users/cap-user', { spend_caps: { weekly_usd: 1 } })).status, 200);
  t.equal((await call(key)).status, 200, 'raised to $1');
});

t.test("a key's quota: set below what was spent, then raised", async (t) => {
  const key = await customer('quota-user');
  t.equal((await call(key)).status, 200, 'no quota yet: $0.015 spent');
  t.equal((await admin.patch('/admin/keys/quota-user-key', { quota_usd: 0.01 })).status, 200);
  assertError(t, await call(key), { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED' }, 'quota $0.01');
  t.equal((await admin.patch('/admin/keys/quota-user-key', { quota_usd: 1 })).status, 200);
  t.equal((await call(key)).status, 200, 'raised to $1');
});

t.test("a key's 5h window: set, used up, then raised", async (t) => {
  const key = await customer('window-user');
  t.equal((await admin.patch('/admin/keys/window-user-key', { windows_usd: { '5h': 0.02 } })).status, 200);
  t.equal((await call(key)).status, 200, 'the window starts: $0.015 of $0.02');
  t.equal((await call(key)).status, 200, '$0.015 < $0.02: admitted, reaches $0.03');
  assertError(t, await call(key), { status: 429, type: 'rate_limit_exceeded', message: 'api key 5小时限额已用完' }, 'used up');
  t.equal((await admin.patch('/admin/keys/window-user-key', { windows_usd: { '5h': 1 } })).status, 200);
  t.equal((await call(key)).status, 200, 'raised to $1');
});
