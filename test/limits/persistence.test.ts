/**
 * Persistence of money and limits (issue item 11): balances, usage, key quota, windows, plan
 * allowances and spend caps survive a graceful restart on the same `store.path`, a config reload,
 * and a `kill -9` of a real gateway process (`node bin/gateway.js start --config FILE`) once the
 * journal has been flushed.
 */
import t from 'tap';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { baseConfig, bearer, call, startGateway, tmpDir, writeConfig } from '../helpers/gateway.js';
import { ManualClock } from '../../core/clock.js';
import { assertError, key, modelCall, sleep, usageOf } from './helpers.js';
import { killHard, startProcess } from '../faults/helpers.js';

const K = { quota: key(0x800), windows: key(0x801), wallet: key(0x802), plan: key(0x803), capped: key(0x804), reset: key(0x805) };
const ADMIN = 'persistence-admin-token-0123456789';
/** 15000 micro-USD on claude-model. */
const COST = { input: 1000, output: 800 };

function config(storePath: string): Record<string, any> {
  const cfg = baseConfig();
  cfg.server.admin_token = ADMIN;
  cfg.store = { kind: 'memory', path: storePath, flush_interval: '100ms' };
  cfg.groups['tiny-plan'] = { kind: 'messages', billing: 'plan', models: ['claude-model'], plan: { daily: 0.02, weekly: 1, monthly: 1 } };
  cfg.users.wallet = { balance: 1 };
  cfg.users.planner = { balance: 0, subscriptions: [{ group: 'tiny-plan', expires_at: '2099-01-01T00:00:00Z' }] };
  cfg.users.capped = { balance: 10, spend_caps: { weekly: 0.02 } };
  cfg.keys.push(
    { key: K.quota, name: 'p-quota', user: 'alice', group: 'messages', quota: 0.03 },
    { key: K.windows, name: 'p-windows', user: 'alice', group: 'messages', windows: { '5h': 0.02, '1d': 1, '7d': 2 } },
    { key: K.wallet, name: 'p-wallet', user: 'wallet', group: 'messages' },
    { key: K.plan, name: 'p-plan', user: 'planner', group: 'tiny-plan' },
    { key: K.capped, name: 'p-capped', user: 'capped', group: 'messages' },
    { key: K.reset, name: 'p-reset', user: 'alice', group: 'messages', quota: 0.015 },
  );
  return cfg;
}

const ALL = Object.values(K);

/** Spends on every kind of limit: each ends up exhausted (the reset key is exhausted, then reset). */
async function spend(t: any, g: { url: string }) {
  for (const k of [K.quota, K.quota, K.windows, K.windows, K.wallet, K.plan, K.plan, K.capped, K.capped, K.reset]) {
    t.equal((await modelCall(g, k, 'messages', 'claude-model', COST)).status, 200);
  }
  t.equal((await call(`${g.url}/admin/keys/p-reset/reset-quota`, { method: 'POST', headers: bearer(ADMIN) })).status, 200);
}

async function snapshot(g: { url: string }): Promise<Record<string, any>> {
  const out: Record<string, any> = {};
  for (const k of ALL) {
    const u = await usageOf(g, k);
    // rpm / tpm cover the last 60 s and are volatile by design.
    delete u.usage.rpm;
    delete u.usage.tpm;
    out[k] = u;
  }
  return out;
}

async function expectLimited(t: any, g: { url: string }, label: string) {
  assertError(
    t,
    await modelCall(g, K.quota, 'messages', 'claude-model', COST),
    { status: 429, code: 'API_KEY_QUOTA_EXHAUSTED' },
    `${label}: quota`,
  );
  assertError(
    t,
    await modelCall(g, K.windows, 'messages', 'claude-model', COST),
    { status: 429, type: 'rate_limit_exceeded', message: 'api key 5小时限额已用完' },
    `${label}: window`,
  );
  assertError(
    t,
    await modelCall(g, K.plan, 'messages', 'claude-model', COST),
    { status: 429, code: 'USAGE_LIMIT_EXCEEDED' },
    `${label}: plan`,
  );
  assertError(
    t,
    await modelCall(g, K.capped, 'messages', 'claude-model', COST),
    { status: 402, type: 'spend_cap_reached' },
    `${label}: spend cap`,
  );
}

t.test('graceful restart on the same store.path, and a reload, keep every counter', async (t) => {
  const dir = tmpDir('gw-persist-');
  const clock = new ManualClock(Date.UTC(2026, 0, 7, 10, 0, 0));
  const cfg = config(path.join(dir, 'data'));
  let g = await startGateway(cfg, { clock });
  await spend(t, g);
  clock.advance(61_000);
  const before = await snapshot(g);
  t.match(before[K.wallet], { balance: 0.985 });
  t.match(before[K.quota], { status: 'quota_exhausted', quota: { used: 0.03 } });
  t.match(before[K.reset], { status: 'active', quota: { used: 0 } });
  t.match(before[K.plan], { subscription: { daily_usage_usd: 0.03 } });
  t.match(before[K.windows].rate_limits[0], { window: '5h', used: 0.03, window_start: '2026-01-07T10:00:00.000Z' });
  await expectLimited(t, g, 'before');

  writeFileSync(g.file, YAML.stringify(cfg));
  t.equal(await g.gw.reload(), undefined, 'reloaded');
  t.same(await snapshot(g), before, 'a reload keeps everything');
  await g.close();

  g = await startGateway(cfg, { clock });
  t.teardown(() => g.close());
  t.same(await snapshot(g), before, 'a restart keeps everything');
  await expectLimited(t, g, 'after restart');
  t.equal((await modelCall(g, K.reset, 'messages', 'claude-model', COST)).status, 200, 'the reset survived too');
});

t.test('kill -9 of a gateway process after the journal flush loses nothing', async (t) => {
  const dir = tmpDir('gw-kill9-');
  const cfg = config(path.join(dir, 'data'));
  cfg.server.port = 0;
  const file = writeConfig(cfg, dir);
  const first = await startProcess(file);
  t.teardown(() => killHard(first));
  await spend(t, first);
  await sleep(1_100); // > flush_interval; also moves past the second of the last request
  const before = await snapshot(first);
  t.match(before[K.wallet], { balance: 0.985 });
  await killHard(first);
  t.equal(first.child.signalCode, 'SIGKILL');

  const second = await startProcess(file);
  t.teardown(() => killHard(second));
  t.match(second.stderr(), /store loaded/);
  t.same(await snapshot(second), before, 'balances, usage, windows and quotas are back');
  await expectLimited(t, second, 'after kill -9');
  t.equal((await modelCall(second, K.reset, 'messages', 'claude-model', COST)).status, 200, 'the quota reset survived');
});
